"""Embedding on Ray Data: a `ray.data.Dataset` of sentences in, the same dataset with their embeddings out, computed by
a pool of `LaserEncoder` actors (one GPU each where asked, CPU actors otherwise), the text preprocessed and
tokenized by a pool of CPU actors first so that an encoder never waits on one preprocessing thread.

Without a running Ray (`ray.init()` not called, no `RAY_ADDRESS`), Ray starts locally: the laptop is the default
cluster, and the same code runs on a cluster when `ray.init(address=...)` (or `RAY_ADDRESS`) points at one. The
model directory must be one every node can read (a shared filesystem) or a Hub id.

`import hf_laser` never imports Ray; this module does, when it is used (the `ray` extra: `pip install
"hf-laser[ray]"`).

Files (`hf-laser embed-shards --ray`): [`embed_files`] splits each text file into shards and gives them out to a
pool of encoder actors, each shard embedded by [`hf_laser.mining.embed_shards`] (the `.npy` shards and manifest
`hf-laser mine --embed-dir` reads, with their guarantees: an identity per shard, a finished shard of the same
computation skipped on a re-run, an interrupted one resumed, one writer per shard). An actor that dies is restarted
by Ray and its shard retried, which resumes it. The embedding directory must be one every node can write (a
shared filesystem).

Example:

```python
import ray
from hf_laser.mining.on_ray import embed_dataset

ds = ray.data.read_text("corpus.en.txt")                  # a "text" column, one row per line
embedded = embed_dataset(ds, "src/hf_laser/models/laser-mini", lang="en")
embedded.write_parquet("embeddings/")                      # or take_batch(), iter_batches(), ...
```
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..defaults import DEFAULT_MAX_SENTENCE_TOKENS, DEFAULT_MAX_TOKENS
from ..encoder import LaserEncoder, decide_speed, load_tokenizer
from ..models import resolve_model
from ..outputs import embedding_identity, identity_changes
from ..text.languages import check_language
from . import embed_shards, load_embedding_shards, mine, prepare_shards
from .embeddings import Embeddings, RowSubset, ShardedEmbeddings, is_whole_npy_map
from .index import build_index, is_exact, resolve_device
from .search import (
    check_knn_inputs,
    database_shards,
    merge_into,
    query_block,
    result_arrays,
    search_shard,
    tqdm_disable,
)
from .shards import embedding_key, manifest_path


def _ray():
    try:
        # lazy: Ray (the ray extra)
        import ray
        import ray.data  # noqa: F401
    except ImportError as err:
        raise ImportError("hf_laser.mining.on_ray needs Ray Data: pip install \"hf-laser[ray]\"") from err
    return ray


def _init_ray(ray) -> None:
    """Connects to `RAY_ADDRESS`'s cluster, else starts a Ray of this process's own on this machine (`"local"`:
    never one found running here, such as another program's: its nodes could go away under this job)."""
    ray.init(address=os.environ.get("RAY_ADDRESS") or "local", log_to_driver=False)


def _start(model, who: str, num_encoders: int | None, gpus_per_encoder: float, loading: dict) -> tuple[str, int]:
    """`(model path every node can use, number of encoder actors)`; connects to Ray (`RAY_ADDRESS`, else a local
    Ray on this machine) unless it is running; with GPUs the encoders' default device is `"cuda"` (in `loading`)."""
    ray = _ray()

    path = resolve_model(model, who=who)
    if Path(str(path)).expanduser().exists():
        path = str(Path(str(path)).expanduser().resolve())  # the same path on every node of a shared filesystem
    if gpus_per_encoder:
        loading.setdefault("device", "cuda")
    if "speed" not in loading:
        loading.setdefault("engine", "torch")  # (as before the library's default became the NumPy engine)
    if loading.get("speed") == "auto":
        # decided once, here on the driver (a measurement on each actor's machine could differ): every actor loads
        # this SpeedChoice, and every output's identity records its engine, dtype and quantisation
        loading["speed"] = decide_speed("auto", path, loading.get("device"))
    if not ray.is_initialized():
        _init_ray(ray)
    if num_encoders is None:
        gpus = ray.cluster_resources().get("GPU", 0) if gpus_per_encoder else 0
        num_encoders = max(1, int(gpus // gpus_per_encoder)) if gpus else 1
    return str(path), num_encoders


def _encoder_actor(ray, cls, gpus_per_encoder: float, tokenizers_per_encoder: int):
    """`cls` as a restartable Ray actor class: one GPU share each, or one CPU; with `tokenizers_per_encoder` > 1
    that many CPUs too (the processes that preprocess the next chunk while the model embeds this one)."""
    if int(tokenizers_per_encoder) < 1:
        raise ValueError(f"tokenizers_per_encoder must be >= 1, got {tokenizers_per_encoder}")
    cpus = int(tokenizers_per_encoder) if tokenizers_per_encoder > 1 else (0 if gpus_per_encoder else 1)
    return ray.remote(num_gpus=gpus_per_encoder or None, num_cpus=cpus, max_restarts=-1,
                      max_task_retries=-1)(cls)


class _Tokenize:
    """CPU actor: a column of raw sentences -> a column of token ids (object array of int32 arrays)."""

    def __init__(self, model: str, lang, text_column: str, ids_column: str):
        tokenizer, _ = load_tokenizer(model, plain=True)
        if tokenizer is None:
            raise ValueError(f"{model} has no tokenizer: give token ids, or convert it with its subword files")
        self.tokenizer, self.lang = tokenizer, lang
        self.text_column, self.ids_column = text_column, ids_column

    def __call__(self, batch: dict) -> dict:
        lines = [str(t) for t in batch[self.text_column]]
        ids = self.tokenizer.encode_lines(lines, lang=self.lang)
        column = np.empty(len(ids), dtype=object)
        column[:] = [np.asarray(x, dtype=np.int32) for x in ids]
        batch[self.ids_column] = column
        return batch


class _Encode:
    """Encoder actor (one per GPU, or per CPU slot): token ids -> embeddings (float32 `(rows, dim)`)."""

    def __init__(self, model: str, ids_column: str, output_column: str, loading: dict, keep_ids: bool,
                 max_tokens: int | None, max_sentence_tokens: int | None):
        self.encoder = LaserEncoder.from_pretrained(model, **loading)
        self.ids_column, self.output_column, self.keep_ids = ids_column, output_column, keep_ids
        self.max_tokens, self.max_sentence_tokens = max_tokens, max_sentence_tokens

    def __call__(self, batch: dict) -> dict:
        ids = [list(x) for x in batch[self.ids_column]]
        batch[self.output_column] = self.encoder.encode_ids(ids, max_tokens=self.max_tokens,
                                                            max_sentence_tokens=self.max_sentence_tokens)
        if not self.keep_ids:
            del batch[self.ids_column]
        return batch


def embed_dataset(dataset, model: str | os.PathLike | None = None, *, lang: str | None = None,
                  text_column: str = "text", output_column: str = "embedding", num_encoders: int | None = None,
                  gpus_per_encoder: float = 0.0, num_tokenizers: int = 1, batch_size: int = 4096,
                  max_tokens: int | None = None, max_sentence_tokens: int | None = None, keep_ids: bool = False,
                  **loading):
    """The rows of `dataset` with `output_column`: the LASER embedding of `text_column` (float32, the encoder's
    dimension), computed by Ray actors (see the module docstring). Lazy, like every Ray Data transformation: nothing
    runs until the result is consumed (`write_parquet`, `take_batch`, `iter_batches`...).

    Args:
        dataset: a `ray.data.Dataset` with a string column `text_column` (`ray.data.read_text` gives `"text"`).
        model: a model directory every node can read, a Hub id, `"laser2"`-style names, or None (laser-mini).
        lang: the sentences' language (one code for the whole dataset, as `hf-laser embed --lang`).
        num_encoders: encoder actors (default: 1 per GPU of the cluster when `gpus_per_encoder` > 0, else 1).
        gpus_per_encoder: GPUs per encoder actor (0: CPU actors).
        num_tokenizers: CPU actors that preprocess and tokenize.
        batch_size: rows per Ray batch (each actor call).
        max_tokens: token budget of the encoder's own batches (default: the encoder's, 12,000 as the original).
        max_sentence_tokens: a longer sentence is embedded as its first N-1 tokens + `</s>` (None: as the encoder's
            default).
        keep_ids: keep the token ids column (`input_ids`) in the output.
        **loading: arguments of `LaserEncoder.from_pretrained` for the encoder actors (`speed="auto"`, `dtype`...);
            with `gpus_per_encoder` > 0 the default device is `"cuda"`.

    Returns:
        A `ray.data.Dataset`: the input's columns plus `output_column`.
    """

    if text_column not in dataset.columns(fetch_if_missing=True):
        raise ValueError(f"the dataset has no column {text_column!r} (its columns: {dataset.columns()})")
    if lang is not None:
        lang = check_language(lang)
    path, num_encoders = _start(model, "embed_dataset", num_encoders, gpus_per_encoder, loading)
    ids_column = "input_ids"
    tokenized = dataset.map_batches(
        _Tokenize, fn_constructor_kwargs={
            "model": path, "lang": lang, "text_column": text_column, "ids_column": ids_column},
        batch_size=batch_size, batch_format="numpy", concurrency=num_tokenizers, num_cpus=1)
    return tokenized.map_batches(
        _Encode, fn_constructor_kwargs={
            "model": path, "ids_column": ids_column, "output_column": output_column, "loading": loading,
            "keep_ids": keep_ids, "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
            "max_sentence_tokens": DEFAULT_MAX_SENTENCE_TOKENS if max_sentence_tokens is None else max_sentence_tokens},
        batch_size=batch_size, batch_format="numpy", concurrency=num_encoders,
        num_gpus=gpus_per_encoder or None, num_cpus=0 if gpus_per_encoder else 1)


class _ShardEncoder:
    """Encoder actor of [`embed_files`]: one shard per call, through `embed_shards` (identity, resume, lock)."""

    def __init__(self, model: str, loading: dict):
        self.encoder = LaserEncoder.from_pretrained(model, **loading)

    def embed(self, path: str, embed_dir: str, lang: str, shard: int, num_shards: int, options: dict,
              prepared: dict | None = None) -> str | None:

        # shard `shard` of `num_shards` is what rank `shard` of a world of `num_shards` embeds: exactly that shard;
        # `prepared` (the driver's one scan of the file) spares each job a read of the whole file
        manifest = embed_shards(self.encoder, path, embed_dir, lang, rank=shard, world_size=num_shards,
                                num_shards=num_shards, show_progress_bar=False, prepared=prepared, **options)
        return None if manifest is None else str(manifest)


class _ParquetEncoder(_ShardEncoder):
    """Encoder actor of [`embed_parquet`]: one Parquet file per call, written beside a marker of its identity."""

    def embed_parquet(self, source: str, target: str, lang: str | None, text_column: str, output_column: str,
                      options: dict) -> str:

        # lazy: pyarrow (with the ray extra)
        import pyarrow as pa
        import pyarrow.fs as pafs

        # lazy: pyarrow (with the ray extra)
        import pyarrow.parquet as pq

        src_fs, src_path = pafs.FileSystem.from_uri(source)
        data = src_fs.open_input_stream(src_path).readall()
        table = pq.read_table(io.BytesIO(data))
        texts = _text_column(table, text_column, source)
        info = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "lines": table.num_rows}
        identity = embedding_identity(self.encoder, info, lang=lang, fp16=options["fp16"],
                                      max_tokens=options["max_tokens"], batch_size=None, chunk_lines=None,
                                      max_sentence_tokens=options["max_sentence_tokens"])
        identity = json.loads(json.dumps({**identity, "text_column": text_column, "output_column": output_column}))
        dst_fs, dst_path = pafs.FileSystem.from_uri(target)
        marker = dst_path + ".done.json"
        if dst_fs.get_file_info(marker).type == pafs.FileType.File:
            old = json.loads(dst_fs.open_input_stream(marker).readall())
            if old == identity and dst_fs.get_file_info(dst_path).type == pafs.FileType.File:
                return f"skipped (done, the same computation): {target}"
            dst_fs.delete_file(marker)  # the marker goes first: a half-rewritten output is never marked done
            why = "; ".join(identity_changes(old, identity)) or "its output was missing"
        else:
            why = None
        vectors = self.encoder.encode(texts, lang=lang, max_tokens=options["max_tokens"],
                                      max_sentence_tokens=options["max_sentence_tokens"],
                                      num_proc=options.get("num_proc", 1))
        vectors = np.asarray(vectors, dtype=np.float16 if options["fp16"] else np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
        if output_column in table.column_names:
            table = table.drop_columns([output_column])
        dst_fs.create_dir(dst_path.rsplit("/", 1)[0], recursive=True)
        with dst_fs.open_output_stream(dst_path) as out:
            pq.write_table(table.append_column(output_column, column), out)
        with dst_fs.open_output_stream(marker) as out:  # last: the output is complete
            out.write(json.dumps(identity, indent=1).encode())
        return f"computed{' anew (' + why + ')' if why else ''}: {target}"


def _text_column(table, column: str, source: str) -> list[str]:
    """The strings of `column`, or a clear error: a missing column, a null or a non-string value (never embedded as
    the text "None")."""
    # lazy: pyarrow (with the ray extra)
    import pyarrow as pa

    if column not in table.column_names:
        raise ValueError(f"{source} has no column {column!r} (its columns: {table.column_names})")
    values = table.column(column)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise ValueError(f"{source}: column {column!r} holds {values.type}, not text")
    if values.null_count:
        first = values.to_pylist().index(None)
        raise ValueError(f"{source}: column {column!r} has {values.null_count} null value(s) (the first in row "
                         f"{first}); fill or drop them before embedding")
    return values.to_pylist()


def _parquet_files(uri: str) -> tuple[list[str], str]:
    """The Parquet files of `uri` (a file, or every `*.parquet` under a directory, local or any pyarrow filesystem
    URI) as URIs, and the root their names are relative to."""
    # lazy: pyarrow (with the ray extra)
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri if "://" in uri else str(Path(uri).resolve()))
    scheme = uri.split("://", 1)[0] + "://" if "://" in uri else ""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return [scheme + path if scheme else path], path.rsplit("/", 1)[0]
    if info.type != pafs.FileType.Directory:
        raise FileNotFoundError(f"no Parquet file or directory at {uri}")
    found = sorted(f.path for f in fs.get_file_info(pafs.FileSelector(path, recursive=True))
                   if f.type == pafs.FileType.File and f.path.endswith(".parquet"))
    if not found:
        raise FileNotFoundError(f"no *.parquet file under {uri}")
    return [scheme + f if scheme else f for f in found], path


def embed_parquet(source: str | os.PathLike, output: str | os.PathLike, model: str | os.PathLike | None = None, *,
                  lang: str | None = None, text_column: str = "text", output_column: str = "embedding",
                  num_encoders: int | None = None, gpus_per_encoder: float = 0.0, tokenizers_per_encoder: int = 1,
                  fp16: bool = False, max_tokens: int | None = None, max_sentence_tokens: int | None = None, say=None,
                  **loading) -> list[str]:
    """Embeds a Parquet corpus on Ray: every Parquet file of `source` (a file or a directory; a local path or any
    pyarrow filesystem URI: `s3://bucket/corpus/`, `gs://...`, `file:///...`) is read by an encoder actor, which
    writes the same file under `output` (same relative name) with `output_column` (the embeddings of
    `text_column`, float32 or float16 with `fp16`, in row order) added, then `NAME.done.json`: the output's identity
    (the input file's sha256, model, tokenizer, options). A re-run skips every file whose marker names the same
    computation and computes the others again (saying what changed), so an interrupted job is resumed file by file
    and never mixes models or inputs. Returns the output files' URIs.

    Args: as [`embed_files`]; `lang`: the sentences' language (one for the corpus).
    """
    ray = _ray()

    if lang is not None:
        lang = check_language(lang)
    files, root = _parquet_files(str(source))
    output = str(output)
    out_root = output.rstrip("/") if "://" in output else str(Path(output).resolve())
    targets = [out_root + "/" + f.split("://", 1)[-1][len(root):].lstrip("/") for f in files]
    path, num_encoders = _start(model, "embed_parquet", num_encoders, gpus_per_encoder, loading)
    options = {"fp16": fp16, "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
               "max_sentence_tokens": DEFAULT_MAX_SENTENCE_TOKENS if max_sentence_tokens is None
               else max_sentence_tokens, "num_proc": int(tokenizers_per_encoder)}
    actor = _encoder_actor(ray, _ParquetEncoder, gpus_per_encoder, tokenizers_per_encoder)
    pool = ray.util.ActorPool([actor.remote(path, loading) for _ in range(min(num_encoders, len(files)))])
    jobs = [(_as_uri(f), _as_uri(t), lang, text_column, output_column, options) for f, t in zip(files, targets)]
    for result in pool.map_unordered(lambda a, job: a.embed_parquet.remote(*job), jobs):
        if say:
            say(result)
    return targets


def _as_uri(path: str) -> str:
    return path if "://" in path else Path(path).as_uri()


def embed_files(inputs, embed_dir: str | os.PathLike, model: str | os.PathLike | None = None, *,
                num_shards: int | None = None, num_encoders: int | None = None, gpus_per_encoder: float = 0.0,
                tokenizers_per_encoder: int = 1, pretokenized: bool = False, fp16: bool = False,
                max_tokens: int | None = None, max_sentence_tokens: int | None = None, say=None,
                **loading) -> list[Path]:
    """Embeds text files into `embed_dir` on Ray (see the module docstring) and returns their shard manifests.

    Args:
        inputs: `(lang, path)` pairs (as `hf-laser embed-shards --input LANG FILE`).
        embed_dir: where the shards go (readable and writable by every node).
        model: as in [`embed_dataset`].
        num_shards: shards per file (default: 4 per encoder actor, so that a slow or restarted actor delays little).
        num_encoders, gpus_per_encoder, **loading: as in [`embed_dataset`].
        tokenizers_per_encoder: processes that preprocess and tokenize the next chunk of a shard while its encoder
            embeds the current one (`encode_file`'s `num_proc`; each also reserves a CPU of the cluster). 1: one
            thread beside the model, enough on a CPU; a GPU embeds faster than one thread tokenizes (16,000
            sentences/s with 8 of them on an H200, docs/measured/full-size.md).
        pretokenized, fp16, max_tokens, max_sentence_tokens: as for `embed_shards`.
        say: called with a line per finished file (None: quiet).
    """
    ray = _ray()

    inputs = [(lang, str(Path(path).resolve())) for lang, path in inputs]
    for _, path in inputs:
        if not Path(path).is_file():
            raise FileNotFoundError(f"input file not found: {path}")
    path, num_encoders = _start(model, "embed_files", num_encoders, gpus_per_encoder, loading)
    num_shards = num_shards or 4 * num_encoders
    embed_dir = str(Path(embed_dir).resolve())
    Path(embed_dir).mkdir(parents=True, exist_ok=True)
    options = {"pretokenized": pretokenized, "fp16": fp16,
               "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
               "max_sentence_tokens": DEFAULT_MAX_SENTENCE_TOKENS if max_sentence_tokens is None
               else max_sentence_tokens, "num_proc": int(tokenizers_per_encoder)}
    # a dead actor is restarted and its call retried: the shard resumes from what encode_file saved
    actor = _encoder_actor(ray, _ShardEncoder, gpus_per_encoder, tokenizers_per_encoder)
    pool = ray.util.ActorPool([actor.remote(path, loading) for _ in range(num_encoders)])

    prepared = {p: ray.put(prepare_shards(p, num_shards)) for p in dict.fromkeys(p for _, p in inputs)}
    jobs = [(p, embed_dir, lang, shard, num_shards, options, prepared[p]) for lang, p in inputs
            for shard in range(num_shards)]
    manifests = {}
    for result in pool.map_unordered(lambda a, job: a.embed.remote(*job), jobs):
        if result is not None and result not in manifests:
            manifests[result] = True
            if say:
                say(f"complete: {result}")

    out = []
    for lang, p in inputs:
        if load_embedding_shards(embed_dir, p, lang) is None:
            raise RuntimeError(f"the shards of {p} are incomplete after every job finished")
        out.append(manifest_path(Path(embed_dir), embedding_key(p, lang)))
    return out




class _Searcher:
    """Searcher actor of [`knn_search_on_ray`]: the faiss indexes of some database shards (rows `[start, stop)` each),
    built when the actor starts (again after a restart: the same rows, the same seed, the same indexes), answering
    query blocks with each shard's top-k."""

    def __init__(self, shards: list, index: str, device: str | None, refine: bool | None, options: dict):
        ray = _ray()
        self.normalize, self.shards = options["normalize"], []
        for database, start, stop in shards:
            database = ray.get(database)  # (references inside a list are not resolved by Ray itself)
            built, factory = build_index(database, index, start=start, stop=stop, device=device, **options)
            self.shards.append((built, database, start, stop, not is_exact(factory) if refine is None else refine))

    def ready(self) -> bool:
        return True

    def search(self, queries: np.ndarray, k: int) -> list:
        return [search_shard(built, queries, min(k, stop - start), start, db, refine, self.normalize)
                for built, db, start, stop, refine in self.shards]

    def search_rows(self, queries, start: int, stop: int, k: int) -> list:
        """[`search`] of the query rows `[start, stop)`, read here from the queries' `.npy` files (what the driver
        would otherwise send to every searcher)."""

        return self.search(query_block(queries.rows(start, stop), self.normalize), k)


class _RowWindow(Embeddings):
    """Rows `[start, start + len(rows))` of a database held in memory, addressed by their database row numbers (what
    a searcher actor is sent when the database is not a set of `.npy` files it can open itself)."""

    def __init__(self, rows: np.ndarray, start: int):
        self.window, self.start = rows, start

    def __len__(self) -> int:
        return self.start + len(self.window)

    @property
    def dim(self) -> int:
        return self.window.shape[1]

    def rows(self, start: int, stop: int) -> np.ndarray:
        return np.array(self.window[start - self.start: stop - self.start], dtype=np.float32)

    def take(self, indices: np.ndarray) -> np.ndarray:
        return np.array(self.window[np.asarray(indices, dtype=np.int64) - self.start], dtype=np.float32)


def _opens_its_files(db) -> bool:
    """`db` travels as file paths (every row in whole `.npy` files), not as its rows."""

    if isinstance(db, RowSubset):
        return _opens_its_files(db.base)
    return isinstance(db, ShardedEmbeddings) and all(is_whole_npy_map(a) for a in db.shards)


def knn_search_on_ray(queries, database, k: int, *, num_searchers: int | None = None, shard_size: int | None = None,
                      cpus_per_searcher: float = 1.0, gpus_per_searcher: float = 0.0, index: str = "flat",
                      device: str | None = None, query_batch_size: int | None = None, nlist: int | None = None,
                      nprobe: int | None = None, pq_m: int | None = None, train_size: int | None = None,
                      refine: bool | None = None, gpu_fp16: bool = False, normalize: bool = True,
                      show_progress: bool | None = None, desc: str = "kNN", stats: dict | None = None,
                      in_flight: int = 4, out: tuple[np.ndarray, np.ndarray] | None = None):
    """[`hf_laser.mining.knn_search`] with the database's index shards held by Ray actors: `num_searchers` actors
    (default: one per CPU slot, or GPU with `gpus_per_searcher`, of the cluster, at most 64), the database split into
    shards of `shard_size` rows (default: one shard per actor) given out to them in turn; each actor builds its
    shards' faiss indexes when it starts and answers query blocks, and the driver merges the shards' top-k in shard
    order, so the result is bit for bit `knn_search(..., shard_size=...)` with the same shards. An actor that dies
    is restarted (its indexes rebuilt, the same) and its blocks retried.

    The database travels to the actors as file paths when it is `.npy` files (embedding shards, `encode_file`
    outputs: the path must be readable on every node), else as rows through Ray's object store. So do the queries:
    from `.npy` files each searcher reads its query blocks itself and the driver sends only row ranges; from memory
    the driver sends every block to every searcher (`Nq x d x 4` bytes times the number of searchers).

    Returns:
        `(sims, inds)` as `knn_search`: float32 / int64 `[Nq, k]` (`out`'s arrays when given, as `knn_search`).
    """

    ray = _ray()
    q, db, k = check_knn_inputs(queries, database, k)
    if not ray.is_initialized():
        _init_ray(ray)
    if num_searchers is None:
        slots = ray.cluster_resources().get("GPU" if gpus_per_searcher else "CPU", 1)
        num_searchers = int(min(64, max(1, slots // (gpus_per_searcher or cpus_per_searcher))))
    if shard_size is None:
        shard_size = -(-len(db) // max(1, min(int(num_searchers), len(db))))
    shards = database_shards(len(db), shard_size)
    num_searchers = min(int(num_searchers), len(shards))
    dev = "gpu" if gpus_per_searcher else resolve_device("cpu" if device in (None, "auto") else device)
    if query_batch_size is None:
        query_batch_size = 131072 if dev == "gpu" else 8192
    options = {"nlist": nlist, "nprobe": nprobe, "pq_m": pq_m, "train_size": train_size, "gpu_fp16": gpu_fp16,
               "normalize": normalize}
    kind, each = ("GPU", gpus_per_searcher) if gpus_per_searcher else ("CPU", cpus_per_searcher)
    have = ray.cluster_resources().get(kind, 0)
    if num_searchers * each > have:  # Ray would wait without a word

        print(f"knn_search_on_ray: {num_searchers} searchers need {num_searchers * each:g} {kind}s, the cluster has "
              f"{have:g}: the search waits for more nodes (an autoscaler), or forever; fewer searchers fit (each "
              "then holds several index shards)", file=sys.stderr)
    actor = ray.remote(num_cpus=cpus_per_searcher, num_gpus=gpus_per_searcher or None, max_restarts=-1,
                       max_task_retries=-1)(_Searcher)
    t_build = time.perf_counter()
    # the references stay held here for the whole search: a restarted actor rebuilds its indexes from them
    shared = ray.put(db) if _opens_its_files(db) else None
    rows = [(shared or ray.put(_RowWindow(db.rows(a, b), a)), a, b) for a, b in shards]
    held = [rows[i::num_searchers] for i in range(num_searchers)]  # shard i -> actor i % num_searchers
    searchers = [actor.remote(mine, index, dev, refine, options) for mine in held]
    ray.get([s.ready.remote() for s in searchers])
    t_search = time.perf_counter()
    out_sims, out_inds = result_arrays(len(q), k, out)
    pending = []

    def collect(qa, qb, futures):
        answers = ray.get(futures)
        for i in range(len(shards)):  # in shard order, as knn_search merges them
            sims, inds = answers[i % num_searchers][i // num_searchers]
            merge_into(out_sims[qa:qb], out_inds[qa:qb], sims, inds, len(shards) == 1)

    blocks = -(-len(q) // query_batch_size)
    queries_by_path = ray.put(q) if _opens_its_files(q) else None
    with tqdm(total=blocks, desc=desc, unit="batch", disable=tqdm_disable(show_progress)) as bar:
        for qa in range(0, len(q), query_batch_size):
            qb = min(qa + query_batch_size, len(q))
            if queries_by_path is not None:
                futures = [s.search_rows.remote(queries_by_path, qa, qb, k) for s in searchers]
            else:
                ref = ray.put(query_block(q.rows(qa, qb), normalize))
                futures = [s.search.remote(ref, k) for s in searchers]
            pending.append((qa, qb, futures))
            while len(pending) > in_flight:
                collect(*pending.pop(0))
                bar.update(1)
        while pending:
            collect(*pending.pop(0))
            bar.update(1)
    for s in searchers:
        ray.kill(s)
    if stats is not None:
        stats["build_s"] = stats.get("build_s", 0.0) + (t_search - t_build)
        stats["search_s"] = stats.get("search_s", 0.0) + (time.perf_counter() - t_search)
    del rows, held
    return out_sims, out_inds


def mine_on_ray(src_embeddings, tgt_embeddings, *, num_searchers: int | None = None, cpus_per_searcher: float = 1.0,
                gpus_per_searcher: float = 0.0, **mine_kwargs):
    """[`hf_laser.mining.mine`] with both kNN directions searched by [`knn_search_on_ray`]'s actors (the margin
    scores and the selection on the driver, as single-process `mine`). Returns its `MinedPairs`."""

    return mine(src_embeddings, tgt_embeddings, **mine_kwargs,
                knn=partial(knn_search_on_ray, num_searchers=num_searchers, cpus_per_searcher=cpus_per_searcher,
                            gpus_per_searcher=gpus_per_searcher))
