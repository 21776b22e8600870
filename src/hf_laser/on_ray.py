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
from hf_laser.on_ray import embed_dataset

ds = ray.data.read_text("corpus.en.txt")                  # a "text" column, one row per line
embedded = embed_dataset(ds, "src/hf_laser/models/laser-mini", lang="en")
embedded.write_parquet("embeddings/")                      # or take_batch(), iter_batches(), ...
```
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as err:
        raise ImportError("hf_laser.on_ray needs Ray Data: pip install \"hf-laser[ray]\"") from err
    return ray


def _start(model, who: str, num_encoders: int | None, gpus_per_encoder: float, loading: dict) -> tuple[str, int]:
    """`(model path every node can use, number of encoder actors)`; connects to Ray (`RAY_ADDRESS`, else a local
    Ray on this machine) unless it is running; with GPUs the encoders' default device is `"cuda"` (in `loading`)."""
    ray = _ray()
    from .models import resolve_model

    path = resolve_model(model, who=who)
    if Path(str(path)).expanduser().exists():
        path = str(Path(str(path)).expanduser().resolve())  # the same path on every node of a shared filesystem
    if gpus_per_encoder:
        loading.setdefault("device", "cuda")
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)  # none: a local Ray, this machine
    if num_encoders is None:
        gpus = ray.cluster_resources().get("GPU", 0) if gpus_per_encoder else 0
        num_encoders = max(1, int(gpus // gpus_per_encoder)) if gpus else 1
    return str(path), num_encoders


class _Tokenize:
    """CPU actor: a column of raw sentences -> a column of token ids (object array of int32 arrays)."""

    def __init__(self, model: str, lang, text_column: str, ids_column: str):
        from .encoder import _load_tokenizer

        tokenizer, _ = _load_tokenizer(model, plain=True)
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
        from .encoder import LaserEncoder

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
    from .defaults import DEFAULT_MAX_SENTENCE_TOKENS, DEFAULT_MAX_TOKENS
    from .languages import check_language

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
        from .encoder import LaserEncoder

        self.encoder = LaserEncoder.from_pretrained(model, **loading)

    def embed(self, path: str, embed_dir: str, lang: str, shard: int, num_shards: int, options: dict) -> str | None:
        from .mining import embed_shards

        # shard `shard` of `num_shards` is what rank `shard` of a world of `num_shards` embeds: exactly that shard
        manifest = embed_shards(self.encoder, path, embed_dir, lang, rank=shard, world_size=num_shards,
                                num_shards=num_shards, show_progress_bar=False, **options)
        return None if manifest is None else str(manifest)


def embed_files(inputs, embed_dir: str | os.PathLike, model: str | os.PathLike | None = None, *,
                num_shards: int | None = None, num_encoders: int | None = None, gpus_per_encoder: float = 0.0,
                pretokenized: bool = False, fp16: bool = False, max_tokens: int | None = None,
                max_sentence_tokens: int | None = None, say=None, **loading) -> list[Path]:
    """Embeds text files into `embed_dir` on Ray (see the module docstring) and returns their shard manifests.

    Args:
        inputs: `(lang, path)` pairs (as `hf-laser embed-shards --input LANG FILE`).
        embed_dir: where the shards go (readable and writable by every node).
        model: as in [`embed_dataset`].
        num_shards: shards per file (default: 4 per encoder actor, so that a slow or restarted actor delays little).
        num_encoders, gpus_per_encoder, **loading: as in [`embed_dataset`].
        pretokenized, fp16, max_tokens, max_sentence_tokens: as for `embed_shards`.
        say: called with a line per finished file (None: quiet).
    """
    ray = _ray()
    from .defaults import DEFAULT_MAX_SENTENCE_TOKENS, DEFAULT_MAX_TOKENS

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
               else max_sentence_tokens}
    # a dead actor is restarted and its call retried: the shard resumes from what encode_file saved
    actor = ray.remote(num_gpus=gpus_per_encoder or None, num_cpus=0 if gpus_per_encoder else 1, max_restarts=-1,
                       max_task_retries=-1)(_ShardEncoder)
    pool = ray.util.ActorPool([actor.remote(path, loading) for _ in range(num_encoders)])
    jobs = [(p, embed_dir, lang, shard, num_shards, options) for lang, p in inputs for shard in range(num_shards)]
    manifests = {}
    for result in pool.map_unordered(lambda a, job: a.embed.remote(*job), jobs):
        if result is not None and result not in manifests:
            manifests[result] = True
            if say:
                say(f"complete: {result}")
    from .mining import load_embedding_shards
    from .mining.shards import _manifest_path, embedding_key

    out = []
    for lang, p in inputs:
        if load_embedding_shards(embed_dir, p, lang) is None:
            raise RuntimeError(f"the shards of {p} are incomplete after every job finished")
        out.append(_manifest_path(Path(embed_dir), embedding_key(p, lang)))
    return out

