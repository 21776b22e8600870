r"""Embedding and mining on a multi-node Ray cluster against the single-process path (issue #49 item 5).

The same two text files are embedded and mined twice, with the same model, options and index:

* **single process**: `embed_shards` (Ray's shard plan: 4 shards per encoder) then `hf_laser.mining.mine`, with
  `--threads` threads;
* **Ray**: a local multi-node cluster (`ray.cluster_utils.Cluster`: a head without CPUs and `--nodes` worker nodes
  of `--cpus-per-node` CPUs, each its own raylet and object store), `on_ray.embed_files` with one encoder actor per
  CPU slot, then `on_ray.mine_on_ray` with one searcher actor per CPU slot.

It reports wall time per phase, peak memory (the driver's `ru_maxrss`; per node, the peak of the summed RSS of the
processes under that node's raylet, sampled every 0.5 s) and Ray's overhead (cluster start, actor start and index
build are timed apart from the work), and checks that both paths mine the same pairs (scores within 1e-6). The
processor line is printed first.

`--make-corpus N` writes two disjoint files of N distinct lines drawn (seeded) from every training text of
`../shared/data/parallel/train` (all languages, embedded with the `--lang` rules: the timing of real sentences of
real lengths; the mined pairs mean nothing and are only compared between the two paths).

Example (the figures in docs/mine.md)::

    python benchmarks/ray_scale.py --make-corpus 1000000 --corpus-dir /tmp/ray1m --index ivfpq --out ray_1m.json

`--single-embeddings DIR` reuses the single-process embeddings of an earlier run (checked against the input hashes,
model and options) when only the mining and the Ray side are to be measured again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def make_corpus(n: int, out: Path, seed: int = 0) -> tuple[Path, Path]:
    """Two files of `n` distinct lines each, disjoint, from the training texts (cached in `out`)."""
    a, b = out / f"a-{n}.txt", out / f"b-{n}.txt"
    if a.is_file() and b.is_file():
        return a, b
    seen = set()
    for path in sorted((REPO.parent / "shared" / "data" / "parallel" / "train").rglob("*")):
        if path.is_file() and path.name.endswith((".txt", ".gz")):
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8", errors="replace") as f:
                seen.update(line.strip() for line in f if line.strip())
    lines = sorted(seen)
    if len(lines) < 2 * n:
        raise SystemExit(f"only {len(lines):,} distinct lines in ../shared/data/parallel/train, {2 * n:,} needed")
    random.Random(seed).shuffle(lines)
    out.mkdir(parents=True, exist_ok=True)
    a.write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")
    b.write_text("\n".join(lines[n:2 * n]) + "\n", encoding="utf-8")
    return a, b


class NodeMemory:
    """Peak summed RSS (MiB) of the processes under each raylet, sampled every 0.5 s."""

    def __init__(self, raylets: dict[str, int]):
        self.raylets, self.peak, self._stop = raylets, {name: 0.0 for name in raylets}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree_rss(self, root: int) -> float:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry))
                except (OSError, ValueError, IndexError):
                    continue
        total, stack = 0.0, [root]
        while stack:
            pid = stack.pop()
            stack.extend(children.get(pid, []))
            try:
                with open(f"/proc/{pid}/status") as f:
                    total += next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024
            except (OSError, StopIteration, ValueError):
                continue
        return total

    def _run(self):
        while not self._stop.is_set():
            for name, pid in self.raylets.items():
                self.peak[name] = max(self.peak[name], self._tree_rss(pid))
            time.sleep(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", help="source text file (or --make-corpus)")
    p.add_argument("--tgt", help="target text file")
    p.add_argument("--lang", default="en", help="the language rules both files are embedded with (default en)")
    p.add_argument("--make-corpus", type=int, default=None, metavar="N", help="write and use two files of N lines")
    p.add_argument("--corpus-dir", default="/tmp/hf_laser_ray_scale")
    p.add_argument("--model", default=None, help="model directory (default: laser-mini)")
    p.add_argument("--speed", default="fp32", help="speed mode of both paths (default fp32)")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--cpus-per-node", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="single-process threads (default: nodes x cpus)")
    p.add_argument("--index", default="ivf")
    p.add_argument("--nlist", type=int, default=None)
    p.add_argument("--nprobe", type=int, default=None)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--single-embeddings", default=None, metavar="DIR",
                   help="the single-process embeddings of an earlier run of the same files, model and speed (its "
                        "run-PID/single directory, checked against what is asked: input hashes, model, options); "
                        "skips that phase, whose time is then not measured (single_embed_s null)")
    args = p.parse_args(argv)
    threads = args.threads or args.nodes * args.cpus_per_node

    from hf_laser.speed.cpu import cpu_info

    print(f"# processor: {cpu_info().line()}", file=sys.stderr)
    if args.make_corpus:
        src, tgt = make_corpus(args.make_corpus, Path(args.corpus_dir))
    elif args.src and args.tgt:
        src, tgt = Path(args.src), Path(args.tgt)
    else:
        raise SystemExit("give --src and --tgt, or --make-corpus N")
    work = Path(args.corpus_dir) / f"run-{os.getpid()}"
    results: dict = {"cpu": cpu_info().line(), "src": str(src), "tgt": str(tgt), "lines": sum(1 for _ in open(src)),
                     "index": args.index, "speed": args.speed, "nodes": args.nodes,
                     "cpus_per_node": args.cpus_per_node, "threads_single": threads}
    # both paths search the same index shards (one per Ray searcher), so the pairs must be bit for bit the same
    slots = args.nodes * args.cpus_per_node
    shard_size = -(-results["lines"] // slots)
    mine_kw = {"index": args.index, "nlist": args.nlist, "nprobe": args.nprobe, "show_progress": False}
    # and embed with the same shard plan (Ray's default, 4 shards per encoder): a sentence's embedding depends on the
    # batch it is padded with (round-off), so another plan gives other last bits, which an approximate index's
    # k-means turns into other neighbours (measured: 1 shard against 8 moved 6-14 % of the 1M kNN lists)
    embed_shards_per_file = 4 * slots
    results.update(index_shard_rows=shard_size, embed_shards_per_file=embed_shards_per_file)

    def load(phase: str) -> None:  # what else ran: a figure measured beside other work says so
        results[f"loadavg_after_{phase}"] = round(os.getloadavg()[0], 2)

    # single process
    import torch

    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    from hf_laser import LaserEncoder
    from hf_laser.mining import embed_shards, load_embedding_shards, mine
    from hf_laser.models import resolve_model

    model = str(resolve_model(args.model, who="ray_scale"))
    encoder = LaserEncoder.from_pretrained(model, speed=args.speed)
    single_dir = work / "single"
    if args.single_embeddings:  # reused only if they are what this run would compute (else StaleEmbeddingsError)
        import inspect

        from hf_laser.mining.shards import shard_identity
        from hf_laser.outputs import scan_input

        single_dir = Path(args.single_embeddings)
        max_tokens = inspect.signature(embed_shards).parameters["max_tokens"].default  # as embed_shards below
        x, y = (load_embedding_shards(single_dir, path, args.lang, identity=shard_identity(
            encoder, scan_input(path), args.lang, pretokenized=False, fp16=False, max_tokens=max_tokens))
            for path in (src, tgt))
        if x is None or y is None:
            raise SystemExit(f"--single-embeddings {single_dir}: no complete embeddings of {src} and {tgt} there")
        plans = {len(e.shards) if hasattr(e, "shards") else 1 for e in (x, y)}
        if plans != {embed_shards_per_file}:
            raise SystemExit(f"--single-embeddings {single_dir}: embedded in {sorted(plans)} shard(s) per file, not "
                             f"{embed_shards_per_file} as the Ray side: their last bits would differ")
        results.update(single_embed_s=None, single_embeddings_reused_from=str(single_dir))
    else:
        t = time.perf_counter()
        for path in (src, tgt):
            embed_shards(encoder, path, single_dir, args.lang, rank=0, world_size=1,
                         num_shards=embed_shards_per_file, show_progress_bar=True)
        results["single_embed_s"] = time.perf_counter() - t
        load("single_embed")
        x, y = (load_embedding_shards(single_dir, path, args.lang) for path in (src, tgt))
    t = time.perf_counter()
    single = mine(x, y, shard_size=shard_size, knn_dir=work / "knn-single", **mine_kw)  # kNN arrays on disk, as the CLI
    results["single_mine_s"] = time.perf_counter() - t
    load("single_mine")
    results["single_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(results), file=sys.stderr)

    # Ray: a multi-node cluster on this machine
    import ray
    from ray.cluster_utils import Cluster

    from functools import partial

    from hf_laser.mining.on_ray import embed_files, knn_search_on_ray

    t = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=args.cpus_per_node) for _ in range(args.nodes)]
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    results["ray_cluster_start_s"] = time.perf_counter() - t
    raylets = {f"node{i}": n.all_processes["raylet"][0].process.pid for i, n in enumerate(nodes)}
    try:
        with NodeMemory(raylets) as memory:
            t = time.perf_counter()
            embed_files([(args.lang, src), (args.lang, tgt)], work / "ray", model, num_encoders=slots,
                        num_shards=embed_shards_per_file, speed=args.speed)
            results["ray_embed_s"] = time.perf_counter() - t
            load("ray_embed")
            x, y = (load_embedding_shards(work / "ray", path, args.lang) for path in (src, tgt))
            stats: dict = {}
            t = time.perf_counter()  # on_ray.mine_on_ray, with the search's own timings
            on_ray = mine(x, y, knn=partial(knn_search_on_ray, num_searchers=slots, stats=stats), shard_size=shard_size,
                          knn_dir=work / "knn-ray", **mine_kw)
            results["ray_mine_s"] = time.perf_counter() - t
            load("ray_mine")
            results["ray_index_build_s"] = stats.get("build_s")
            results["ray_search_s"] = stats.get("search_s")
        results["ray_node_peak_rss_mib"] = memory.peak
        results["ray_driver_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    finally:
        ray.shutdown()
        cluster.shutdown()
    same = (on_ray.src.tolist() == single.src.tolist() and on_ray.tgt.tolist() == single.tgt.tolist())
    diff = float(abs(on_ray.scores - single.scores).max()) if len(single) and same else None
    results.update({"pairs": len(single), "same_pairs_same_order": same, "max_score_difference": diff})
    print(json.dumps(results, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if same and (diff is None or diff <= 1e-6) else 1


if __name__ == "__main__":
    sys.exit(main())
