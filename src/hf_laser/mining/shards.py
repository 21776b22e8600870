"""Embeddings of a text file in `.npy` shards, one process per rank (multi-GPU / nodes), and reading them back as
one matrix; every shard and the manifest say what they were computed from (`hf_laser.outputs`)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..defaults import DEFAULT_CHUNK_LINES, DEFAULT_MAX_SENTENCE_TOKENS
from ..outputs import (
    embedding_identity,
    file_sha256,
    identity_changes,
    output_lock,
    read_json,
    scan_input,
    write_json_atomic,
    write_npy_atomic,
)
from .embeddings import ShardedEmbeddings
from .lines import iter_lines, line_byte_offsets


def embedding_key(input_path: str | os.PathLike, lang: str) -> str:
    """Stable file stem for the embeddings of ``input_path`` in language ``lang`` inside an embedding directory."""
    p = Path(input_path).resolve()
    h = hashlib.sha1(str(p).encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"{p.name}.{lang}.{h}"


def plan_shards(num_lines: int, num_shards: int) -> list[tuple[int, int]]:
    """Split lines ``[0, num_lines)`` into ``num_shards`` contiguous ranges whose sizes differ by at most one."""
    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    base, extra = divmod(num_lines, num_shards)
    out, a = [], 0
    for s in range(num_shards):
        b = a + base + (1 if s < extra else 0)
        out.append((a, b))
        a = b
    return out


def prepare_shards(input_path: str | os.PathLike, num_shards: int) -> dict:
    """What every shard job of `input_path` needs from the whole file, computed once (two passes): its scan
    ([`~hf_laser.outputs.scan_input`]: size, time, lines, sha256), the shards' line bounds and where they start in
    bytes. Given to [`embed_shards`] as `prepared`, so that 1,000 shard jobs do not each read a 100 GB file (to hash
    it and to find their lines)."""
    info = scan_input(input_path)
    bounds = plan_shards(info["lines"], int(num_shards))
    try:
        starts = line_byte_offsets(input_path, [a for a, _ in bounds] + [info["lines"]])
        st = os.stat(input_path)
    except (ValueError, OSError):
        st = None
    if st is None or (st.st_size, st.st_mtime_ns) != (info["size"], info["mtime_ns"]):
        raise RuntimeError(f"{input_path} changed while it was being scanned; run the command again when it is "
                           "written")
    return {"info": info, "num_shards": int(num_shards), "byte_bounds": list(zip(starts[:-1], starts[1:]))}


def _prepared_for(prepared: dict | None, input_path, num_shards: int) -> dict | None:
    """`prepared` when it is of this file as it is now (same path, size and modification time) and this shard
    count; else None (the file is scanned again: a file that changed since is never embedded under its old hash)."""
    if prepared is None or prepared.get("num_shards") != num_shards:
        return None
    info = prepared["info"]
    try:
        st = os.stat(input_path)
    except OSError:
        return None
    same = (info["path"] == str(Path(input_path).resolve()) and info["size"] == st.st_size
            and info["mtime_ns"] == st.st_mtime_ns)
    return prepared if same else None


def manifest_path(embed_dir: Path, key: str) -> Path:
    return embed_dir / f"{key}.shards.json"


class StaleEmbeddingsError(ValueError):
    """Embedding shards that were computed from something else than what is asked now (message: what changed)."""

def _identity_tag(identity: dict, num_shards: int) -> str:
    blob = json.dumps({"identity": identity, "num_shards": num_shards}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def shard_identity(encoder, info: dict, lang: str, *, pretokenized: bool, fp16: bool, max_tokens: int,
                    max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS) -> dict:
    """The [`embedding_identity`] of a whole file embedded with `embed_shards` / `mine` (default batching)."""
    return embedding_identity(encoder, info, lang=lang, pretokenized=pretokenized, fp16=fp16, normalize=False,
                              max_tokens=max_tokens, batch_size=None, chunk_lines=DEFAULT_CHUNK_LINES,
                              max_sentence_tokens=max_sentence_tokens)


def dist_env() -> tuple[int, int]:
    """(rank, world_size) from the environment of ``torchrun`` / ``accelerate launch`` (``RANK``, ``WORLD_SIZE``)."""
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return rank, world


def embed_shards(
    encoder,
    input_path: str | os.PathLike,
    embed_dir: str | os.PathLike,
    lang: str,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    num_shards: int | None = None,
    pretokenized: bool = False,
    fp16: bool = False,
    max_tokens: int = 12000,
    max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS,
    show_progress_bar: bool | None = None,
    num_proc: int = 1,
    prepared: dict | None = None,
) -> Path | None:
    """Embed this process's share of a text file into ``.npy`` shards (one call per process).

    The file's lines are split into ``num_shards`` contiguous ranges (default: one per process); process ``rank`` of
    ``world_size`` embeds shards ``rank, rank + world_size, ...`` with ``encoder.encode_file`` (streamed, resumable).
    Each finished shard leaves a ``.done.json`` marker tagged with what it was computed from (the file's content,
    language, model, options: :func:`hf_laser.outputs.embedding_identity`); the process that finds all markers of
    this computation present writes the manifest ``{embedding_key}.shards.json`` (with that identity) that
    :func:`load_embedding_shards` and ``hf-laser mine --embed-dir`` read. Re-running skips the finished shards of the
    same computation and recomputes the others (e.g. after the file was edited). ``num_proc``: processes that
    tokenize the next chunk while the model embeds this one (``encode_file``'s; the output is the same).
    ``prepared``: [`prepare_shards`] of the file (used only while the file's size and modification time are the
    ones it scanned), so that a shard job reads only its own lines.

    Returns:
        The manifest path when all shards are done after this call, else None.
    """
    if rank is None or world_size is None:
        env_rank, env_world = dist_env()
        rank = env_rank if rank is None else rank
        world_size = env_world if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world_size {world_size}")
    embed_dir = Path(embed_dir)
    embed_dir.mkdir(parents=True, exist_ok=True)
    key = embedding_key(input_path, lang)
    num_shards = world_size if num_shards is None else int(num_shards)
    prepared = _prepared_for(prepared, input_path, num_shards)
    info = prepared["info"] if prepared else scan_input(input_path)
    n = info["lines"]
    if n == 0:
        raise ValueError(f"input file {input_path} is empty")
    identity = shard_identity(encoder, info, lang, pretokenized=pretokenized, fp16=fp16, max_tokens=max_tokens,
                               max_sentence_tokens=max_sentence_tokens)
    tag = _identity_tag(identity, num_shards)
    bounds = plan_shards(n, num_shards)
    names = [f"{key}.shard{s:05d}-of-{num_shards:05d}" for s in range(num_shards)]

    for s in range(rank, num_shards, world_size):
        # one writer per shard (another job on the same shard: OutputBusyError naming its process)
        with output_lock(embed_dir / f"{names[s]}.npy"):
            _embed_shard(encoder, input_path, embed_dir, names[s], bounds[s], tag, lang=lang,
                         pretokenized=pretokenized, fp16=fp16, max_tokens=max_tokens,
                         max_sentence_tokens=max_sentence_tokens, show_progress_bar=show_progress_bar,
                         num_proc=num_proc, byte_range=prepared["byte_bounds"][s] if prepared else None)
    return _finalize_manifest(embed_dir, key, input_path, lang, n, names, bounds, identity, tag)


def _embed_shard(encoder, input_path, embed_dir: Path, name: str, bounds: tuple[int, int], tag: str, *, lang,
                 pretokenized, fp16, max_tokens, max_sentence_tokens, show_progress_bar, num_proc: int = 1,
                 byte_range: tuple[int, int] | None = None) -> None:
    """Embeds one shard (lines `bounds` of the input) unless its `.done.json` marker says it is done already."""
    a, b = bounds
    done = embed_dir / f"{name}.done.json"
    txt = embed_dir / f"{name}.txt"
    npy = embed_dir / f"{name}.npy"
    if _done_tag(done) == tag and npy.exists() and _shard_problem(npy, read_json(done).get("sha256")) is None:
        return
    done.unlink(missing_ok=True)
    # the shard's text, rewritten from the input (encode_file resumes its embedding when the content is the same)
    tmp = txt.with_name(txt.name + ".tmp")
    if byte_range is not None:  # the shard's bytes, where prepare_shards found them (every line ends in '\n')
        try:
            _copy_lines(input_path, tmp, *byte_range, b - a)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    else:
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as out:
            for pos, line in enumerate(iter_lines(input_path)):
                if pos >= b:
                    break
                if pos >= a:
                    out.write(line + "\n")
    os.replace(tmp, txt)
    if b > a:
        emb = encoder.encode_file(
            str(txt), str(npy), lang=lang, pretokenized=pretokenized, fp16=fp16, max_tokens=max_tokens,
            max_sentence_tokens=max_sentence_tokens, show_progress_bar=show_progress_bar, resume=True,
            num_proc=num_proc,
        )
        rows, dim = int(emb.shape[0]), int(emb.shape[1])
        del emb
    else:  # more shards than lines
        dim = int(encoder.dim)
        write_npy_atomic(npy, np.zeros((0, dim), dtype=np.float16 if fp16 else np.float32))
        rows = 0
    if rows != b - a:
        raise RuntimeError(f"shard {npy} has {rows} rows but {b - a} lines were embedded")
    write_json_atomic(done, {"start": a, "end": b, "rows": rows, "dim": dim, "file": npy.name, "tag": tag,
                             "sha256": file_sha256(npy)})


def _copy_lines(source, target: Path, start: int, stop: int, lines: int) -> None:
    """Bytes `[start, stop)` of `source` into `target`, a newline added if the last line has none; exactly `lines`
    lines, or an error (the file is not the one that was scanned)."""
    newlines, last = 0, b"\n"
    with open(source, "rb") as src, open(target, "wb") as out:
        src.seek(start)
        left = stop - start
        while left > 0 and (chunk := src.read(min(left, 1 << 24))):
            out.write(chunk)
            newlines, last, left = newlines + chunk.count(b"\n"), chunk[-1:], left - len(chunk)
        if stop > start and last != b"\n":
            out.write(b"\n")
            newlines += 1
    if left or newlines != lines:
        raise RuntimeError(f"{source} changed while it was being embedded: bytes {start}-{stop} hold {newlines} "
                           f"lines, {lines} expected; run the command again")


def _done_tag(done: Path) -> str | None:
    try:
        return read_json(done).get("tag")
    except (OSError, ValueError, AttributeError):
        return None


def _shard_problem(npy: Path, recorded) -> str | None:
    """Why a finished shard's content cannot be trusted (None: its sha256 is the one recorded, `recorded`, when the
    shard was finished: in its `.done.json` marker and the shards' manifest)."""
    if not isinstance(recorded, str):
        return "no checksum of its content was recorded (written by an older hf-laser)"
    try:
        if file_sha256(npy) != recorded:
            return "its content changed after it was written (sha256 differs from the one recorded)"
    except OSError as err:
        return f"it cannot be read ({err.strerror or err})"
    return None


def _finalize_manifest(embed_dir, key, input_path, lang, n, names, bounds, identity, tag) -> Path | None:
    manifest = manifest_path(embed_dir, key)
    shards = []
    for name, (a, b) in zip(names, bounds):
        done = embed_dir / f"{name}.done.json"
        if _done_tag(done) != tag:
            return None
        info = read_json(done)
        shards.append({"file": info["file"], "start": a, "end": b, "dim": info["dim"], "sha256": info.get("sha256")})
    write_json_atomic(
        manifest,
        {"source": str(Path(input_path).resolve()), "lang": lang, "num_lines": n, "num_shards": len(names),
         "dim": shards[0]["dim"], "shards": shards, "identity": identity, "tag": tag},
    )
    return manifest


def load_embedding_shards(
    embed_dir: str | os.PathLike, input_path: str | os.PathLike, lang: str, *, identity: dict | None = None
) -> ShardedEmbeddings | None:
    """Open the shards written by :func:`embed_shards` for ``input_path`` as one memory-mapped matrix.

    Returns None when there is no complete manifest. Raises :class:`StaleEmbeddingsError` (naming what changed) when
    the manifest was computed from something else: another content of the text file (sha256), or, when ``identity``
    (:func:`hf_laser.outputs.embedding_identity` of what is asked now) is given, another model, language or option;
    a manifest of an older hf-laser (without identity) is stale too.
    """
    embed_dir = Path(embed_dir)
    manifest = manifest_path(embed_dir, embedding_key(input_path, lang))
    if not manifest.exists():
        return None
    try:
        info = read_json(manifest)
        old = info["identity"]
        if not isinstance(old, dict) or not isinstance(info["shards"], list) \
                or not all(isinstance(sh, dict) for sh in info["shards"]):
            raise TypeError("identity / shards of the wrong type")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StaleEmbeddingsError(f"stale embedding shards: {manifest} is unreadable or from an older hf-laser "
                                   f"({type(err).__name__}); run embed-shards again") from None
    if identity is None:
        current = scan_input(input_path)
        changes = identity_changes({k: old.get(k) for k in ("input_sha256", "input_size", "lines")},
                                   {"input_sha256": current["sha256"], "input_size": current["size"],
                                    "lines": current["lines"]})
    else:
        changes = identity_changes(old, identity)
    if changes:
        raise StaleEmbeddingsError(f"stale embedding shards {manifest.name} for {input_path}: " + "; ".join(changes))
    arrays = []
    for sh in info["shards"]:
        if problem := _shard_problem(embed_dir / sh["file"], sh.get("sha256")):
            raise StaleEmbeddingsError(f"stale embedding shard {sh['file']} of {input_path}: {problem}; run "
                                       "embed-shards again (it recomputes that shard)")
        a = np.load(embed_dir / sh["file"], mmap_mode="r")
        if a.shape[0] != sh["end"] - sh["start"]:
            raise ValueError(f"shard {sh['file']} has {a.shape[0]} rows, expected {sh['end'] - sh['start']}")
        arrays.append(a)
    return ShardedEmbeddings(arrays)
