r"""Time and memory of margin-based mining at scale, on random unit vectors with planted parallel pairs.

The source side is ``N`` random unit vectors (``--dim``, float32); the target side holds, for a fraction
``--planted`` of the sources, a noisy copy (cosine ~0.99) at a random position, and fresh random vectors elsewhere.
The script times the two kNN searches (index build + search), the margin scoring and the selection of
:func:`hf_laser.mining.mine`, and reports:

* wall time per phase;
* peak RSS during mining (sampled every 20 ms, plus ``ru_maxrss`` of the whole process), and the RSS after the input
  vectors were generated (the baseline); also anonymous RSS (``RssAnon``), which leaves out memory-mapped inputs;
* tracemalloc peak during mining: numpy/Python allocations only; faiss indexes are C++ memory, visible in RSS only;
* recall of the planted pairs among the mined pairs, and for approximate indexes the kNN recall@1 / @k against an
  exact search for ``--recall-queries`` sampled queries (random vectors are the worst case for IVF: their
  neighbours are spread over all cells, so that recall is low; the planted pairs are what mining needs).

``--query-slice S`` searches only the first S queries of each side (the index is still built over the full
corpus); margin scores and selection then cannot be computed and the full search time is extrapolated linearly and
reported as such.

Examples::

    python benchmarks/mine_scale.py --n 100000 --index flat --out runs/mine_100k_flat.json
    python benchmarks/mine_scale.py --n 1000000 --index ivfpq --nlist 1024 --nprobe 8 --memmap-dir /tmp/mine1m \
        --out runs/mine_1m_ivfpq.json
    python benchmarks/mine_scale.py --n 1000000 --index flat --device cuda     # faiss-gpu
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import threading
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before numpy/faiss load OpenMP; see hf_laser.mining

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hf_laser import mining as M  # noqa: E402


def rss_parts() -> tuple[int, int]:
    """(RSS, anonymous RSS) in bytes. Anonymous RSS leaves out file-backed pages such as memory-mapped inputs."""
    import psutil

    total = psutil.Process().memory_info().rss
    anon = total
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return total, anon


def rss() -> int:
    return rss_parts()[0]


class PeakRSS:
    """Samples RSS and anonymous RSS in a background thread; ``peak`` / ``peak_anon`` are the maxima seen."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.peak = self.peak_anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        total, anon = rss_parts()
        self.peak, self.peak_anon = max(self.peak, total), max(self.peak_anon, anon)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def gib(b: float) -> float:
    return round(b / 2**30, 3)


def make_data(n_src: int, n_tgt: int, dim: int, planted: float, noise: float, seed: int, memmap_dir: str | None,
              chunk: int = 65536):
    """Random unit vectors; ``x[i] ~ y[perm[i]]`` for the planted sources. Returns (x, y, planted_pairs [P, 2])."""
    rng = np.random.default_rng(seed)
    if memmap_dir:
        Path(memmap_dir).mkdir(parents=True, exist_ok=True)
        x = np.lib.format.open_memmap(Path(memmap_dir) / f"x_{n_src}_{dim}.npy", mode="w+", dtype=np.float32,
                                      shape=(n_src, dim))
        y = np.lib.format.open_memmap(Path(memmap_dir) / f"y_{n_tgt}_{dim}.npy", mode="w+", dtype=np.float32,
                                      shape=(n_tgt, dim))
    else:
        x = np.empty((n_src, dim), dtype=np.float32)
        y = np.empty((n_tgt, dim), dtype=np.float32)
    for a in range(0, n_src, chunk):
        b = min(n_src, a + chunk)
        x[a:b] = M.l2_normalize(rng.standard_normal((b - a, dim), dtype=np.float32))
    for a in range(0, n_tgt, chunk):
        b = min(n_tgt, a + chunk)
        y[a:b] = M.l2_normalize(rng.standard_normal((b - a, dim), dtype=np.float32))
    n_p = int(round(planted * min(n_src, n_tgt)))
    src_rows = np.sort(rng.choice(n_src, size=n_p, replace=False))
    tgt_rows = rng.choice(n_tgt, size=n_p, replace=False)
    for a in range(0, n_p, chunk):
        s, t = src_rows[a:a + chunk], tgt_rows[a:a + chunk]
        order = np.argsort(t)
        v = np.asarray(x[s]) + noise / np.sqrt(dim) * rng.standard_normal((len(s), dim), dtype=np.float32)
        y[t[order]] = M.l2_normalize(v)[order]
    if memmap_dir:
        x.flush()
        y.flush()
    return x, y, np.stack([src_rows, tgt_rows], axis=1)


def knn_recall(queries, database, sims, inds, sample: np.ndarray, k: int) -> dict:
    """recall@1 and recall@k of ``inds`` against an exact search for the sampled query rows."""
    faiss = M.require_faiss()
    q = M.l2_normalize(M.as_embeddings(queries).take(sample))
    db = M.as_embeddings(database)
    best_s = np.full((len(sample), k), -np.inf, dtype=np.float32)
    best_i = np.full((len(sample), k), -1, dtype=np.int64)
    for a, block in db.iter_blocks(262144):
        s, i = faiss.knn(q, M.l2_normalize(block), k, metric=faiss.METRIC_INNER_PRODUCT)
        best_s, best_i = M.merge_topk(best_s, best_i, s, i + a, k)
    got = inds[sample]
    r1 = float(np.mean(got[:, 0] == best_i[:, 0]))
    rk = float(np.mean([len(set(g.tolist()) & set(b.tolist())) / k for g, b in zip(got, best_i)]))
    return {"queries": int(len(sample)), "recall_at_1": r1, f"recall_at_{k}": rk}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="vectors per side")
    p.add_argument("--n-tgt", type=int, default=None, help="target vectors (default: --n)")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--planted", type=float, default=0.01, help="fraction of sources with a noisy copy in the target")
    p.add_argument("--noise", type=float, default=0.15, help="noise norm of the planted copies (relative)")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--mode", default="max", choices=M.MODES)
    p.add_argument("--margin", default="ratio", choices=M.MARGINS)
    p.add_argument("--index", default="flat", help="flat, ivf, ivfpq or a faiss factory string")
    p.add_argument("--nlist", type=int, default=None)
    p.add_argument("--nprobe", type=int, default=None)
    p.add_argument("--pq-m", type=int, default=None)
    p.add_argument("--shard-size", type=int, default=None, help="database rows per index (merge top-k)")
    p.add_argument("--query-batch-size", type=int, default=None)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"], help="faiss device")
    p.add_argument("--gpu-fp16", action="store_true", help="float16 storage on GPU")
    p.add_argument("--query-slice", type=int, default=None,
                   help="search only the first S queries per direction and extrapolate (no selection)")
    p.add_argument("--recall-queries", type=int, default=1000, help="queries checked against exact search (0: off)")
    p.add_argument("--memmap-dir", default=None, help="generate the vectors as .npy memmaps here instead of in RAM")
    p.add_argument("--threads", type=int, default=None, help="faiss OpenMP threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-tracemalloc", action="store_true")
    p.add_argument("--out", default=None, help="JSON results")
    args = p.parse_args(argv)

    faiss = M.require_faiss()
    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    n_tgt = args.n_tgt or args.n
    rss0 = rss()
    t = time.time()
    x, y, planted = make_data(args.n, n_tgt, args.dim, args.planted, args.noise, args.seed, args.memmap_dir)
    t_gen = time.time() - t
    rss_data, anon_data = rss_parts()
    print(f"data: {args.n} x {n_tgt} x {args.dim} float32 generated in {t_gen:.1f}s; RSS {gib(rss_data)} GiB",
          file=sys.stderr)

    kw = dict(index=args.index, device=args.device, query_batch_size=args.query_batch_size,
              shard_size=args.shard_size, nlist=args.nlist, nprobe=args.nprobe, pq_m=args.pq_m,
              gpu_fp16=args.gpu_fp16, show_progress=True)
    xs = x if not args.query_slice else x[: args.query_slice]
    ys = y if not args.query_slice else y[: args.query_slice]
    timings = {}
    st_fwd, st_bwd = {}, {}
    if not args.no_tracemalloc:
        tracemalloc.start()
    with PeakRSS() as peak:
        t0 = time.time()
        x2y_s, x2y_i = M.knn_search(xs, y, args.k, desc="kNN src->tgt", stats=st_fwd, **kw)
        timings["knn_src_to_tgt_s"] = time.time() - t0
        t1 = time.time()
        y2x_s, y2x_i = M.knn_search(ys, x, args.k, desc="kNN tgt->src", stats=st_bwd, **kw)
        timings["knn_tgt_to_src_s"] = time.time() - t1
        result = None
        if not args.query_slice:
            t2 = time.time()
            xm, ym = M.neighbourhood_mean(x2y_s, x2y_i), M.neighbourhood_mean(y2x_s, y2x_i)
            fwd = M.best_candidates(x2y_s, x2y_i, xm, ym, args.margin)  # as mine(): block by block
            bwd = M.best_candidates(y2x_s, y2x_i, ym, xm, args.margin)
            timings["margin_scoring_s"] = time.time() - t2
            t3 = time.time()
            src, tgt, sc = M.select_best(*fwd, *bwd, mode=args.mode)
            timings["selection_s"] = time.time() - t3
            result = (src, tgt, sc)
        timings["total_mining_s"] = time.time() - t0
    for name, st in (("src_to_tgt", st_fwd), ("tgt_to_src", st_bwd)):
        timings[f"index_build_{name}_s"] = st.get("build_s", 0.0)
        timings[f"search_{name}_s"] = st.get("search_s", 0.0)
    tm_peak = tracemalloc.get_traced_memory()[1] if not args.no_tracemalloc else None
    if not args.no_tracemalloc:
        tracemalloc.stop()

    out = {
        "n_src": args.n, "n_tgt": n_tgt, "dim": args.dim, "k": args.k, "index": args.index, "nlist": args.nlist,
        "nprobe": args.nprobe, "pq_m": args.pq_m, "shard_size": args.shard_size, "device": args.device,
        "mode": args.mode, "margin": args.margin, "memmap": bool(args.memmap_dir),
        "query_slice": args.query_slice, "faiss_threads": faiss.omp_get_max_threads(),
        "cpu_count": os.cpu_count(), "platform": platform.platform(), "faiss": faiss.__version__,
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "data_generation_s": round(t_gen, 2),
        "rss_start_gib": gib(rss0), "rss_after_data_gib": gib(rss_data), "peak_rss_mining_gib": gib(peak.peak),
        "peak_rss_over_data_gib": gib(peak.peak - rss_data),
        "anon_rss_after_data_gib": gib(anon_data), "peak_anon_rss_mining_gib": gib(peak.peak_anon),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "ru_maxrss_gib": gib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
        "tracemalloc_peak_gib": gib(tm_peak) if tm_peak is not None else None,
    }
    if args.query_slice:
        ext = {}
        for name, st, n_q in (("src_to_tgt", st_fwd, args.n), ("tgt_to_src", st_bwd, n_tgt)):
            ext[f"knn_{name}_s"] = round(st["build_s"] + st["search_s"] * n_q / min(args.query_slice, n_q), 1)
        out["extrapolated_full_knn_s"] = ext
        out["note"] = ("only the first query_slice queries of each side were searched (indexes built over the full "
                       "corpora); extrapolated_full_knn_s = measured index build + measured search time scaled "
                       "linearly to all queries (margin scoring and selection not included)")
    else:
        src, tgt, sc = result
        found = set(zip(src.tolist(), tgt.tolist()))
        hit = sum((int(a), int(b)) in found for a, b in planted)
        out["mined_pairs"] = int(len(src))
        out["planted_pairs"] = int(len(planted))
        out["planted_recall"] = hit / max(1, len(planted))
        if len(planted):
            pl_scores = {(int(a), int(b)) for a, b in planted}
            mask = np.array([(a, b) in pl_scores for a, b in zip(src.tolist(), tgt.tolist())], dtype=bool)
            if mask.any() and (~mask).any():
                out["min_planted_score"] = float(sc[mask].min())
                out["max_other_score"] = float(sc[~mask].max())
    if args.recall_queries and M.index_factory_string(args.index, n_tgt, args.dim) != "Flat":
        rng = np.random.default_rng(args.seed + 1)
        nq = len(xs)
        sample = np.sort(rng.choice(nq, size=min(args.recall_queries, nq), replace=False))
        t = time.time()
        out["knn_recall_vs_exact"] = knn_recall(x, y, x2y_s, x2y_i, sample, args.k)
        out["knn_recall_vs_exact"]["seconds"] = round(time.time() - t, 1)
    print(json.dumps(out, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
