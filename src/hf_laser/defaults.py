"""Defaults shared by the library and the command line (this module imports only the standard library's `os` and
`warnings`: `hf-laser --help` shows them without importing torch)."""

import os
import warnings

DEFAULT_MAX_TOKENS = 12000  # the original SentenceEncoder's token budget per batch
# Longer sentences are cut (see `LaserEncoder.encode_ids`). oneDNN's CPU LSTM cannot run one sequence of
# tokens x hidden_size >= ~1.33e8 ("could not create a primitive": 260k tokens at LASER's hidden size 512, measured
# with torch 2.13 at 1-8 threads), and memory grows with the length; 100k keeps hidden sizes up to 1024 clear of it.
DEFAULT_MAX_SENTENCE_TOKENS = 100_000
DEFAULT_CHUNK_LINES = 100_000  # lines `encode_file` holds in memory at a time
MODEL_SET_FILE = "laser_model_set.json"  # the file that makes a directory a model set (model_set.py)

# One environment variable per cache: the original files downloaded and converted (checkpoints/download.py) and the
# evaluation's embeddings (evaluation/cache.py). `HF_LASER_CACHE` named both until #71: still read by both, with a
# FutureWarning naming the variable to use.
DOWNLOAD_CACHE_ENV = "HF_LASER_DOWNLOAD_CACHE"
EMBEDDING_CACHE_ENV = "HF_LASER_EMBEDDING_CACHE"
LEGACY_CACHE_ENV = "HF_LASER_CACHE"
_warned_legacy: set[str] = set()


def cache_from_env(name: str) -> str | None:
    """The directory `$name` names (`DOWNLOAD_CACHE_ENV` or `EMBEDDING_CACHE_ENV`), else the old `$HF_LASER_CACHE`
    (a FutureWarning once per process and variable says to use `name`), else None (the caller's default)."""
    if os.environ.get(name):
        return os.environ[name]
    legacy = os.environ.get(LEGACY_CACHE_ENV)
    if legacy and name not in _warned_legacy:
        _warned_legacy.add(name)
        what = "the download cache" if name == DOWNLOAD_CACHE_ENV else "the embedding cache"
        warnings.warn(f"${LEGACY_CACHE_ENV} is read as {what} ({legacy}); it named two caches and will be "
                      f"dropped: set ${name} instead", FutureWarning, stacklevel=3)
    return legacy or None
