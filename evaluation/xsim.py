"""N-way multilingual similarity search (Schwenk & Douze 2017, "Algorithm 1"; LASER's xsim, extended to all pairs).

Given a multi-parallel set (one `{lang}.txt` per language, line *i* of every file a translation of line *i* of
every other), every language is embedded once and, for **every ordered pair** of languages (source, target), each
source sentence retrieves its nearest target sentence by cosine similarity (optionally by LASER's ratio margin); an
error is a retrieved sentence that is not the one on the same line. Reported:

- the `n × n` error matrix (%, diagonal empty), its mean over the `n(n-1)` ordered pairs, and per language the mean
  error as source (its row) and as target (its column);
- the "all languages pooled" variant of the paper: each sentence searches among all sentences of all languages
  but itself; it is an error unless the sentence found is a translation of it (the same line in another language).

Duplicates make the error ill-defined (two lines with the same text cannot be told apart): texts found on more
than one line (in one language or across languages) are counted and reported, and `drop_duplicates=True` keeps the
first such line and drops the others in every language. Empty lines (a missing translation) are an error unless
`drop_empty=True` drops those rows everywhere. Files with different line counts, or with no sentence, are errors.

The search is a loop over languages of batched matrix products against blocks of the following languages (torch, on
`device`; the same code on CPU and GPU): one product serves both directions of a pair, so n(n+1)/2 language pairs are
computed; memory is the embeddings plus one `n_sent × block × n_sent` block (128 MiB by default).

Outputs (`write_outputs`): `xsim_matrix.csv` / `xsim.json` (matrix, averages, per-language figures, duplicates,
settings, time and memory), `xsim_heatmap.png` (languages grouped by script, from `langs.tsv` or detected from the
text), `xsim_languages.md` (per-language table).

    python -m evaluation.xsim [--model DIR] [--data ../shared/data/parallel/valid/flores200-devtest] --out DIR \\
        [--langs en,de,fr] [--margin] [--drop-duplicates] [--drop-empty] [--device cuda]
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = [
    "DEFAULT_DATA",
    "DEFAULT_LANGS_TSV",
    "MultiParallelSet",
    "language_files",
    "load_multiparallel",
    "search_errors",
    "summarize",
    "evaluate_xsim",
    "write_outputs",
    "read_language_table",
    "dominant_script",
]

DEFAULT_DATA = "../shared/data/parallel/valid/flores200-devtest"
DEFAULT_LANGS_TSV = "../shared/data/parallel/langs.tsv"
BLOCK_ELEMENTS = 1 << 25  # similarity entries per block (128 MiB in float32)


# ---------------------------------------------------------------------------------------------- data
@dataclass
class MultiParallelSet:
    """Aligned sentences of several languages: `texts[lang][j]` is line `rows[j]` (0-based) of that language's file."""

    folder: Path
    languages: list[str]
    texts: dict[str, list[str]]
    rows: np.ndarray
    n_lines: int
    report: dict = field(default_factory=dict)

    @property
    def n_sentences(self) -> int:
        return len(self.rows)


def language_files(folder: str | Path) -> dict[str, Path]:
    """`{lang: path}` for the `{lang}.txt` / `{lang}.txt.gz` files of a folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"multi-parallel folder not found: {folder}")
    files: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        if not p.is_file() or p.name.startswith("."):
            continue
        for suffix in (".txt", ".txt.gz"):
            if p.name.endswith(suffix):
                lang = p.name[: -len(suffix)]
                if lang in files:
                    raise ValueError(f"{folder}: two files for language {lang!r}: {files[lang].name}, {p.name}")
                files[lang] = p
    if not files:
        raise FileNotFoundError(f"no {{lang}}.txt files in {folder}")
    return files


def _duplicate_rows(texts: dict[str, list[str]], rows: np.ndarray) -> tuple[list[int], dict]:
    """Rows to drop so that no text occurs on two different rows (in one language or across languages), keeping the
    first row of each such text. Returns (row positions to drop, report with counts per language and examples)."""
    first_row: dict[str, int] = {}
    within: Counter = Counter()
    across: Counter = Counter()
    drop: set[int] = set()
    repeated: set[str] = set()
    examples = []
    for lang, lines in texts.items():
        first_here: dict[str, int] = {}
        for j, text in enumerate(lines):
            j_here = first_here.setdefault(text, j)
            k = first_row.setdefault(text, j)
            if k == j:
                continue
            (within if j_here != j else across)[lang] += 1
            repeated.add(text)
            drop.add(max(j, k))
            if len(examples) < 5:
                examples.append({"lang": lang, "line": int(rows[j]) + 1, "same_text_as_line": int(rows[k]) + 1,
                                 "text": text[:80]})
    report = {"repeated_texts": len(repeated), "rows_to_drop": len(drop),
              "within_language": dict(sorted(within.items())),
              "across_languages": dict(sorted(across.items())), "examples": examples}
    return sorted(drop), report


def load_multiparallel(folder: str | Path = DEFAULT_DATA, langs: Sequence[str] | None = None, *,
                       drop_duplicates: bool = False, drop_empty: bool = False, max_sentences: int | None = None,
                       log=print) -> MultiParallelSet:
    """Reads and checks a multi-parallel folder.

    Args:
        folder: one `{lang}.txt[.gz]` per language, all with the same number of lines.
        langs: the languages to use (default: every file); an unknown one is an error naming the available ones.
        drop_duplicates: drop the rows whose text also occurs on another row (see module docstring); otherwise
            duplicates are only counted (and reported).
        drop_empty: drop the rows that are empty in any language; otherwise an empty line is an error.
        max_sentences: use only the first N lines (quick checks).

    Raises:
        ValueError: fewer than 2 languages, different line counts, a language without sentences, empty lines
            (without `drop_empty`), or no row left.
    """
    folder = Path(folder)
    files = language_files(folder)
    if langs is not None:
        langs = list(dict.fromkeys(langs))
        missing = [x for x in langs if x not in files]
        if missing:
            raise ValueError(f"no file for language(s) {missing} in {folder} (available: {', '.join(files)})")
        files = {x: files[x] for x in langs}
    if len(files) < 2:
        raise ValueError(f"a similarity search needs at least 2 languages; {folder} gives {list(files)}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from training.data import read_text_lines  # split on '\n' only, plain or gzip, as the rest of the package

    texts = {lang: read_text_lines(p) for lang, p in files.items()}
    empty_files = [files[lang].name for lang, lines in texts.items() if not any(s.strip() for s in lines)]
    if empty_files:
        raise ValueError(f"language(s) without any sentence in {folder}: {', '.join(empty_files)}")
    counts = {lang: len(lines) for lang, lines in texts.items()}
    if len(set(counts.values())) != 1:
        common = Counter(counts.values()).most_common(1)[0][0]
        odd = ", ".join(f"{files[lang].name} ({n})" for lang, n in counts.items() if n != common)
        raise ValueError(f"the files of {folder} must have the same number of lines (aligned); most have {common}, "
                         f"but: {odd}")
    n_lines = next(iter(counts.values()))
    rows = np.arange(min(n_lines, max_sentences) if max_sentences else n_lines)
    texts = {lang: lines[: len(rows)] for lang, lines in texts.items()}
    report: dict = {"lines": n_lines, "used_lines": len(rows)}

    empty = {lang: [j for j, s in enumerate(lines) if not s.strip()] for lang, lines in texts.items()}
    empty = {lang: v for lang, v in empty.items() if v}
    if empty:
        desc = ", ".join(f"{files[lang].name}: {len(v)} (first line {v[0] + 1})" for lang, v in empty.items())
        if not drop_empty:
            raise ValueError(f"empty lines (missing translations) in {desc}; an empty line cannot be retrieved: "
                             f"pass drop_empty=True (--drop-empty) to drop those rows in every language")
        keep = np.setdiff1d(np.arange(len(rows)), sorted({j for v in empty.values() for j in v}))
        report["dropped_empty_rows"] = int(len(rows) - len(keep))
        log(f"xsim: dropped {len(rows) - len(keep)} row(s) with an empty line ({desc})")
        rows = rows[keep]
        texts = {lang: [lines[j] for j in keep] for lang, lines in texts.items()}

    drop, dup = _duplicate_rows(texts, rows)
    report["duplicates"] = dup
    if drop:
        what = (f"{dup['repeated_texts']} text(s) occur on more than one row (repeats within a language: "
                f"{sum(dup['within_language'].values())}, across languages: {sum(dup['across_languages'].values())}); "
                f"dropping {len(drop)} row(s) removes them")
        if drop_duplicates:
            keep = np.setdiff1d(np.arange(len(rows)), drop)
            rows = rows[keep]
            texts = {lang: [lines[j] for j in keep] for lang, lines in texts.items()}
            report["dropped_duplicate_rows"] = len(drop)
            log(f"xsim: {what}; dropped (the first row of each text is kept)")
        else:
            log(f"xsim: warning: {what}; retrieving a copy on another row counts as an error, so the error depends on"
                f" ties: pass --drop-duplicates (drop_duplicates=True) to drop them")
    if len(rows) == 0:
        raise ValueError(f"no row of {folder} is left to evaluate")
    return MultiParallelSet(folder, list(texts), texts, rows, n_lines, report)


# ---------------------------------------------------------------------------------------------- search
def _peak_memory() -> dict:
    out = {"peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def search_errors(embeddings, *, margin: bool = False, k: int = 4, device: str | torch.device | None = None,
                  block_elements: int = BLOCK_ELEMENTS, show_progress: bool = True) -> dict:
    """Similarity-search errors between all ordered pairs of languages of aligned embeddings.

    Args:
        embeddings: `(n_langs, n_sentences, dim)` array or tensor; `embeddings[l, j]` is row `j` in language `l`
            (L2-normalised here).
        margin: also the ratio-margin variant: score(x, y) = cos(x, y) / ((mean cos of x's k nearest targets +
            mean cos of y's k nearest sources) / 2), as LASER's xsim.
        k: margin neighbourhood (clipped to the number of sentences).
        device: where the products run (default: CPU).
        block_elements: similarity entries per block (bounds memory; more target languages per block when small).

    Returns:
        `{"errors": (n, n) int64 counts (diagonal 0), "errors_margin": same or None, "pooled_errors": (n,) counts,
        "n_sentences", "seconds", "memory"}`; errors of pair (s, t) are in row s, column t.
    """
    device = torch.device(device or "cpu")
    x = torch.as_tensor(np.asarray(embeddings, dtype=np.float32) if not torch.is_tensor(embeddings) else embeddings)
    if x.dim() != 3 or x.shape[0] < 2 or x.shape[1] == 0:
        raise ValueError(f"embeddings must be (n_langs >= 2, n_sentences >= 1, dim), got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError("embeddings contain NaN or infinite values")
    n_langs, n, dim = x.shape
    x = torch.nn.functional.normalize(x.float().to(device), dim=-1)
    k = max(1, min(k, n))
    block = max(1, min(n_langs, block_elements // (n * n)))
    gold = torch.arange(n, device=device)
    errors = torch.zeros((n_langs, n_langs), dtype=torch.int64, device=device)
    errors_margin = torch.zeros_like(errors) if margin else None
    # pooled search: best similarity so far of every sentence of every language, and the row it was found on
    best_sim = torch.full((n_langs, n), -float("inf"), device=device)
    best_row = torch.full((n_langs, n), -1, dtype=torch.int64, device=device)
    t_start = time.time()
    # cos(s_i, t_j) serves both s→t (argmax over j) and t→s (argmax over i), and the ratio margin is symmetric
    # too, so each unordered pair of languages is computed once: targets t ≥ s only (half the products)
    steps = sum(len(range(s, n_langs, block)) for s in range(n_langs))
    with tqdm(total=steps, desc="xsim", unit="block", disable=not show_progress) as bar:
        for s in range(n_langs):
            for t0 in range(s, n_langs, block):
                t1 = min(n_langs, t0 + block)
                # (n, m, n): sims[i, b, j] = cos(sentence i of language s, sentence j of language t0 + b)
                sims = (x[s] @ x[t0:t1].reshape(-1, dim).T).view(n, t1 - t0, n)
                if t0 == s:  # a sentence must not find itself in the pooled search; pair (s, s) is not evaluated
                    sims[gold, 0, gold] = -float("inf")
                errors[s, t0:t1] += (sims.argmax(dim=2) != gold[:, None]).sum(dim=0)
                errors[t0:t1, s] += (sims.argmax(dim=0) != gold[None, :]).sum(dim=1)
                if margin:
                    knn_s = sims.topk(k, dim=2).values.mean(dim=2)  # (n, m): s_i's k nearest in each language t
                    knn_t = sims.topk(k, dim=0).values.mean(dim=0)  # (m, n): t_j's k nearest in language s
                    if t0 == s:  # keep the -inf of the unevaluated pair (s, s) out of the scores
                        knn_s[:, 0] = 1.0
                        knn_t[0] = 1.0
                    score = sims / ((knn_s[:, :, None] + knn_t[None, :, :]) / 2)
                    errors_margin[s, t0:t1] += (score.argmax(dim=2) != gold[:, None]).sum(dim=0)
                    errors_margin[t0:t1, s] += (score.argmax(dim=0) != gold[None, :]).sum(dim=1)
                    del score
                val, idx = sims.reshape(n, -1).max(dim=1)  # language s's sentences as queries
                better = val > best_sim[s]
                best_sim[s] = torch.where(better, val, best_sim[s])
                best_row[s] = torch.where(better, idx % n, best_row[s])
                val, idx = sims.max(dim=0)  # (m, n): the block's languages' sentences as queries, among s's
                better = val > best_sim[t0:t1]
                best_sim[t0:t1] = torch.where(better, val, best_sim[t0:t1])
                best_row[t0:t1] = torch.where(better, idx, best_row[t0:t1])
                bar.update(1)
    pooled = (best_row != gold[None, :]).sum(dim=1)
    errors.fill_diagonal_(0)
    if margin:
        errors_margin.fill_diagonal_(0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"errors": errors.cpu().numpy(), "errors_margin": errors_margin.cpu().numpy() if margin else None,
            "pooled_errors": pooled.cpu().numpy(), "n_sentences": n, "seconds": round(time.time() - t_start, 2),
            "memory": _peak_memory()}


# ---------------------------------------------------------------------------------------------- summary
def _pct(counts, n) -> np.ndarray:
    return 100.0 * np.asarray(counts, dtype=np.float64) / n


def _offdiag_means(matrix: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    m = matrix.astype(np.float64).copy()
    np.fill_diagonal(m, np.nan)
    return float(np.nanmean(m)), np.nanmean(m, axis=1), np.nanmean(m, axis=0)


def summarize(languages: Sequence[str], search: dict) -> dict:
    """Percentages from [`search_errors`]: `{"languages", "n_sentences", "pairs", "average", "pooled_average",
    "matrix" (rows = source), "per_language": {lang: {"as_source", "as_target", "pooled"}}, and the `*_margin`
    counterparts when computed}`."""
    n = search["n_sentences"]
    langs = list(languages)
    out = {"languages": langs, "n_sentences": n, "pairs": len(langs) * (len(langs) - 1)}
    variants = [("", search["errors"])] + ([("_margin", search["errors_margin"])]
                                           if search.get("errors_margin") is not None else [])
    per_lang = {lang: {} for lang in langs}
    for suffix, counts in variants:
        pct = _pct(counts, n)
        np.fill_diagonal(pct, np.nan)
        avg, as_src, as_tgt = _offdiag_means(pct)
        out["average" + suffix] = round(avg, 2)
        out["matrix" + suffix] = [[None if i == j else round(float(pct[i, j]), 2) for j in range(len(langs))]
                                  for i in range(len(langs))]
        for i, lang in enumerate(langs):
            per_lang[lang]["as_source" + suffix] = round(float(as_src[i]), 2)
            per_lang[lang]["as_target" + suffix] = round(float(as_tgt[i]), 2)
    pooled = _pct(search["pooled_errors"], n)
    out["pooled_average"] = round(float(pooled.mean()), 2)
    for i, lang in enumerate(langs):
        per_lang[lang]["pooled"] = round(float(pooled[i]), 2)
    out["per_language"] = per_lang
    return out


# ---------------------------------------------------------------------------------------------- languages
def read_language_table(path: str | Path | None = DEFAULT_LANGS_TSV) -> dict[str, dict]:
    """`{code: {"script", "name"}}` from a `langs.tsv` (columns `code`, `script`, `name`); {} when absent."""
    if path is None or not Path(path).is_file():
        return {}
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        if not reader.fieldnames or not {"code", "script", "name"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: expected columns code, script, name; got {reader.fieldnames}")
        return {r["code"]: {"script": r["script"], "name": r["name"]} for r in reader}


def dominant_script(texts: Sequence[str], sample: int = 200) -> str:
    """The Unicode script (first word of the character names, e.g. LATIN, CYRILLIC, CJK) of most letters in the first
    `sample` texts; used to group languages that `langs.tsv` does not list."""
    counts: Counter = Counter()
    for text in texts[:sample]:
        for ch in text:
            if ch.isalpha():
                name = unicodedata.name(ch, "")
                counts[name.split(" ")[0] if name else "?"] += 1
    return counts.most_common(1)[0][0].title() if counts else "?"


def language_info(data: MultiParallelSet, langs_tsv: str | Path | None = DEFAULT_LANGS_TSV) -> dict[str, dict]:
    table = read_language_table(langs_tsv)
    return {lang: table.get(lang) or {"script": dominant_script(data.texts[lang]), "name": lang}
            for lang in data.languages}


# ---------------------------------------------------------------------------------------------- outputs
def _order_by_script(langs: Sequence[str], info: dict[str, dict]) -> list[str]:
    by_script = Counter(info[x]["script"] for x in langs)
    # big script groups first, then alphabetical; inside a group by name
    return sorted(langs, key=lambda x: (-by_script[info[x]["script"]], info[x]["script"], info[x]["name"], x))


def plot_heatmap(summary: dict, info: dict[str, dict], path: str | Path, *, key: str = "matrix",
                 title: str = "") -> Path:
    """The error matrix as an image, languages grouped by script (lines between groups, group names on top)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = summary["languages"]
    order = _order_by_script(langs, info)
    pos = [langs.index(x) for x in order]
    mat = np.array([[np.nan if v is None else v for v in row] for row in summary[key]], dtype=float)[np.ix_(pos, pos)]
    n = len(order)
    size = min(max(6.0, 0.11 * n + 3.0), 30.0)
    fontsize = min(9.0, 72 * size * 0.75 / max(n, 1))  # one tick label per row/column
    fig, ax = plt.subplots(figsize=(size + 1.5, size + 1.0))
    im = ax.imshow(mat, cmap="viridis_r", vmin=0, vmax=100, interpolation="nearest")
    ax.set_xticks(range(n), order, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(n), order, fontsize=fontsize)
    ax.set_xlabel("target language")
    ax.set_ylabel("source language")
    groups, start = [], 0
    for i in range(1, n + 1):
        if i == n or info[order[i]]["script"] != info[order[start]]["script"]:
            groups.append((info[order[start]]["script"], start, i))
            start = i
    for _, _, end in groups[:-1]:
        ax.axhline(end - 0.5, color="white", lw=0.6)
        ax.axvline(end - 0.5, color="white", lw=0.6)
    top = ax.secondary_xaxis("top")
    big = [(name, a, b) for name, a, b in groups if b - a >= max(2, n // 50)]  # small groups: no room for a label
    top.set_xticks([(a + b - 1) / 2 for _, a, b in big], [name for name, _, _ in big], rotation=90,
                   fontsize=fontsize + 1)
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01, label="similarity search error (%)")
    avg = summary["average" + key[len("matrix"):]]
    ax.set_title(f"{title + ': ' if title else ''}{n} languages, {summary['n_sentences']} sentences, mean error "
                 f"{avg:.2f}% over {summary['pairs']} pairs (grouped by script)", pad=40)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def language_table(summary: dict, info: dict[str, dict]) -> str:
    """Markdown: one row per language, best (lowest mean of source and target error) first."""
    per = summary["per_language"]
    margin = "average_margin" in summary
    header = ["language", "name", "script", "as source (%)", "as target (%)", "pooled (%)"]
    if margin:
        header += ["as source, margin (%)", "as target, margin (%)"]
    rows = [["**average**", "", "", summary["average"], summary["average"], summary["pooled_average"]]
            + ([summary["average_margin"], summary["average_margin"]] if margin else [])]
    for lang in sorted(per, key=lambda x: (per[x]["as_source"] + per[x]["as_target"], x)):
        r = per[lang]
        rows.append([lang, info[lang]["name"], info[lang]["script"], r["as_source"], r["as_target"], r["pooled"]]
                    + ([r["as_source_margin"], r["as_target_margin"]] if margin else []))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_outputs(summary: dict, info: dict[str, dict], out_dir: str | Path, *, title: str = "",
                  extra: dict | None = None) -> dict[str, str]:
    """Writes `xsim.json`, `xsim_matrix.csv` (+ `xsim_matrix_margin.csv`), `xsim_heatmap.png` and
    `xsim_languages.md` into `out_dir`; returns `{what: file name}`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for key in ("matrix", "matrix_margin"):
        if key not in summary:
            continue
        name = f"xsim_{key}.csv"
        with open(out / name, "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["source \\ target", *summary["languages"]])
            for lang, row in zip(summary["languages"], summary[key]):
                w.writerow([lang, *("" if v is None else f"{v:.2f}" for v in row)])
        written[key] = name
    doc = {**summary, "language_info": info, **(extra or {})}
    (out / "xsim.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    written["json"] = "xsim.json"
    plot_heatmap(summary, info, out / "xsim_heatmap.png", title=title)
    written["heatmap"] = "xsim_heatmap.png"
    text = (f"# N-way similarity search{': ' + title if title else ''}\n\n"
            f"{len(summary['languages'])} languages × {summary['n_sentences']} sentences; mean error over the "
            f"{summary['pairs']} ordered pairs {summary['average']:.2f}%"
            + (f" (ratio margin: {summary['average_margin']:.2f}%)" if "average_margin" in summary else "")
            + f"; all languages pooled: {summary['pooled_average']:.2f}%.\n\n"
            "*as source*: mean error of the language's sentences searched in every other language (row of the "
            "matrix); *as target*: mean error of every other language searched in it (column); *pooled*: its "
            "sentences searched among all sentences of all languages.\n\n"
            + language_table(summary, info) + f"\n\n![error matrix]({written['heatmap']})\n")
    (out / "xsim_languages.md").write_text(text, encoding="utf-8")
    written["markdown"] = "xsim_languages.md"
    return written


# ---------------------------------------------------------------------------------------------- evaluation
def embed_languages(cache, data: MultiParallelSet, *, pretokenized: bool = False,
                    show_progress: bool = True) -> np.ndarray:
    """`(n_langs, n_sentences, dim)` float32 embeddings, each language embedded once (through the cache; a code with
    a script or region suffix is preprocessed by its language part, e.g. `zh_Hans` as `zh`)."""
    out = np.empty((len(data.languages), data.n_sentences, cache.encoder.dim), dtype=np.float32)
    for i, lang in enumerate(tqdm(data.languages, desc="embed languages", unit="lang", disable=not show_progress)):
        out[i] = cache.embed_texts(data.texts[lang], lang, pretokenized=pretokenized,
                                   name=f"{data.folder.name}/{lang}")
    return out


def evaluate_xsim(cache, folder: str | Path = DEFAULT_DATA, langs: Sequence[str] | None = None, *,
                  margin: bool = False, k: int = 4, drop_duplicates: bool = False, drop_empty: bool = False,
                  max_sentences: int | None = None, pretokenized: bool = False, device=None,
                  langs_tsv: str | Path | None = DEFAULT_LANGS_TSV, out_dir: str | Path | None = None,
                  title: str = "", show_progress: bool = True, log=print) -> dict:
    """Loads and checks the set, embeds every language once, searches all pairs, summarises and (with `out_dir`)
    writes the outputs. Returns the [`summarize`] dict plus `"data"` (sizes, duplicates, dropped rows), `"timing"`
    (seconds for embedding and search), `"memory"` and `"files"`."""
    t0 = time.time()
    data = load_multiparallel(folder, langs, drop_duplicates=drop_duplicates, drop_empty=drop_empty,
                              max_sentences=max_sentences, log=log)
    emb = embed_languages(cache, data, pretokenized=pretokenized, show_progress=show_progress)
    t_embed = time.time() - t0
    search = search_errors(emb, margin=margin, k=k, device=device, show_progress=show_progress)
    summary = summarize(data.languages, search)
    summary["data"] = {"folder": str(data.folder), **data.report, "languages": len(data.languages),
                       "sentences": data.n_sentences}
    summary["settings"] = {"margin": "ratio" if margin else None, "k": k, "device": str(device or "cpu"),
                           "drop_duplicates": drop_duplicates, "drop_empty": drop_empty}
    summary["timing"] = {"embed_seconds": round(t_embed, 2), "search_seconds": search["seconds"],
                         "torch_threads": torch.get_num_threads()}
    summary["memory"] = search["memory"]
    log(f"xsim: {len(data.languages)} languages × {data.n_sentences} sentences: mean error {summary['average']:.2f}% "
        f"over {summary['pairs']} pairs" + (f" (margin {summary['average_margin']:.2f}%)" if margin else "")
        + f", pooled {summary['pooled_average']:.2f}%; search {search['seconds']:.1f} s, embedding "
        f"{t_embed:.1f} s, peak RSS {search['memory']['peak_rss_mib']:.0f} MiB")
    if out_dir is not None:
        info = language_info(data, langs_tsv)
        summary["files"] = write_outputs({k_: v for k_, v in summary.items() if k_ != "files"}, info, out_dir,
                                         title=title)
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evaluation.xsim", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="LASER model directory or Hub id (default: the shipped laser-mini)")
    p.add_argument("--data", default=DEFAULT_DATA,
                   help=f"multi-parallel folder of {{lang}}.txt (default {DEFAULT_DATA})")
    p.add_argument("--langs", default=None, help="comma-separated language codes (file names; default: all)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--margin", action="store_true", help="also the ratio-margin variant (LASER's xsim)")
    p.add_argument("--k", type=int, default=4, help="margin neighbourhood (default 4)")
    p.add_argument("--drop-duplicates", action="store_true", help="drop rows whose text occurs on another row")
    p.add_argument("--drop-empty", action="store_true", help="drop rows that are empty in some language")
    p.add_argument("--max-sentences", type=int, default=None, help="only the first N lines")
    p.add_argument("--langs-tsv", default=DEFAULT_LANGS_TSV, help="script and name of each code (for the heatmap)")
    p.add_argument("--pretokenized", action="store_true", help="the files are already BPE-tokenised")
    p.add_argument("--device", default=None, help="cpu (default), cuda, ...: encoder and search")
    p.add_argument("--max-tokens", type=int, default=12000, help="encoder token budget per batch")
    p.add_argument("--cache-dir", default=None, help="embedding cache (default $HF_LASER_EMBEDDING_CACHE or ~/.cache/hf_laser/embeddings)")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from hf_laser.models import resolve_model

    args.model = resolve_model(args.model, who="evaluation.xsim")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        from hf_laser.encoder import LaserEncoder

        from .cache import EmbeddingCache

        encoder = LaserEncoder.from_pretrained(args.model, device=args.device)
        cache = EmbeddingCache(encoder, args.cache_dir, enabled=not args.no_cache, show_progress=not args.quiet,
                               encode_kwargs={"max_tokens": args.max_tokens})
        langs = [x.strip() for x in args.langs.split(",") if x.strip()] if args.langs else None
        res = evaluate_xsim(cache, args.data, langs, margin=args.margin, k=args.k,
                            drop_duplicates=args.drop_duplicates, drop_empty=args.drop_empty,
                            max_sentences=args.max_sentences, pretokenized=args.pretokenized, device=args.device,
                            langs_tsv=args.langs_tsv, out_dir=args.out, title=Path(str(args.model)).name,
                            show_progress=not args.quiet)
    except (FileNotFoundError, ValueError) as err:
        print(f"evaluation.xsim: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(str(Path(args.out) / f) for f in res['files'].values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
