"""BUCC 2018 bitext-mining evaluation (Zweigenbaum et al., 2018), with the protocol of LASER's paper, Table 4.

Protocol (LASER ``tasks/bucc``): for each split, both sides are embedded, identical sentences are unified, and
candidates are mined with the ratio margin, k=4 and ``max`` retrieval (:func:`hf_laser.mining.mine`). The threshold
that maximises F1 against the gold pairs of the *training* split is then applied to the candidates of the evaluated
split, and precision / recall / F1 are reported there.

File format (one folder per pair, e.g. ``mining/de-en/``)::

    {xx}-en.{split}.{xx}    ID<TAB>sentence
    {xx}-en.{split}.en      ID<TAB>sentence
    {xx}-en.{split}.gold    xx-ID<TAB>en-ID

Command line::

    python -m evaluation.bucc --model DIR --data ../shared/data/mining --pairs de-en,fr-en --out results.json

Precision, recall and F1 are fractions in [0, 1] in the returned dicts and the JSON (the table printed by ``main``
shows percentages).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hf_laser.mining import MARGINS, MODES, iter_lines, mine_sentences

__all__ = [
    "PAIRS",
    "BuccSplit",
    "parse_pair",
    "parse_bucc_lines",
    "parse_gold_lines",
    "read_bucc_file",
    "read_bucc_gold",
    "load_bucc_local",
    "load_bucc_hub",
    "load_bucc",
    "subsample_split",
    "mine_candidates",
    "optimize_threshold",
    "extract_pairs",
    "precision_recall_f1",
    "evaluate_bucc",
    "main",
]

PAIRS = ("de-en", "fr-en", "ru-en", "zh-en")


@dataclass
class BuccSplit:
    """One split of one BUCC language pair.

    Attributes:
        src_ids, src_sentences: ``[Nx]`` ids and sentences of the non-English side.
        tgt_ids, tgt_sentences: ``[Ny]`` ids and sentences of the English side.
        gold: set of ``(src_id, tgt_id)`` parallel pairs, or None when the split has no gold file.
    """

    pair: str
    split: str
    src_lang: str
    tgt_lang: str
    src_ids: list[str]
    src_sentences: list[str]
    tgt_ids: list[str]
    tgt_sentences: list[str]
    gold: set[tuple[str, str]] | None


def parse_pair(pair: str) -> tuple[str, str]:
    """``"de-en"`` -> ``("de", "en")``."""
    m = re.fullmatch(r"([A-Za-z_]+)-([A-Za-z_]+)", pair or "")
    if not m:
        raise ValueError(f"invalid language pair {pair!r}; expected e.g. 'de-en'")
    return m.group(1), m.group(2)


def parse_bucc_lines(lines: Iterable[str], name: str) -> tuple[list[str], list[str]]:
    """Parse ``ID<TAB>sentence`` lines; ``name`` is used in error messages.

    Raises:
        ValueError: a line without a tab, an empty id, or an id used twice (naming the file, the id and the lines).
    """
    ids, sents, where = [], [], {}
    for lineno, line in enumerate(lines, start=1):
        line = line.rstrip("\n")
        if "\t" not in line:
            raise ValueError(f"{name}:{lineno}: expected 'ID<TAB>sentence', found no tab")
        sid, sent = line.split("\t", 1)
        sid = sid.strip()
        if not sid:
            raise ValueError(f"{name}:{lineno}: empty id")
        if sid in where:
            raise ValueError(f"{name}: duplicated id {sid!r} (lines {where[sid]} and {lineno})")
        where[sid] = lineno
        ids.append(sid)
        sents.append(sent)
    return ids, sents


def parse_gold_lines(lines: Iterable[str], name: str) -> set[tuple[str, str]]:
    """Parse ``src_id<TAB>tgt_id`` gold lines into a set of pairs."""
    gold = set()
    for lineno, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"{name}:{lineno}: expected 'SRC_ID<TAB>TGT_ID', got {line!r}")
        gold.add((parts[0].strip(), parts[1].strip()))
    return gold


def read_bucc_file(path: str | Path) -> tuple[list[str], list[str]]:
    """``(ids, sentences)`` of a BUCC text file (``ID<TAB>sentence``)."""
    return parse_bucc_lines(iter_lines(path), str(path))


def read_bucc_gold(path: str | Path) -> set[tuple[str, str]]:
    """Gold pairs of a ``.gold`` file."""
    return parse_gold_lines(iter_lines(path), str(path))


def _check_gold(split: BuccSplit, name: str) -> None:
    if split.gold is None:
        return
    src, tgt = set(split.src_ids), set(split.tgt_ids)
    for s, t in split.gold:
        if s not in src or t not in tgt:
            raise ValueError(f"{name}: gold pair ({s}, {t}) refers to an id missing from the text files")


def load_bucc_local(folder: str | Path, pair: str = "de-en", split: str = "training", *,
                    require_gold: bool = True) -> BuccSplit:
    """Load ``{pair}.{split}.{xx|en|gold}`` from ``folder`` (the folder holding ``{pair}/`` or that folder itself)."""
    src_lang, tgt_lang = parse_pair(pair)
    folder = Path(folder)
    base = folder / pair if (folder / pair).is_dir() else folder
    stem = base / f"{pair}.{split}"
    paths = {lang: Path(f"{stem}.{lang}") for lang in (src_lang, tgt_lang)}
    for p in paths.values():
        if not p.is_file():
            raise FileNotFoundError(f"BUCC file not found: {p}")
    src_ids, src_sents = read_bucc_file(paths[src_lang])
    tgt_ids, tgt_sents = read_bucc_file(paths[tgt_lang])
    gold_path = Path(f"{stem}.gold")
    if gold_path.is_file():
        gold = read_bucc_gold(gold_path)
    elif require_gold:
        raise FileNotFoundError(f"BUCC gold file not found: {gold_path}")
    else:
        gold = None
    out = BuccSplit(pair, split, src_lang, tgt_lang, src_ids, src_sents, tgt_ids, tgt_sents, gold)
    _check_gold(out, str(gold_path))
    return out


def _hub_urls(repo_id: str, pair: str, split: str, revision: str | None, subfolder: str | None) -> dict[str, str]:
    if not re.fullmatch(r"[\w.\-]+/[\w.\-]+", repo_id or ""):
        raise ValueError(f"invalid Hub dataset id {repo_id!r}; expected 'owner/name'")
    if not re.fullmatch(r"[\w.\-]+", split or ""):
        raise ValueError(f"invalid split name {split!r}")
    src_lang, tgt_lang = parse_pair(pair)
    root = f"hf://datasets/{repo_id}" + (f"@{revision}" if revision else "")
    prefix = "/".join(p for p in (root, (subfolder or "").strip("/"), pair) if p)
    return {
        "src": f"{prefix}/{pair}.{split}.{src_lang}",
        "tgt": f"{prefix}/{pair}.{split}.{tgt_lang}",
        "gold": f"{prefix}/{pair}.{split}.gold",
    }


def load_bucc_hub(repo_id: str, pair: str = "de-en", split: str = "training", *, revision: str | None = None,
                  subfolder: str | None = None, require_gold: bool = True, token: str | bool | None = None,
                  cache_dir: str | None = None) -> BuccSplit:
    """Load a BUCC split from a Hub dataset repository that holds the original files, through ``datasets``.

    The repository must contain ``[subfolder/]{pair}/{pair}.{split}.{xx|en|gold}`` (the layout of the local folder).
    Files are read with the ``text`` builder of ``datasets`` (``hf://datasets/...`` data files, cached as usual).
    """
    urls = _hub_urls(repo_id, pair, split, revision, subfolder)
    src_lang, tgt_lang = parse_pair(pair)
    try:
        import datasets  # noqa: PLC0415
    except ImportError as err:  # pragma: no cover
        raise ImportError('loading BUCC from the Hub needs `datasets`: pip install "hf-laser[eval]"') from err
    files = {k: v for k, v in urls.items() if k != "gold" or require_gold}
    kwargs = {"cache_dir": cache_dir}
    if token is not None:
        kwargs["token"] = token
    ds = datasets.load_dataset("text", data_files=files, **kwargs)
    src_ids, src_sents = parse_bucc_lines(ds["src"]["text"], urls["src"])
    tgt_ids, tgt_sents = parse_bucc_lines(ds["tgt"]["text"], urls["tgt"])
    gold = parse_gold_lines(ds["gold"]["text"], urls["gold"]) if "gold" in files else None
    out = BuccSplit(pair, split, src_lang, tgt_lang, src_ids, src_sents, tgt_ids, tgt_sents, gold)
    _check_gold(out, urls["gold"])
    return out


def load_bucc(pair: str, split: str, *, folder: str | Path | None = None, hub_repo: str | None = None,
              revision: str | None = None, require_gold: bool = True) -> BuccSplit:
    """Local folder when ``folder`` is given, else the Hub repository ``hub_repo``."""
    if (folder is None) == (hub_repo is None):
        raise ValueError("give exactly one of folder= (local BUCC files) or hub_repo= (Hub dataset)")
    if folder is not None:
        return load_bucc_local(folder, pair, split, require_gold=require_gold)
    return load_bucc_hub(hub_repo, pair, split, revision=revision, require_gold=require_gold)


def subsample_split(split: BuccSplit, max_sentences: int, seed: int = 0) -> BuccSplit:
    """At most ``max_sentences`` sentences per side: the gold pairs first (as many as fit), then random others.

    Meant for quick checks; it raises the share of parallel sentences, so scores are not comparable with full runs.
    """
    if max_sentences <= 0:
        raise ValueError("max_sentences must be positive")
    rng = np.random.default_rng(seed)
    gold = sorted(split.gold or ())
    gold_pairs = gold[:max_sentences]
    keep_src = {s for s, _ in gold_pairs}
    keep_tgt = {t for _, t in gold_pairs}

    def pick(ids, keep):
        rest = [i for i, x in enumerate(ids) if x not in keep]
        room = max(0, max_sentences - len(keep))
        extra = set(rng.choice(len(rest), size=min(room, len(rest)), replace=False).tolist()) if rest else set()
        chosen = {i for i, x in enumerate(ids) if x in keep} | {rest[j] for j in extra}
        return sorted(chosen)

    si, ti = pick(split.src_ids, keep_src), pick(split.tgt_ids, keep_tgt)
    return replace(
        split,
        src_ids=[split.src_ids[i] for i in si], src_sentences=[split.src_sentences[i] for i in si],
        tgt_ids=[split.tgt_ids[i] for i in ti], tgt_sentences=[split.tgt_sentences[i] for i in ti],
        gold=set(gold_pairs) if split.gold is not None else None,
    )


def _unique_map(ids: Sequence[str], sentences: Sequence[str]) -> dict[str, str]:
    """sentence -> id for sentences that occur once (LASER's bucc.py drops repeated sentences)."""
    seen: dict[str, str] = {}
    repeated = set()
    for i, s in zip(ids, sentences):
        key = s.strip()
        if key in seen:
            repeated.add(key)
        else:
            seen[key] = i
    for key in repeated:
        del seen[key]
    return seen


def mine_candidates(encoder, split: BuccSplit, *, k: int = 4, margin: str = "ratio", mode: str = "max",
                    index: str = "flat", dedup: bool = True, knn_device: str | None = None,
                    encode_kwargs: dict | None = None,
                    show_progress: bool | None = None) -> dict[tuple[str, str], float]:
    """Mine one split and return ``{(src_id, tgt_id): margin score}``.

    As in LASER's ``bucc.py``, candidates are mapped back to ids through their text, a sentence that occurs more than
    once on its side maps to no id (and cannot be counted correct), and the best score is kept per id pair.
    """
    res = mine_sentences(
        encoder, split.src_sentences, split.tgt_sentences, src_lang=split.src_lang, tgt_lang=split.tgt_lang,
        dedup=dedup, encode_kwargs=encode_kwargs, k=k, margin=margin, mode=mode, index=index, device=knn_device,
        show_progress=show_progress,
    )
    src_map = _unique_map(split.src_ids, split.src_sentences)
    tgt_map = _unique_map(split.tgt_ids, split.tgt_sentences)
    cands: dict[tuple[str, str], float] = {}
    for score, i, j in res:
        s_id = src_map.get(split.src_sentences[i].strip())
        t_id = tgt_map.get(split.tgt_sentences[j].strip())
        if s_id is None or t_id is None:
            continue
        key = (s_id, t_id)
        cands[key] = max(score, cands.get(key, score))
    return cands


def optimize_threshold(candidates: Mapping[tuple[str, str], float], gold: set[tuple[str, str]]) -> float:
    """Threshold maximising F1 against ``gold`` (LASER ``BuccOptimize``).

    Candidates are sorted by decreasing score; after each one, precision and recall of the candidates so far are
    computed, and the threshold is put halfway between the score of the candidate that gives the best F1 (first one
    on ties) and the next score. When no candidate is correct, the threshold is 0 (as in the original); when the
    best F1 is reached at the last candidate, the threshold is that candidate's score.
    """
    if not gold:
        raise ValueError("cannot optimise a threshold without gold pairs")
    items = sorted(candidates.items(), key=lambda kv: -kv[1])
    ngold = len(gold)
    nextract = ncorrect = 0
    threshold, best_f1 = 0.0, 0.0
    for i, (pair, score) in enumerate(items):
        nextract += 1
        if pair in gold:
            ncorrect += 1
        if ncorrect > 0:
            precision, recall = ncorrect / nextract, ncorrect / ngold
            f1 = 2 * precision * recall / (precision + recall)
            if f1 > best_f1:
                best_f1 = f1
                threshold = (score + items[i + 1][1]) / 2 if i + 1 < len(items) else score
    return float(threshold)


def extract_pairs(candidates: Mapping[tuple[str, str], float], threshold: float) -> set[tuple[str, str]]:
    """Candidate pairs with ``score >= threshold``."""
    return {pair for pair, score in candidates.items() if score >= threshold}


def precision_recall_f1(extracted: set[tuple[str, str]], gold: set[tuple[str, str]]) -> dict:
    """``{"precision", "recall", "f1", "n_extracted", "n_correct", "n_gold"}`` (fractions; 0 when nothing correct)."""
    ncorrect = len(extracted & gold)
    if ncorrect:
        p, r = ncorrect / len(extracted), ncorrect / len(gold)
        f1 = 2 * p * r / (p + r)
    else:
        p = r = f1 = 0.0
    return {"precision": p, "recall": r, "f1": f1, "n_extracted": len(extracted), "n_correct": ncorrect,
            "n_gold": len(gold)}


def evaluate_bucc(encoder, folder: str | Path | None = None, pair: str = "de-en", train_split: str = "training",
                  eval_split: str = "sample", *, hub_repo: str | None = None, revision: str | None = None,
                  k: int = 4, margin: str = "ratio", mode: str = "max", index: str = "flat", dedup: bool = True,
                  max_sentences: int | None = None, seed: int = 0, knn_device: str | None = None,
                  encode_kwargs: dict | None = None, show_progress: bool | None = None) -> dict:
    """BUCC evaluation of one pair: threshold optimised on ``train_split``, P/R/F1 on ``eval_split``.

    Args:
        encoder: an object with ``encode(sentences, lang=..., **encode_kwargs) -> [N, d]`` (a ``LaserEncoder``).
        folder: local folder with the BUCC files (``.../mining`` or ``.../mining/de-en``), or None with ``hub_repo``.
        max_sentences: subsample both splits to this many sentences per side (:func:`subsample_split`; quick checks).
        show_progress: progress bars of the embedding and the search of each split (minutes on the full sets):
            ``None`` (default) when stderr is a terminal.

    Returns:
        ``{"pair", "train_split", "eval_split", "threshold", "train": prf, "eval": prf, "eval_oracle": prf + threshold,
        "sizes": ..., "settings": ..., "seconds"}`` where ``prf`` is :func:`precision_recall_f1`'s dict: ``train`` is
        the training split at its own optimal threshold, ``eval`` the evaluated split at that threshold (the reported
        number), ``eval_oracle`` the evaluated split at its own optimal threshold (an upper bound, for reference).
    """
    t0 = time.time()
    splits = {}
    for role, name in (("train", train_split), ("eval", eval_split)):
        sp = load_bucc(pair, name, folder=folder, hub_repo=hub_repo, revision=revision)
        if max_sentences:
            sp = subsample_split(sp, max_sentences, seed=seed)
        if not sp.gold:
            raise ValueError(f"{pair}.{name}: no gold pairs, cannot evaluate")
        splits[role] = sp
    kw = dict(k=k, margin=margin, mode=mode, index=index, dedup=dedup, knn_device=knn_device,
              encode_kwargs=encode_kwargs, show_progress=show_progress)
    train_c = mine_candidates(encoder, splits["train"], **kw)
    eval_c = mine_candidates(encoder, splits["eval"], **kw)
    th = optimize_threshold(train_c, splits["train"].gold)
    train_prf = precision_recall_f1(extract_pairs(train_c, th), splits["train"].gold)
    eval_prf = precision_recall_f1(extract_pairs(eval_c, th), splits["eval"].gold)
    oracle_th = optimize_threshold(eval_c, splits["eval"].gold)
    oracle = precision_recall_f1(extract_pairs(eval_c, oracle_th), splits["eval"].gold)
    oracle["threshold"] = oracle_th
    return {
        "pair": pair,
        "train_split": train_split,
        "eval_split": eval_split,
        "threshold": th,
        "train": train_prf,
        "eval": eval_prf,
        "eval_oracle": oracle,
        "sizes": {role: {"src": len(sp.src_ids), "tgt": len(sp.tgt_ids), "gold": len(sp.gold),
                         "candidates": len(train_c if role == "train" else eval_c)} for role, sp in splits.items()},
        "settings": {"k": k, "margin": margin, "mode": mode, "index": index, "dedup": dedup,
                     "max_sentences": max_sentences, "seed": seed},
        "seconds": round(time.time() - t0, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.bucc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None,
                        help="HF LASER model directory or Hub repo id (default: the shipped laser-mini)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="local folder with {pair}/{pair}.{split}.{xx,en,gold}")
    src.add_argument("--hub", help="Hub dataset repo with the same layout (loaded through `datasets`)")
    parser.add_argument("--revision", default=None, help="Hub dataset revision")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated pairs (default: all four)")
    parser.add_argument("--train-split", default="training", help="split used to optimise the threshold")
    parser.add_argument("--eval-split", default="sample", help="split evaluated with that threshold")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--margin", default="ratio", choices=MARGINS)
    parser.add_argument("--mode", default="max", choices=MODES)
    parser.add_argument("--index", default="flat", help="faiss index (flat, ivf, ivfpq or a factory string)")
    parser.add_argument("--no-dedup", action="store_true", help="do not unify identical sentences")
    parser.add_argument("--max-sentences", type=int, default=None, help="subsample each side (quick checks)")
    parser.add_argument("--device", default=None, help="encoder device (cpu, cuda, ...)")
    parser.add_argument("--knn-device", default=None, choices=["auto", "cpu", "cuda"], help="faiss device")
    parser.add_argument("--max-tokens", type=int, default=12000, help="encoder token budget per batch")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bars (there are none either when stderr is not a terminal)")
    args = parser.parse_args(argv)
    from hf_laser.models import resolve_model

    args.model = resolve_model(args.model, who="evaluation.bucc")

    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    if not pairs:
        parser.error("--pairs is empty")
    for p in pairs:
        parse_pair(p)
    from hf_laser.encoder import LaserEncoder  # noqa: PLC0415

    encoder = LaserEncoder.from_pretrained(args.model, device=args.device)
    results = {}
    for pair in pairs:
        r = evaluate_bucc(
            encoder, args.data, pair, args.train_split, args.eval_split, hub_repo=args.hub, revision=args.revision,
            k=args.k, margin=args.margin, mode=args.mode, index=args.index, dedup=not args.no_dedup,
            max_sentences=args.max_sentences, knn_device=args.knn_device,
            encode_kwargs={"max_tokens": args.max_tokens}, show_progress=False if args.quiet else None,
        )
        results[pair] = r
        e = r["eval"]
        print(f"{pair}: threshold {r['threshold']:.4f} (from {args.train_split}, F1 {100 * r['train']['f1']:.2f}) | "
              f"{args.eval_split}: P {100 * e['precision']:.2f} R {100 * e['recall']:.2f} F1 {100 * e['f1']:.2f} "
              f"({e['n_correct']}/{e['n_extracted']} extracted correct, {e['n_gold']} gold)", file=sys.stderr)
    payload = {"model": str(args.model), "task": "bucc2018", "results": results}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(payload, indent=2), encoding="utf-8")
    else:
        print(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
