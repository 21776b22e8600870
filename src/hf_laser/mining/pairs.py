"""Mining end to end: both kNN directions, margin scores, selection ([`mine`]); in-memory sentences ([`mine_sentences`])."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .dedup import deduplicate
from .embeddings import as_embeddings
from .margin import margin_function, neighbourhood_mean, score_candidates
from .search import knn_search
from .selection import _norm_mode, select_pairs

@dataclass
class MinedPairs:
    """Mined sentence pairs, sorted by decreasing margin score.

    Attributes:
        src: ``[M]`` int64 source rows.
        tgt: ``[M]`` int64 target rows.
        scores: ``[M]`` float64 margin scores.
        x2y_sim, x2y_ind: ``[Nx, k]`` forward kNN (float32 cosines, int64 target rows).
        y2x_sim, y2x_ind: ``[Ny, k]`` backward kNN.
    """

    src: np.ndarray
    tgt: np.ndarray
    scores: np.ndarray
    x2y_sim: np.ndarray | None = None
    x2y_ind: np.ndarray | None = None
    y2x_sim: np.ndarray | None = None
    y2x_ind: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.src.shape[0])

    def __iter__(self):
        return iter(zip(self.scores.tolist(), self.src.tolist(), self.tgt.tolist()))


def mine(
    src_embeddings,
    tgt_embeddings,
    *,
    k: int = 4,
    margin: str = "ratio",
    mode: str = "max",
    threshold: float | None = None,
    index: str = "flat",
    device: str | None = None,
    query_batch_size: int | None = None,
    shard_size: int | None = None,
    nlist: int | None = None,
    nprobe: int | None = None,
    pq_m: int | None = None,
    refine: bool | None = None,
    gpu_fp16: bool = False,
    normalize: bool = True,
    show_progress: bool | None = None,
    knn=knn_search,
) -> MinedPairs:
    """Mine parallel pairs between source embeddings ``[Nx, d]`` and target embeddings ``[Ny, d]``.

    Both kNN directions are always computed (the margin needs both neighbourhoods). See the module docstring and
    :func:`select_pairs` for the scoring and the selection modes, and :func:`knn_search` for the index options.
    ``knn`` is the search itself, a function with :func:`knn_search`'s signature (``hf_laser.on_ray`` gives one that
    spreads the index shards over Ray actors).

    Returns:
        :class:`MinedPairs` with row numbers into the two inputs, sorted by decreasing score.
    """
    margin_function(margin)  # validate early
    mode = _norm_mode(mode)
    x, y = as_embeddings(src_embeddings), as_embeddings(tgt_embeddings)
    if len(x) == 0:
        raise ValueError("the source corpus is empty (0 embeddings)")
    if len(y) == 0:
        raise ValueError("the target corpus is empty (0 embeddings)")
    if x.dim != y.dim:
        raise ValueError(
            f"dimension mismatch: source embeddings have {x.dim} dimensions, target embeddings {y.dim}"
        )
    for name, n in (("target", len(y)), ("source", len(x))):
        if k > n:
            raise ValueError(f"k={k} is larger than the {name} corpus ({n} sentences); use a smaller --k")
    kw = dict(
        index=index, device=device, query_batch_size=query_batch_size, shard_size=shard_size, nlist=nlist,
        nprobe=nprobe, pq_m=pq_m, refine=refine, gpu_fp16=gpu_fp16, normalize=normalize, show_progress=show_progress,
    )
    x2y_sim, x2y_ind = knn(x, y, k, desc="kNN src->tgt", **kw)
    y2x_sim, y2x_ind = knn(y, x, k, desc="kNN tgt->src", **kw)
    x2y_mean = neighbourhood_mean(x2y_sim, x2y_ind)
    y2x_mean = neighbourhood_mean(y2x_sim, y2x_ind)
    fwd_scores = score_candidates(x2y_sim, x2y_ind, x2y_mean, y2x_mean, margin)
    bwd_scores = score_candidates(y2x_sim, y2x_ind, y2x_mean, x2y_mean, margin)
    src, tgt, sc = select_pairs(x2y_ind, fwd_scores, y2x_ind, bwd_scores, mode=mode, threshold=threshold)
    return MinedPairs(src, tgt, sc, x2y_sim, x2y_ind, y2x_sim, y2x_ind)


def mine_sentences(
    encoder,
    src_sentences: Sequence[str],
    tgt_sentences: Sequence[str],
    *,
    src_lang: str,
    tgt_lang: str,
    dedup: bool = True,
    encode_kwargs: dict | None = None,
    **mine_kwargs,
) -> MinedPairs:
    """Embed two in-memory sentence lists with ``encoder.encode`` and mine them.

    With ``dedup=True`` identical sentences are embedded and searched once (LASER's ``--unify``); returned rows are
    positions in the input lists (first occurrence of a duplicated sentence).

    Returns:
        :class:`MinedPairs` with ``src`` / ``tgt`` positions in ``src_sentences`` / ``tgt_sentences``.
    """
    if len(src_sentences) == 0:
        raise ValueError("the source sentence list is empty")
    if len(tgt_sentences) == 0:
        raise ValueError("the target sentence list is empty")
    encode_kwargs = dict(encode_kwargs or {})
    if dedup:
        ds, dt = deduplicate(src_sentences), deduplicate(tgt_sentences)
        src_u = [src_sentences[i] for i in ds.first.tolist()]
        tgt_u = [tgt_sentences[i] for i in dt.first.tolist()]
    else:
        src_u, tgt_u = list(src_sentences), list(tgt_sentences)
    x = encoder.encode(src_u, lang=src_lang, **encode_kwargs)
    y = encoder.encode(tgt_u, lang=tgt_lang, **encode_kwargs)
    res = mine(np.asarray(x), np.asarray(y), **mine_kwargs)
    if dedup:
        res.src, res.tgt = ds.to_original(res.src), dt.to_original(res.tgt)
    return res
