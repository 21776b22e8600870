r"""Margin-based bitext mining with faiss (Artetxe & Schwenk, 2018, "Margin-based Parallel Corpus Mining with
Multilingual Sentence Embeddings").

Pipeline
--------
1. L2-normalise the source embeddings ``x`` ``[Nx, d]`` and target embeddings ``y`` ``[Ny, d]``.
2. k-nearest-neighbour search in both directions with faiss (inner product = cosine):
   ``x2y_sim, x2y_ind = knn(x, y, k)`` (``[Nx, k]``) and ``y2x_sim, y2x_ind = knn(y, x, k)`` (``[Ny, k]``).
3. Margin score of a candidate pair::

       score(x, y) = margin(cos(x, y), sum_{z in NNk(x)} cos(x, z) / 2k + sum_{z in NNk(y)} cos(y, z) / 2k)

   with ``margin`` one of ``ratio`` (``a / b``, default), ``distance`` (``a - b``) or ``absolute`` (``a``).
4. Candidate selection (``forward``, ``backward``, ``intersection``, ``max``) as in LASER's
   ``source/mine_bitexts.py``; the result is sorted by decreasing score. Only each row's best candidate matters,
   so steps 3-4 go row block by row block (``best_candidates``, then ``select_best`` on ``[N]`` vectors; the ``max``
   mode's greedy walk in vectorised rounds), and ``mine(..., knn_dir=DIR)`` keeps the ``[N, k]`` kNN arrays in
   ``.npy`` files: memory holds ``[N]`` vectors, not ``[N, k]`` arrays.

Everything is written so that the vectors never need to be in memory at once: embeddings can be numpy arrays,
``.npy`` memory maps, or several shards (:class:`ShardedEmbeddings`, e.g. one file per process); queries are
searched in batches and the database can be split into several indexes whose top-k lists are merged.

The command line is ``hf-laser mine`` and ``hf-laser embed-shards`` (``hf_laser/commands/mine.py``,
``embed_shards.py``); ``python -m hf_laser.mining embed-shards`` is the same (multi-process embedding, e.g. under
``accelerate launch``).

Multi-process embedding, then mining over the shards
----------------------------------------------------
Every process embeds its own contiguous slices of each file (``RANK`` / ``WORLD_SIZE`` from the launcher, or
``--rank`` / ``--world-size``) into ``.npy`` shards in a shared directory; ``hf-laser mine --embed-dir`` then finds
the shards' manifest and searches them as one memory-mapped matrix (no re-embedding)::

    # GPUs: one process per GPU (rank r embeds on cuda:$LOCAL_RANK)
    accelerate launch --multi_gpu --num_processes 8 -m hf_laser.mining embed-shards \
        --model MODEL_DIR --embed-dir EMB --input de src.de --input en tgt.en
    # CPU, 2 processes on this machine (either form)
    python -m hf_laser.mining embed-shards --nproc 2 --device cpu --model MODEL_DIR --embed-dir EMB \
        --input de src.de --input en tgt.en
    torchrun --nproc_per_node 2 -m hf_laser.mining embed-shards --device cpu --model MODEL_DIR --embed-dir EMB \
        --input de src.de --input en tgt.en
    # or one command per rank, e.g. on machines sharing EMB
    python -m hf_laser.mining embed-shards --rank 0 --world-size 2 --model MODEL_DIR --embed-dir EMB \
        --input de src.de --input en tgt.en
    # kNN + margin over the shards (faiss uses all cores / GPUs of this one process)
    hf-laser mine --model MODEL_DIR --src-lang de --tgt-lang en src.de tgt.en -o pairs.tsv --embed-dir EMB

(``accelerate launch --cpu --num_processes 2`` starts a single process unless an MPI hostfile is given, so on CPU
use ``--nproc`` or ``torchrun``.) Shards are resumable (``encode_file`` progress files plus a ``.done.json`` marker
per shard), so a crashed rank is simply started again. The markers and the manifest record what the embeddings were
computed from (input sha256, language, model and tokenizer hashes, options, version: ``embedding_identity``); shards
of anything else are recomputed by ``embed-shards`` and ignored, with a message, by ``mine``. ``--num-shards`` larger than the number of processes gives
smaller restart units.

Deviations from the original script, all deliberate:

* ``--threshold`` is applied in every retrieval mode (the original only applies it in ``max`` mode), and
  every mode's output is sorted by decreasing score (the original only sorts in ``max`` mode). The comparison
  is strict (``score > threshold``) as in the original.
* ``k`` larger than a corpus is an error instead of being silently reduced.
* Sorting uses a stable sort, so ties keep the original order (forward candidates before backward ones, then
  by row number); the original used numpy's default (unstable) quicksort.

Files
-----
``embeddings.py`` (matrices that need not fit in memory), ``index.py`` (faiss: import, device, index building),
``search.py`` (kNN search, top-k merging), ``margin.py`` (margin scoring), ``selection.py`` (candidate selection),
``pairs.py`` (:func:`mine`, :func:`mine_sentences`), ``scoring.py`` (the pairs of a parallel corpus scored one
by one: :func:`score_pairs`, :func:`score_sentences`, :func:`score_files`; ``hf-laser score``), ``dedup.py`` (unique lines), ``lines.py`` (text files by line
number, :class:`LineReader` for any line where it is), ``shards.py`` (multi-process embedding into shards and their
manifests). Everything listed in ``__all__`` is importable from ``hf_laser.mining`` itself.
"""

from __future__ import annotations

from ..outputs import scan_input  # noqa: F401 (what mine --embed-dir hashes)
from .dedup import Dedup, deduplicate, deduplicate_file
from .embeddings import Embeddings, ShardedEmbeddings, as_embeddings, l2_normalize
from .index import build_index, faiss_gpu_available, index_factory_string, require_faiss
from .lines import LineReader, count_lines, iter_lines, read_lines_at
from .margin import MARGINS, best_candidates, margin_function, neighbourhood_mean, score_candidates
from .pairs import MinedPairs, mine, mine_sentences
from .scoring import (
                      DEFAULT_THRESHOLDS,
                      SCORE_MARGINS,
                      SCORE_METHODS,
                      default_threshold,
                      pair_cosines,
                      score_files,
                      score_pairs,
                      score_sentences,
)
from .search import knn_search, merge_topk
from .selection import MODE_ALIASES, MODES, select_best, select_pairs  # noqa: F401 (MODE_ALIASES: the command line's choices)
from .shards import (  # noqa: F401
                     StaleEmbeddingsError,
                     dist_env,
                     embed_shards,
                     embedding_key,
                     load_embedding_shards,
                     plan_shards,
                     prepare_shards,
                     shard_identity,
)

__all__ = [
    "MARGINS",
    "MODES",
    "Embeddings",
    "ShardedEmbeddings",
    "as_embeddings",
    "l2_normalize",
    "require_faiss",
    "faiss_gpu_available",
    "index_factory_string",
    "build_index",
    "knn_search",
    "merge_topk",
    "margin_function",
    "neighbourhood_mean",
    "score_candidates",
    "best_candidates",
    "select_pairs",
    "select_best",
    "MinedPairs",
    "mine",
    "Dedup",
    "deduplicate",
    "deduplicate_file",
    "mine_sentences",
    "SCORE_METHODS",
    "SCORE_MARGINS",
    "DEFAULT_THRESHOLDS",
    "default_threshold",
    "pair_cosines",
    "score_pairs",
    "score_sentences",
    "score_files",
    "iter_lines",
    "count_lines",
    "read_lines_at",
    "LineReader",
    "plan_shards",
    "prepare_shards",
    "embed_shards",
    "load_embedding_shards",
    "StaleEmbeddingsError",
    "embedding_key",
]
