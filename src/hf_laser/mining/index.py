"""faiss: the import (with the extra that installs it), the device, and inverted-file / PQ indexes over embeddings too large for
memory (built block by block)."""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from .embeddings import Embeddings, as_embeddings, l2_normalize

_INSTALL_HINT = 'pip install "hf-laser[mining]"'


def require_faiss():
    """Import and return the ``faiss`` module, with an actionable message when it is missing.

    Before the first import, ``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (unless set by the user): with OpenMP's
    default spin-waiting, faiss's many small parallel regions (PQ training, IVF scans) ran 6-50x slower on a CPU shared
    with other processes in our measurements.
    """
    if "faiss" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        # lazy: faiss (the mining extra)
        import faiss  # noqa: PLC0415
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Bitext mining needs faiss, which is not installed. Install it with "
            f"`{_INSTALL_HINT}` (faiss-cpu), or `pip install \"hf-laser[gpu]\"` for faiss-gpu."
        ) from err
    return faiss


def faiss_gpu_available() -> bool:
    """True when the installed faiss is a GPU build and sees at least one GPU."""
    faiss = require_faiss()
    get = getattr(faiss, "get_num_gpus", None)
    try:
        return bool(get and get() > 0)
    except Exception:  # pragma: no cover
        return False


def resolve_device(device: str | None) -> str:
    """Map ``None``/``"auto"``/``"cpu"``/``"cuda"``/``"gpu"`` to ``"cpu"`` or ``"gpu"`` for faiss."""
    if device is None or device == "auto":
        return "gpu" if faiss_gpu_available() else "cpu"
    dev = str(device).lower()
    if dev == "cpu":
        return "cpu"
    if dev in ("gpu", "cuda") or dev.startswith("cuda:"):
        if not faiss_gpu_available():
            raise RuntimeError(
                f"device={device!r} was requested for the kNN search but faiss sees no GPU "
                "(faiss-cpu installed, or no CUDA device). Install faiss-gpu (`pip install \"hf-laser[gpu]\"`) "
                "or use device='cpu'."
            )
        return "gpu"
    raise ValueError(f"Unknown faiss device {device!r}; expected 'auto', 'cpu' or 'cuda'.")


def _default_nlist(n: int) -> int:
    """~4 sqrt(n) inverted lists, a power of two, and at least 39 training points per list."""
    target = 2 ** int(round(math.log2(max(1.0, 4.0 * math.sqrt(max(n, 1))))))
    return int(max(1, min(target, n // 39 if n >= 39 else 1)))


def _default_pq_m(d: int) -> int:
    """Largest divisor of ``d`` not above ``d // 16`` (64 sub-quantizers for 1024-d vectors)."""
    cap = max(1, d // 16)
    return max(m for m in range(1, cap + 1) if d % m == 0)


def index_factory_string(index: str, n: int, d: int, *, nlist: int | None = None, pq_m: int | None = None) -> str:
    """faiss factory string for ``index`` (``"flat"``, ``"ivf"``, ``"ivfpq"`` or a factory string itself).

    Args:
        index: ``"flat"`` (exact, ``IndexFlatIP``), ``"ivf"`` (``IVF{nlist},Flat``), ``"ivfpq"``
            (``IVF{nlist},PQ{pq_m}``), or any faiss factory string (e.g. ``"IVF4096,SQ8"``, ``"HNSW32"``).
        n: number of database vectors (for the default ``nlist``).
        d: vector dimension (for the default ``pq_m``).
    """
    key = index.lower()
    if key == "flat":
        return "Flat"
    if key == "ivf":
        return f"IVF{nlist or _default_nlist(n)},Flat"
    if key == "ivfpq":
        m = pq_m or _default_pq_m(d)
        if d % m:
            raise ValueError(f"pq_m={m} must divide the embedding dimension {d}")
        return f"IVF{nlist or _default_nlist(n)},PQ{m}"
    return index


def is_exact(factory: str) -> bool:
    return factory.replace(" ", "") in ("Flat", "IDMap,Flat")


def build_index(
    database: Embeddings | np.ndarray,
    index: str = "flat",
    *,
    start: int = 0,
    stop: int | None = None,
    device: str | None = "cpu",
    nlist: int | None = None,
    nprobe: int | None = None,
    pq_m: int | None = None,
    train_size: int | None = None,
    add_batch_size: int = 32768,
    gpu_fp16: bool = False,
    normalize: bool = True,
    seed: int = 0,
):
    """Build a faiss inner-product index over rows ``[start, stop)`` of ``database`` (``[n, d]``).

    Vectors are L2-normalised block by block (``normalize=True``), so the inner product is the cosine. Indexes that
    need training (IVF, PQ, ...) are trained on ``train_size`` random rows (default ``min(n, max(64 * nlist, 20000))``
    or 50k for other factory strings). On GPU (``device="cuda"``), the trained index is cloned to all visible GPUs with
    ``faiss.index_cpu_to_all_gpus`` (database split across GPUs, ``useFloat16`` from ``gpu_fp16``, forced for IVF-PQ
    with more than 48 bytes per code, which GPU IVFPQ only supports with float16 lookup tables), and IVF
    k-means runs on the GPU.

    Returns:
        ``(faiss_index, factory_string)``.
    """
    faiss = require_faiss()
    db = as_embeddings(database)
    stop = len(db) if stop is None else stop
    n, d = stop - start, db.dim
    if n <= 0:
        raise ValueError("cannot build an index over 0 vectors")
    dev = resolve_device(device)
    factory = index_factory_string(index, n, d, nlist=nlist, pq_m=pq_m)
    try:
        cpu_index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    except Exception as err:  # faiss raises RuntimeError with C++ message
        raise ValueError(f"invalid faiss index {index!r} (factory string {factory!r}): {err}") from err

    try:  # polysemous training (a slow PQ code re-ordering, only used by polysemous search) is not needed here
        pq_index = faiss.downcast_index(faiss.extract_index_ivf(cpu_index))
        if hasattr(pq_index, "do_polysemous_training"):
            pq_index.do_polysemous_training = False
    except Exception:
        pass

    if not cpu_index.is_trained:
        ivf = None
        try:
            ivf = faiss.extract_index_ivf(cpu_index)
        except Exception:
            ivf = None
        min_train = 1
        if ivf is not None:
            min_train = max(min_train, int(ivf.nlist))
        if "PQ" in factory.upper():
            min_train = max(min_train, 256)
        if train_size is None:
            train_size = min(n, max(64 * int(ivf.nlist), 20000)) if ivf is not None else min(n, 50000)
        train_size = min(int(train_size), n)
        if train_size < min_train:
            raise ValueError(
                f"index {index!r} ({factory}) needs at least {min_train} training vectors but the corpus "
                f"has {n}; use index='flat' for small corpora or a smaller nlist."
            )
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(n, size=train_size, replace=False)) + start
        train = db.take(rows)
        train = l2_normalize(train, copy=False) if normalize else np.ascontiguousarray(train, dtype=np.float32)
        gpu_clustering = None
        if dev == "gpu" and ivf is not None:
            # k-means on the GPU(s); same metric as the coarse quantizer. Keep a Python reference while training.
            gpu_clustering = faiss.index_cpu_to_all_gpus(faiss.IndexFlat(d, ivf.metric_type))
            ivf.clustering_index = gpu_clustering
        cpu_index.train(train)
        del train
        if gpu_clustering is not None:
            ivf.clustering_index = None
            del gpu_clustering

    if nprobe is not None or "IVF" in factory.upper():
        try:
            ivf = faiss.extract_index_ivf(cpu_index)
            ivf.nprobe = int(nprobe if nprobe is not None else min(16, ivf.nlist))
        except Exception:
            if nprobe is not None:
                raise ValueError(f"nprobe is only meaningful for IVF indexes, not {factory!r}") from None

    if dev == "gpu":
        co = faiss.GpuMultipleClonerOptions()
        co.shard = True  # split the database across GPUs
        co.useFloat16 = bool(gpu_fp16)
        try:
            pq = faiss.downcast_index(faiss.extract_index_ivf(cpu_index))
            if hasattr(pq, "pq") and pq.pq.code_size > 48:
                co.useFloat16 = True
        except Exception:
            pass
        try:
            index_obj = faiss.index_cpu_to_all_gpus(cpu_index, co=co)
        except Exception as err:
            raise ValueError(f"faiss index {factory!r} cannot be moved to the GPU: {err}") from err
        if nprobe is not None or "IVF" in factory.upper():
            try:
                faiss.GpuParameterSpace().set_index_parameter(
                    index_obj, "nprobe", int(nprobe if nprobe is not None else min(16, _ivf_nlist(cpu_index)))
                )
            except Exception:
                pass
    else:
        index_obj = cpu_index

    for a, block in db.iter_blocks(add_batch_size, start, stop):
        index_obj.add(l2_normalize(block, copy=False) if normalize else np.ascontiguousarray(block, dtype=np.float32))
    return index_obj, factory


def _ivf_nlist(index) -> int:
    faiss = require_faiss()
    return int(faiss.extract_index_ivf(index).nlist)
