"""The ASGI application of `hf-laser serve` (Starlette): one `LaserEncoder` kept loaded behind HTTP, or a model
set (LASER2 + LASER3 students, [`~hf_laser.model_set.RoutedLaserEncoder`]): every member loaded at start, each input
embedded by the model of its `lang` (required then: `"auto"` cannot choose a student), `/v1/models` listing them.

Routes:

- `POST /v1/embeddings`: the OpenAI embeddings API (`{"input": str | [str], "model", "encoding_format": "float" |
  "base64", "dimensions", "user"}` plus `"lang"`: one code, `"auto"` (default) or one code per input).
- `GET|POST /vectorize`: the original LASER docker server's API (`q` = sentences, one per line; `lang`, default
  `en`) → `{"content": q, "embedding": [[...], ...]}`.
- `GET /health`, `GET /v1/models`, `GET /v1/models/{id}`, and the demo page at `/`.

Every error is a JSON body in the OpenAI format (`{"error": {"message", "type", "param", "code"}}`) with a 4xx status
for what the client sent (400 bad request, 413 over a limit, 404/405/415) and 500 for a failure of the server.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ..model_set import UnknownLanguage
from ..text.langid import detect, is_auto
from ..text.languages import check_language
from ..text.preprocessing import KNOWN_CODES, normalize_lang
from .batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT_MS, BatcherStats, DynamicBatcher

logger = logging.getLogger("hf_laser.serve")

OPENAI_FIELDS = frozenset({"input", "model", "encoding_format", "dimensions", "user", "lang"})
TOK_STAGE = "--"  # /vectorize lang of the original server: the text is already tokenized, BPE only
QUOTE_CHARS = 40  # at most this much of a value the client sent is quoted back (a language code, a path, a name)
MAX_MESSAGE_CHARS = 8_192  # an error message is cut there, whatever it quotes


def quote(value) -> str:
    """`repr` of a value the client sent, at most [`QUOTE_CHARS`] of it (a longer one: its start and its length)."""
    text = str(value)
    if len(text) <= QUOTE_CHARS:
        return repr(text)
    return f"{text[:QUOTE_CHARS]!r}... ({len(text):,} characters)"


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; over a limit the answer is 413."""

    max_inputs: int = 2048  # sentences per request (OpenAI's limit too)
    max_request_tokens: int = 100_000  # LASER tokens per request, </s> of every sentence included
    max_body_bytes: int = 16 * 1024 * 1024  # request body
    # one input's characters, checked before it is tokenized (one input is one tokenizer job: 16 MB took 27 s and
    # made every other request wait); 4 characters per token of the default token budget
    max_input_chars: int = 400_000
    # one input's LASER tokens (OpenAI's limit per input): a sentence is one sequential LSTM pass that no batching can
    # cut, so one of 95,000 tokens held the model (and every other request) for 30 s
    max_input_tokens: int = 8192
    body_timeout_s: float = 30.0  # to receive a whole body (a client trickling bytes holds a connection no longer)


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Security:
    """Who may use the server: `api_key` (when set, every route but `/health` and the demo page's HTML needs
    `Authorization: Bearer KEY`) and the `Host` names a request may carry (`"*"`: any; by default the loopback
    names, so a web page whose name resolves to this machine, DNS rebinding, is refused)."""

    api_key: str | None = None
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS

    def host_allowed(self, host_header: str | None) -> bool:
        if "*" in self.allowed_hosts:
            return True
        if not host_header:
            return False
        host = host_header.strip().lower()
        host = host[1:host.index("]")] if host.startswith("[") and "]" in host else host.rsplit(":", 1)[0] \
            if host.count(":") == 1 else host
        return host in {h.lower().strip("[]") for h in self.allowed_hosts}


class ApiError(Exception):
    """An error answered as `{"error": {...}}` with HTTP `status`."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        if len(message) > MAX_MESSAGE_CHARS:
            message = f"{message[:MAX_MESSAGE_CHARS]}... (cut)"
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers

    def response(self) -> Response:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        response = json_response({"error": {"message": self.message, "type": kind, "param": self.param,
                                            "code": self.code}}, self.status)
        response.headers.update(self.headers or {})
        return response


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""

def json_response(obj, status: int = 200) -> Response:
    return Response(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                    media_type="application/json")


def split_lines(q: str) -> list[str]:
    """The sentences of a `/vectorize` `q` as the original server saw them: lines split on `\\n` only, a final
    newline ending the last line (`"a\\nb\\n"` is two sentences)."""
    lines = q.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def demo_page() -> str:
    return resources.files(__package__).joinpath("static", "index.html").read_text(encoding="utf-8")


class EmbeddingService:
    """The model, its batcher and the request handling shared by the routes."""

    def __init__(self, encoder, *, model_id: str | None = None, limits: Limits = Limits(),
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_wait_ms: float = DEFAULT_MAX_WAIT_MS):
        if encoder.tokenizer is None:
            raise ValueError("the model has no tokenizer (converted without subword files); the server embeds text")
        self.encoder = encoder
        self.model_id = model_id or "laser"
        self.limits = limits
        self.created = int(time.time())
        self.routed = hasattr(encoder, "route")
        # one batcher per model: "model" for a single one, "default" / FLORES codes for a set's members
        keys = list(encoder.members()) if self.routed else ["model"]
        self.batchers = {key: DynamicBatcher(self._member_embedder(key), max_batch_tokens=max_batch_tokens,
                                             max_wait_ms=max_wait_ms) for key in keys}
        self.batcher = next(iter(self.batchers.values()))
        self._max_batch_tokens = max_batch_tokens
        self._tokenizer_pool: ThreadPoolExecutor | None = None
        self._started = time.time()
        self.active = 0  # embedding requests being answered now
        self.disconnected = 0  # requests whose client went away before the answer (not computed, or discarded)

    def _member_embedder(self, key: str):
        encoder = self.encoder.member(key) if self.routed else self.encoder  # (a set's members load here)

        def embed_ids(ids):
            return encoder.encode_ids(ids, max_tokens=self._max_batch_tokens, show_progress_bar=False)

        return embed_ids

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        self._tokenizer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-laser-tokenizer")
        for batcher in self.batchers.values():
            batcher.start()
        # warm-up: the language detector's model (~0.6 s to load) and a first call of every model, not in a client's
        # time
        warm_langs = {key: ("en" if key == "default" else key) for key in self.batchers} if self.routed else \
            {"model": "auto"}
        for lang in warm_langs.values():
            _, _, ids, keys = await self.token_ids(["Warm-up sentence."], lang)
            await self._embed_grouped(ids, keys)
        for batcher in self.batchers.values():
            batcher.stats = BatcherStats()  # the counters start with the clients

    async def stop(self) -> None:
        for batcher in self.batchers.values():
            await batcher.close()
        self._tokenizer_pool.shutdown(wait=True)

    # ------------------------------------------------------------------ reading requests
    async def read_body(self, request: Request) -> bytes:
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"request body of {int(declared):,} bytes is over the limit of {limit:,} bytes "
                                "(--max-body-bytes)", code="body_too_large")
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise ApiError(413, f"request body over the limit of {limit:,} bytes (--max-body-bytes)",
                                       code="body_too_large")
                    chunks.append(chunk)
        except ClientDisconnect:
            raise ClientGone() from None
        except TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {self.limits.body_timeout_s:g} s "
                                f"({size:,} bytes came; --body-timeout-s)", code="body_timeout") from None
        return b"".join(chunks)

    async def read_json(self, request: Request):
        # JSON only under a JSON type: a text/plain or form POST is a "simple" request any web page may send
        # without CORS (and curl -d sends a form type: -H 'Content-Type: application/json')
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json" and not ctype.endswith("+json"):
            raise ApiError(415, f"{request.url.path} takes application/json, got {ctype or 'no Content-Type'} (curl: "
                                "-H 'Content-Type: application/json')", code="unsupported_media_type")
        return parse_json(await self.read_body(request))

    # ------------------------------------------------------------------ languages and tokens
    def resolve_langs(self, texts: list[str], lang, param: str = "lang", offset: int = 0) -> tuple[list[str], list[str]]:
        """Per-text language codes (normalised; `"auto"` detected as `LaserTokenizer` does) and warnings for
        codes the preprocessing does not know (embedded with the Moses defaults, as `encode` does)."""
        if isinstance(lang, str):
            langs = [lang] * len(texts)
        else:
            langs = list(lang)
        auto = [i for i, code in enumerate(langs) if is_auto(code)]
        if auto:
            default = self.encoder.tokenizer.default_lang
            fallback = "en" if is_auto(default) else default
            for i, code in zip(auto, detect([texts[i] for i in auto], default=fallback)):
                langs[i] = code
        warnings, unknown = [], {}
        for i, code in enumerate(langs):
            langs[i] = normalize_lang(code)
            if langs[i] not in KNOWN_CODES:
                unknown.setdefault(code, i)
        for code, i in unknown.items():
            warnings.append(f"unknown language code {quote(code)} ({param}" + (f"[{offset + i}]" if not isinstance(lang, str)
                            else "") + "): preprocessed with the Moses defaults (English non-breaking prefixes, "
                            "generic rules), as LaserEncoder.encode does")
        return langs, warnings

    def _token_ids(self, texts: list[str], lang, offset: int = 0):
        """`(langs, warnings, ids, keys)`: the languages resolved ([`resolve_langs`]), the token ids, and for a
        model set the member of each text (None for a single model). `offset`: the index of `texts[0]` in the
        request (for the warnings)."""
        if self.routed:
            return self._routed_token_ids(texts, lang)
        if lang == TOK_STAGE:
            return TOK_STAGE, [], self.encoder.tokenizer.encode_lines(texts, pretokenized="tok"), None
        langs, warnings = self.resolve_langs(texts, lang, offset=offset)
        return langs, warnings, self.encoder.token_ids(texts, lang=langs), None

    def _routed_token_ids(self, texts: list[str], lang):
        langs = [lang] * len(texts) if isinstance(lang, str) else list(lang)
        if any(code == TOK_STAGE or is_auto(code) for code in langs):
            raise ApiError(400, f"this server is a model set ({', '.join(self.encoder.members())}): it embeds each "
                                "input with the model of its language, so 'lang' must name it (auto-detection and "
                                "'--' pre-tokenized input cannot choose a model)", param="lang")
        try:
            groups = self.encoder._groups(len(texts), langs)
        except UnknownLanguage as err:
            raise ApiError(400, str(err), param="lang") from None
        ids: list = [None] * len(texts)
        keys: list = [None] * len(texts)
        for key, (rows, member_langs) in groups.items():
            member_ids = self.encoder.member(key).token_ids([texts[i] for i in rows], lang=member_langs)
            for i, member_lang, row_ids in zip(rows, member_langs, member_ids):
                # (the form every answer gives: LASER's preprocessing code, as a single model's server says it)
                ids[i], keys[i], langs[i] = row_ids, key, normalize_lang(member_lang)
        return langs, [], ids, keys

    async def token_ids(self, texts: list[str], lang):
        """[`_token_ids`] in the tokenizer thread (language detection and preprocessing are CPU work), with the
        limits checked before the work they protect: each input's characters before any is tokenized, the token
        budget after each job. A request is tokenized in jobs of at most TOKENIZER_JOB_CHARS characters, queued in
        the one tokenizer thread behind those of other requests, so a large request does not hold it alone."""
        limit = self.limits.max_input_chars
        for i, text in enumerate(texts):
            if len(text) > limit:
                raise ApiError(413, f"input[{i}] is {len(text):,} characters, over the limit of {limit:,} per input "
                                    "(--max-input-chars); split it", param="input", code="input_too_long")
        loop = asyncio.get_running_loop()
        all_langs: list | str = []
        all_warnings, all_ids, all_keys, tokens = [], [], [], 0
        for start, stop in _tokenizer_jobs(texts):
            part_lang = lang if isinstance(lang, str) else lang[start:stop]
            try:
                langs, warnings, ids, keys = await loop.run_in_executor(
                    self._tokenizer_pool, self._token_ids, texts[start:stop], part_lang, start)
            except (ValueError, TypeError) as err:
                raise ApiError(400, f"cannot preprocess the input: {err}", param="input") from err
            for i, row in enumerate(ids):
                if len(row) > self.limits.max_input_tokens:
                    raise ApiError(413, f"input[{start + i}] is {len(row):,} tokens, over the limit of "
                                        f"{self.limits.max_input_tokens:,} per input (--max-input-tokens); split it",
                                   param="input", code="input_too_long")
            tokens += sum(len(s) for s in ids)
            if tokens > self.limits.max_request_tokens:
                raise ApiError(413, f"the input is {'at least ' if stop < len(texts) else ''}{tokens:,} tokens, over "
                                    f"the limit of {self.limits.max_request_tokens:,} per request "
                                    "(--max-request-tokens); send it in several requests",
                               param="input", code="too_many_tokens")
            all_langs = langs if langs == TOK_STAGE else [*all_langs, *langs]
            all_warnings += [w for w in warnings if w not in all_warnings]
            all_ids += ids
            all_keys += keys or []
        return all_langs, all_warnings, all_ids, (all_keys if self.routed else None)

    async def _embed_grouped(self, ids: list[list[int]], keys: list[str] | None) -> np.ndarray:
        """The embeddings of `ids`, each row by the batcher of its member (`keys`; None: the one model)."""
        if keys is None:
            return await self.batcher.embed(ids)
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        parts = await asyncio.gather(*(self.batchers[key].embed([ids[i] for i in rows])
                                       for key, rows in groups.items()))
        out = np.empty((len(ids), parts[0].shape[1]), dtype=parts[0].dtype)
        for rows, part in zip(groups.values(), parts):
            out[rows] = part
        return out

    def check_count(self, n: int, param: str) -> None:
        if n > self.limits.max_inputs:
            raise ApiError(413, f"{n:,} inputs, over the limit of {self.limits.max_inputs:,} per request "
                                "(--max-inputs); send them in several requests", param=param, code="too_many_inputs")

    async def embed(self, request: Request, ids: list[list[int]], keys: list[str] | None = None) -> np.ndarray:
        """The embeddings of `ids` from the batcher (a set: the batcher of each row's member, `keys`);
        [`ClientGone`] (and the request dropped) when the client disconnects first."""
        job = asyncio.ensure_future(self._embed_grouped(ids, keys))
        watch = asyncio.ensure_future(_wait_disconnect(request))
        try:
            await asyncio.wait({job, watch}, return_when=asyncio.FIRST_COMPLETED)
            if job.done():
                return job.result()
            raise ClientGone()
        finally:
            watch.cancel()
            if not job.done():
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)

    # ------------------------------------------------------------------ routes
    async def openai_embeddings(self, request: Request) -> Response:
        body = await self.read_json(request)
        if not isinstance(body, dict):
            raise ApiError(400, f"the body must be a JSON object, got {type(body).__name__}")
        unknown = sorted(set(body) - OPENAI_FIELDS)
        if unknown:
            raise ApiError(400, f"unrecognized request argument(s): {', '.join(unknown)} (accepted: "
                                f"{', '.join(sorted(OPENAI_FIELDS))})", param=unknown[0])
        texts = body.get("input")
        if texts is None:
            raise ApiError(400, "missing 'input': a string or a list of strings", param="input")
        if isinstance(texts, str):
            texts = [texts]
        elif not isinstance(texts, list):
            raise ApiError(400, f"'input' must be a string or a list of strings, got {_json_type(texts)}",
                           param="input")
        if not texts:
            raise ApiError(400, "'input' is empty: give at least one string", param="input")
        self.check_count(len(texts), "input")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                extra = " (token ids are not accepted: send the text)" if isinstance(t, (int, list)) else ""
                raise ApiError(400, f"input[{i}] is {_json_type(t)}, expected a string{extra}", param="input")
            if not t:
                raise ApiError(400, f"input[{i}] is an empty string", param="input")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ApiError(400, f"'model' must be a string, got {_json_type(model)}", param="model")
        fmt = body.get("encoding_format")
        fmt = "float" if fmt is None else fmt
        if fmt not in ("float", "base64"):
            raise ApiError(400, f"'encoding_format' must be 'float' or 'base64', got {fmt!r:.40}",
                           param="encoding_format")
        dims = body.get("dimensions")
        if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims != self.encoder.dim):
            raise ApiError(400, f"'dimensions' can only be {self.encoder.dim} (this model's size), got {dims!r:.40}",
                           param="dimensions")
        lang = check_lang(body.get("lang", "auto"), len(texts), "lang", auto=not self.routed)
        langs, warnings, ids, keys = await self.token_ids(texts, lang)
        emb = await self.embed(request, ids, keys)
        if fmt == "base64":
            emb = emb.astype("<f4", copy=False)
            vectors = [base64.b64encode(row.tobytes()).decode("ascii") for row in emb]
        else:
            vectors = emb
        tokens = sum(len(s) for s in ids)
        out = {"object": "list",
               "data": [{"object": "embedding", "index": i, "embedding": vectors[i], "lang": langs[i],
                         # a model set: the member that embedded it, as /v1/models names it
                         **({"model": f"{self.model_id}/{keys[i]}"} if self.routed else {})}
                        for i in range(len(texts))],
               "model": self.model_id, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        if warnings:
            out["warnings"] = warnings
        return json_response(out)

    async def vectorize(self, request: Request) -> Response:
        params = dict(request.query_params)
        if request.method == "POST":
            body = await self.read_body(request)
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == "application/json" or ctype.endswith("+json"):
                data = parse_json(body)
                if not isinstance(data, dict):
                    raise ApiError(400, f"the body must be a JSON object with 'q' (and 'lang'), got "
                                        f"{_json_type(data)}")
                params.update(data)
            elif ctype == "application/x-www-form-urlencoded":
                try:
                    params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False))
                except UnicodeDecodeError:
                    raise ApiError(400, "the form body is not valid UTF-8") from None
            elif ctype == "multipart/form-data":  # (curl -F, an HTML form with enctype multipart)
                params.update(parse_multipart(body, request.headers["content-type"]))
            elif body:
                raise ApiError(415, f"POST /vectorize takes a form (application/x-www-form-urlencoded or "
                                    f"multipart/form-data) or application/json, got {ctype or 'no Content-Type'}",
                               code="unsupported_media_type")
        q = params.get("q")
        if q is None:
            raise ApiError(400, "missing 'q': the sentences, one per line", param="q")
        if not isinstance(q, str):
            raise ApiError(400, f"'q' must be a string (sentences, one per line), got {_json_type(q)}", param="q")
        if not q:
            raise ApiError(400, "'q' is empty: give at least one sentence", param="q")
        lang = params.get("lang")
        if lang is not None and not isinstance(lang, str):
            raise ApiError(400, f"'lang' must be a string, got {_json_type(lang)}", param="lang")
        lang = lang.strip() if lang and lang.strip() else "en"  # the original's default
        if lang != TOK_STAGE:  # (the original server's "--": the text is tokenized already)
            lang = _language(lang, "lang")
        lines = split_lines(q)
        self.check_count(len(lines), "q")
        _, warnings, ids, keys = await self.token_ids(lines, lang)
        emb = await self.embed(request, ids, keys)
        # float64 holds the float32 values exactly and prints them as the original server (Flask) did
        out = {"content": q, "embedding": emb.astype(np.float64)}
        if warnings:
            out["warnings"] = warnings
        return json_response(out)

    async def health(self, request: Request) -> Response:
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch  # loaded with the model

        enc = self.encoder
        return json_response({"status": "ok", "model": self.model_id, "dim": enc.dim, "device": str(enc.device),
                              "quantize": enc.quantize, "torch_threads": torch.get_num_threads(),
                              "uptime_s": round(time.time() - self._started, 1),
                              "max_batch_tokens": self._max_batch_tokens,
                              "max_wait_ms": self.batcher.max_wait * 1000,
                              "limits": {"max_inputs": self.limits.max_inputs,
                                         "max_request_tokens": self.limits.max_request_tokens,
                                         "max_body_bytes": self.limits.max_body_bytes,
                                         "max_input_chars": self.limits.max_input_chars,
                                         "max_input_tokens": self.limits.max_input_tokens,
                                         "body_timeout_s": self.limits.body_timeout_s},
                              "active": self.active, "disconnected": self.disconnected,
                              **({"members": list(self.batchers)} if self.routed else {}),
                              **_summed_stats(self.batchers.values())})

    def model_cards(self) -> list[dict]:
        """This server's model, and for a set each member (`ID/default`, `ID/wol_Latn`, ...) with its languages."""
        card = {"id": self.model_id, "object": "model", "created": self.created, "owned_by": "hf-laser",
                "dim": self.encoder.dim}
        if not self.routed:
            return [card]
        members = [{**card, "id": f"{self.model_id}/{key}", "root": self.model_id,
                    "languages": "every other language" if key == "default" else [key]} for key in self.batchers]
        return [{**card, "members": [m["id"] for m in members]}, *members]

    async def models(self, request: Request) -> Response:
        return json_response({"object": "list", "data": self.model_cards()})

    async def model(self, request: Request) -> Response:
        cards = {card["id"]: card for card in self.model_cards()}
        if request.path_params["model"] not in cards:
            raise ApiError(404, f"model {quote(request.path_params['model'])} not found; this server has "
                                f"{', '.join(map(repr, cards))}", param="model", code="model_not_found")
        return json_response(cards[request.path_params["model"]])

    async def index(self, request: Request) -> Response:
        return HTMLResponse(demo_page())


TOKENIZER_JOB_CHARS = 50_000  # characters of one tokenizer job (an input longer than this is a job of its own)


def _tokenizer_jobs(texts: list[str]) -> list[tuple[int, int]]:
    """`(start, stop)` ranges of `texts` of at most TOKENIZER_JOB_CHARS characters each (at least one text)."""
    jobs, start, chars = [], 0, 0
    for i, text in enumerate(texts):
        if i > start and chars + len(text) > TOKENIZER_JOB_CHARS:
            jobs.append((start, i))
            start, chars = i, 0
        chars += len(text)
    jobs.append((start, len(texts)))
    return jobs


def _summed_stats(batchers) -> dict:
    """The batchers' counters added up (one batcher: its own)."""
    dicts = [b.stats.as_dict() for b in batchers]
    if len(dicts) == 1:
        return dicts[0]
    return {k: max(d[k] for d in dicts) if k == "largest_batch" else sum(d[k] for d in dicts) for k in dicts[0]}


def _json_type(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def parse_multipart(body: bytes, content_type: str) -> dict[str, str]:
    """The text fields of a `multipart/form-data` body (a file field's content as text too: `curl -F q=@file.txt`),
    parsed by the standard library's MIME parser; 400 when it is not one."""

    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n"
                                                  + body)
    if not message.is_multipart() or message.defects:
        raise ApiError(400, "the multipart/form-data body cannot be parsed (its boundary?)")
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name:
            continue
        try:
            fields[name] = part.get_payload(decode=True).decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, f"form field {quote(name)} is not valid UTF-8", param=name[:QUOTE_CHARS]) from None
    return fields


def parse_json(body: bytes):
    if not body.strip():
        raise ApiError(400, "the request body is empty; expected JSON", code="invalid_json")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise ApiError(400, f"the request body is not valid JSON: {err}", code="invalid_json") from None


def _language(code: str, param: str, auto: bool = True) -> str:
    """One language of a request by the command line's rule ([`~hf_laser.text.languages.check_language`]): `auto`, a
    code, or a language name (given back as its FLORES-200 code); anything else is a 400."""

    if is_auto(code):
        return code
    try:
        return check_language(code, auto=auto)
    except ValueError as err:
        if len(code) > QUOTE_CHARS:  # (check_language's message quotes the whole value)
            raise ApiError(400, f"'{param}' is {quote(code)}: not a language code or name (give an ISO 639 code: "
                                "en, fr, ...; a FLORES-200 code: eng_Latn; or an English name)", param=param) from None
        raise ApiError(400, f"'{param}': {err}", param=param) from None


def check_lang(lang, n: int, param: str, auto: bool = True):
    """`lang` of a request: a non-empty code (or `"auto"`), or a list of them with one per input (`auto=False`: a
    model set's server, whose messages do not suggest `auto`, which it refuses)."""
    or_auto = " (or 'auto')" if auto else ""
    if isinstance(lang, str):
        if not lang.strip():
            raise ApiError(400, f"'{param}' is an empty string; give a language code{' or auto' if auto else ''}",
                           param=param)
        return _language(lang.strip(), param, auto)
    if isinstance(lang, list):
        if len(lang) != n:
            raise ApiError(400, f"'{param}' has {len(lang)} codes for {n} inputs: give one per input, or a single "
                                f"code{or_auto} for all", param=param)
        for i, code in enumerate(lang):
            if not isinstance(code, str) or not code.strip():
                raise ApiError(400, f"{param}[{i}] is {_json_type(code)} {code!r:.40}, expected a language "
                                    f"code{or_auto}", param=param)
        return [_language(code.strip(), f"{param}[{i}]", auto) for i, code in enumerate(lang)]
    raise ApiError(400, f"'{param}' must be a language code{', auto,' if auto else ''} or a list with one code per "
                        f"input; got {_json_type(lang)}", param=param)


async def _wait_disconnect(request: Request) -> None:
    """Returns when the client has disconnected (the request's body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def create_app(encoder, *, model_id: str | None = None, limits: Limits = Limits(),
               max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
               security: Security = Security(), on_start=None) -> Starlette:
    """The ASGI app serving `encoder` (a `LaserEncoder` with a tokenizer); run it with uvicorn
    (see `hf_laser.serving.server.serve`). `on_start(loop)` is called in the app's startup, in the server's event
    loop."""
    service = EmbeddingService(encoder, model_id=model_id, limits=limits, max_batch_tokens=max_batch_tokens,
                               max_wait_ms=max_wait_ms)

    def check_access(request: Request, open_route: bool) -> None:
        if not security.host_allowed(request.headers.get("host")):
            raise ApiError(421, f"Host {quote(request.headers.get('host'))} is not one this server answers to "
                                "(--allowed-hosts)", code="host_not_allowed")
        if security.api_key is None or open_route:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), security.api_key.encode()):
            raise ApiError(401, "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    def handle(fn, counted: bool = False, open_route: bool = False):
        async def endpoint(request: Request) -> Response:
            service.active += counted
            try:
                check_access(request, open_route)
                return await fn(request)
            except ApiError as err:
                return err.response()
            except ClientGone:
                service.disconnected += 1
                logger.info("%s %s: the client disconnected; its request was dropped", request.method,
                            request.url.path)
                return Response(status_code=499)
            finally:
                service.active -= counted
        return endpoint

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return ApiError(exc.status_code, f"{exc.detail}: {request.method} {quote(request.url.path)}",
                        code="not_found" if exc.status_code == 404 else None).response()

    async def server_error(request: Request, exc: Exception) -> Response:
        # the client learns only that it failed and which log line says why
        request_id = uuid.uuid4().hex[:16]
        logger.error("request %s: error while serving %s %s: %s: %s", request_id, request.method, request.url.path,
                     type(exc).__name__, " ".join(str(exc).split()), exc_info=exc)
        return ApiError(500, f"internal error (request id {request_id})", code="internal_error").response()

    @asynccontextmanager
    async def lifespan(app):
        if on_start is not None:
            on_start(asyncio.get_running_loop())
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    routes = [
        Route("/", handle(service.index, open_route=True), methods=["GET"]),
        Route("/health", handle(service.health, open_route=True), methods=["GET"]),
        Route("/v1/models", handle(service.models), methods=["GET"]),
        Route("/v1/models/{model:path}", handle(service.model), methods=["GET"]),
        Route("/v1/embeddings", handle(service.openai_embeddings, counted=True), methods=["POST"]),
        Route("/vectorize", handle(service.vectorize, counted=True), methods=["GET", "POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: server_error})
    app.state.service = service
    return app


def model_name(path) -> str:
    """The model id the server reports: the model directory's name (`laser-mini`), or the Hub id."""
    p = Path(str(path))
    return p.name if p.exists() else str(path)
