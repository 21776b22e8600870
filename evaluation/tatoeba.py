"""Tatoeba similarity search (Artetxe & Schwenk 2019, Table 1): for each language, the error rate of
nearest-neighbour retrieval by cosine similarity, xx→en and en→xx, over the 1,000-ish aligned pairs of LASER's
Tatoeba v1 test set; optionally with margin-based scoring instead of raw cosine.

Data:
- local, LASER layout (``../shared/data/tatoeba/v1``): ``tatoeba.{xxx}-eng.{xxx}`` and ``tatoeba.{xxx}-eng.eng``, line
  *i* of one the translation of line *i* of the other ([`load_tatoeba_local`]);
- Hub, through `datasets` (default ``mteb/tatoeba-bitext-mining``, configs ``{xxx}-eng``, split ``test``, columns
  ``sentence1`` (xx) / ``sentence2`` (English)) ([`load_tatoeba_hub`]).

Command line (also through ``python -m evaluation.run --tasks tatoeba``)::

    python -m evaluation.tatoeba --model DIR --tatoeba-dir ../shared/data/tatoeba/v1 [--langs fra,deu] [--margin ratio]

``--auto-lang`` also embeds both sides with ``lang="auto"`` (the language detected per sentence, as a user who does
not know it would) and prints how far that is from the error with the true language codes ([`auto_lang_comparison`]).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from hf_laser.encoder import count_lines, read_lines

__all__ = [
    "TATOEBA_LANGS",
    "DEFAULT_HUB_REPO",
    "available_languages",
    "tatoeba_paths",
    "load_tatoeba_local",
    "load_tatoeba_hub",
    "retrieval_errors",
    "evaluate_tatoeba",
    "average_errors",
    "auto_lang_comparison",
]

DEFAULT_HUB_REPO = "mteb/tatoeba-bitext-mining"

# Tatoeba v1 ISO 639-3 code -> language code given to the LASER preprocessing (as in LASER's evaluation).
TATOEBA_LANGS = {
    "afr": "af", "amh": "am", "ang": "ang", "ara": "ar", "arq": "arq", "arz": "arz", "ast": "ast", "awa": "awa",
    "aze": "az", "bel": "be", "ben": "bn", "ber": "ber", "bos": "bs", "bre": "br", "bul": "bg", "cat": "ca",
    "cbk": "cbk", "ceb": "ceb", "ces": "cs", "cha": "ch", "cmn": "zh", "cor": "kw", "csb": "csb", "cym": "cy",
    "dan": "da", "deu": "de", "dsb": "dsb", "dtp": "dtp", "ell": "el", "epo": "eo", "est": "et", "eus": "eu",
    "fao": "fo", "fin": "fi", "fra": "fr", "fry": "fy", "gla": "gd", "gle": "ga", "glg": "gl", "gsw": "gsw",
    "heb": "he", "hin": "hi", "hrv": "hr", "hsb": "hsb", "hun": "hu", "hye": "hy", "ido": "io", "ile": "ie",
    "ina": "ia", "ind": "id", "isl": "is", "ita": "it", "jav": "jv", "jpn": "ja", "kab": "kab", "kat": "ka",
    "kaz": "kk", "khm": "km", "kor": "ko", "kur": "ku", "kzj": "kzj", "lat": "la", "lfn": "lfn", "lit": "lt",
    "lvs": "lv", "mal": "ml", "mar": "mr", "max": "max", "mhr": "mhr", "mkd": "mk", "mon": "mn", "nds": "nds",
    "nld": "nl", "nno": "nn", "nob": "nb", "nov": "nov", "oci": "oc", "orv": "orv", "pam": "pam", "pes": "fa",
    "pms": "pms", "pol": "pl", "por": "pt", "ron": "ro", "rus": "ru", "slk": "sk", "slv": "sl", "spa": "es",
    "sqi": "sq", "srp": "sr", "swe": "sv", "swg": "swg", "swh": "sw", "tam": "ta", "tat": "tt", "tel": "te",
    "tgl": "tl", "tha": "th", "tuk": "tk", "tur": "tr", "tzl": "tzl", "uig": "ug", "ukr": "uk", "urd": "ur",
    "uzb": "uz", "vie": "vi", "war": "war", "wuu": "zh", "xho": "xh", "yid": "yi", "yue": "zh", "zsm": "ms",
    "eng": "en",
}


# ---------------------------------------------------------------------------------------------- data
def tatoeba_paths(folder: str | Path, lang: str, suffix: str = "") -> tuple[Path, Path]:
    """`(xx side, English side)` paths of one language in a LASER-layout folder (`suffix` e.g. `".bpe"`)."""
    folder = Path(folder)
    return (folder / f"tatoeba.{lang}-eng.{lang}{suffix}", folder / f"tatoeba.{lang}-eng.eng{suffix}")


def available_languages(folder: str | Path, suffix: str = "") -> list[str]:
    """Languages with an xx side in `folder` (sorted ISO 639-3 codes)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"Tatoeba folder not found: {folder}")
    langs = set()
    for p in folder.glob(f"tatoeba.*-eng.*{suffix}"):
        name = p.name[len("tatoeba."):len(p.name) - len(suffix)] if suffix else p.name[len("tatoeba."):]
        pair, _, side = name.partition(".")
        xx = pair[:-len("-eng")] if pair.endswith("-eng") else None
        if xx and side == xx:
            langs.add(xx)
    return sorted(langs)


def check_pair_files(src: Path, tgt: Path) -> int:
    """Both files exist, are non-empty and have the same number of lines; returns that number."""
    for p in (src, tgt):
        if not p.is_file():
            raise FileNotFoundError(f"Tatoeba file missing: {p}")
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise ValueError(f"line counts differ: {src} has {n_src} lines, {tgt} has {n_tgt}; the two sides of a "
                         f"Tatoeba pair must be line-aligned")
    if n_src == 0:
        raise ValueError(f"empty Tatoeba pair: {src} and {tgt} have no lines")
    return n_src


def load_tatoeba_local(folder: str | Path, lang: str, suffix: str = ""):
    """One language of a LASER-layout Tatoeba folder as a `datasets.Dataset` with columns `source` (xx) and
    `target` (English). Lines are split on '\\n' only (a stray '\\r' or U+2028 inside a sentence stays inside)."""
    import datasets

    src, tgt = tatoeba_paths(folder, lang, suffix)
    check_pair_files(src, tgt)
    return datasets.Dataset.from_dict({"source": list(read_lines(src)), "target": list(read_lines(tgt))})


def load_tatoeba_hub(lang: str, repo_id: str = DEFAULT_HUB_REPO, *, config: str = "{lang}-eng", split: str = "test",
                     source_column: str = "sentence1", target_column: str = "sentence2",
                     revision: str | None = None, **load_kwargs):
    """One language from a Hub dataset (or a local dataset folder) through `datasets.load_dataset`, renamed to
    `source` / `target`. Defaults fit `mteb/tatoeba-bitext-mining` (config `fra-eng`, split `test`)."""
    import datasets

    ds = datasets.load_dataset(repo_id, config.format(lang=lang), split=split, revision=revision, **load_kwargs)
    for col in (source_column, target_column):
        if col not in ds.column_names:
            raise ValueError(f"{repo_id} [{config.format(lang=lang)}/{split}] has no column {col!r} "
                             f"(columns: {ds.column_names})")
    ds = ds.select_columns([source_column, target_column])
    ds = ds.rename_columns({source_column: "source", target_column: "target"})
    if len(ds) == 0:
        raise ValueError(f"{repo_id} [{config.format(lang=lang)}/{split}] is empty")
    for i, (s, t) in enumerate(zip(ds["source"], ds["target"])):
        if s is None or t is None:
            raise ValueError(f"{repo_id} [{config.format(lang=lang)}/{split}] row {i} has a missing side")
    return ds


# ---------------------------------------------------------------------------------------------- search
def _normalized(x) -> torch.Tensor:
    t = torch.from_numpy(np.array(x, dtype=np.float32))
    return torch.nn.functional.normalize(t, dim=-1)


def _topk_mean(sim_rows: torch.Tensor, k: int) -> torch.Tensor:
    return sim_rows.topk(k, dim=1).values.mean(dim=1)


def retrieval_errors(src_emb, tgt_emb, *, margin: str | None = None, k: int = 4, chunk: int = 4096,
                     src_texts: Sequence[str] | None = None, tgt_texts: Sequence[str] | None = None,
                     return_wrong: bool = False) -> dict:
    """Nearest-neighbour retrieval errors between aligned embeddings (row i of each is a translation pair).

    Args:
        src_emb, tgt_emb: `(n, dim)` embeddings (any float dtype; L2-normalised here).
        margin: None (cosine similarity, the paper's Table 1), `"ratio"` or `"distance"`: margin-based scores
            `cos(x, y)` ÷ or − `(mean cos of x's k NN + mean cos of y's k NN) / 2` (Artetxe & Schwenk, 2019b).
        k: neighbourhood size of the margin.
        src_texts, tgt_texts: when given, a retrieved sentence whose *text* equals the gold one counts as correct
            (duplicates in the set are not errors); by default correctness is by index, as LASER's evaluation.
        return_wrong: also return `"xx2en_wrong"` and `"en2xx_wrong"`, `(n,)` bool arrays: pair i was missed.

    Returns:
        `{"xx2en_errors", "en2xx_errors", "n"}` (counts).
    """
    x, y = _normalized(src_emb), _normalized(tgt_emb)
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"embeddings must be aligned (n, dim) arrays, got {tuple(x.shape)} and {tuple(y.shape)}")
    n = x.shape[0]
    if n == 0:
        raise ValueError("no sentence pairs to evaluate")
    if margin not in (None, "ratio", "distance"):
        raise ValueError(f"margin must be None, 'ratio' or 'distance', got {margin!r}")
    k = max(1, min(k, n))

    def sims(a, b, rows):
        return a[rows] @ b.T

    if margin is not None:
        knn_x = torch.cat([_topk_mean(sims(x, y, slice(i, i + chunk)), k) for i in range(0, n, chunk)])
        knn_y = torch.cat([_topk_mean(sims(y, x, slice(i, i + chunk)), k) for i in range(0, n, chunk)])

    def best(a, b, knn_a, knn_b):
        preds = []
        for i in range(0, n, chunk):
            s = sims(a, b, slice(i, i + chunk))
            if margin is not None:
                denom = (knn_a[i:i + chunk, None] + knn_b[None, :]) / 2
                s = s / denom if margin == "ratio" else s - denom
            preds.append(s.argmax(dim=1))
        return torch.cat(preds).numpy()

    pred_en = best(x, y, knn_x if margin else None, knn_y if margin else None)   # xx -> en
    pred_xx = best(y, x, knn_y if margin else None, knn_x if margin else None)   # en -> xx
    gold = np.arange(n)
    if tgt_texts is not None and src_texts is not None:
        tgt_texts, src_texts = list(tgt_texts), list(src_texts)
        wrong_xx2en = np.array([tgt_texts[p] != tgt_texts[g] for p, g in zip(pred_en, gold)], dtype=bool)
        wrong_en2xx = np.array([src_texts[p] != src_texts[g] for p, g in zip(pred_xx, gold)], dtype=bool)
    else:
        wrong_xx2en, wrong_en2xx = pred_en != gold, pred_xx != gold
    out = {"xx2en_errors": int(wrong_xx2en.sum()), "en2xx_errors": int(wrong_en2xx.sum()), "n": n}
    if return_wrong:
        out.update(xx2en_wrong=wrong_xx2en, en2xx_wrong=wrong_en2xx)
    return out


# ---------------------------------------------------------------------------------------------- evaluation
def _pct(count: int, n: int) -> float:
    return round(100.0 * count / n, 2)


def average_errors(per_lang: dict) -> dict:
    """Unweighted mean over languages of every error metric (the paper's average), plus totals."""
    rows = [v for k, v in per_lang.items() if k != "average"]
    if not rows:
        return {}
    avg = {}
    for key in rows[0]:
        if "_error" in key:
            avg[key] = round(float(np.mean([r[key] for r in rows])), 2)
    avg["n"] = int(sum(r["n"] for r in rows))
    avg["languages"] = len(rows)
    return avg


def evaluate_tatoeba(cache, langs: Sequence[str] | None = None, *, folder: str | Path | None = None,
                     hub_repo: str | None = None, hub_kwargs: dict | None = None, suffix: str = "",
                     pretokenized: bool = False, margin: str | None = None, k: int = 4, textual: bool = False,
                     lang_map: dict[str, str] | None = None, auto_lang: bool = False, show_progress: bool = True,
                     log=print) -> dict:
    """Tatoeba errors for every language.

    Args:
        cache: an [`~evaluation.cache.EmbeddingCache`] (embeddings are computed once per model and file).
        langs: ISO 639-3 codes (default: every language in `folder`; required with `hub_repo`).
        folder / hub_repo: where the data comes from (exactly one).
        suffix, pretokenized: read `tatoeba.xxx-eng.xxx{suffix}` files that are already BPE-tokenised
            (e.g. `suffix=".bpe"`, `pretokenized=True` for the reference `.bpe` files).
        margin: also compute the margin-based variant (`"ratio"` / `"distance"`), stored as `*_error_margin`.
        textual: count a retrieved duplicate of the gold sentence as correct (stored as `*_error_text`).
        lang_map: ISO 639-3 → preprocessing language (default [`TATOEBA_LANGS`]; unknown codes are used as is).
        auto_lang: also embed both sides with `lang="auto"` (language detected per sentence) and store the errors
            as `*_error_auto` (cosine; with `margin`, also `*_error_margin_auto`).

    Returns:
        `{lang: {"xx2en_error": %, "en2xx_error": %, "n": pairs, ...}, ..., "average": {...}}`, errors in percent.
    """
    if (folder is None) == (hub_repo is None):
        raise ValueError("give exactly one of folder= (LASER layout) or hub_repo=")
    if auto_lang and pretokenized:
        raise ValueError("auto_lang needs raw text: the language is detected before the preprocessing, which "
                         "pre-tokenized input has already been through")
    lang_map = {**TATOEBA_LANGS, **(lang_map or {})}
    if langs is None:
        if folder is None:
            raise ValueError("langs is required with hub_repo")
        langs = [lang for lang in available_languages(folder, suffix) if lang != "eng"]
        if not langs:
            raise FileNotFoundError(f"no tatoeba.xxx-eng.xxx{suffix} files in {folder}")
    results = {}
    for lang in tqdm(list(langs), desc="tatoeba", unit="lang", disable=not show_progress):
        t0 = time.time()
        code = lang_map.get(lang)
        if code is None:
            code = lang
            log(f"tatoeba: no preprocessing language known for {lang!r}; using {lang!r}")
        if folder is not None:
            src, tgt = tatoeba_paths(folder, lang, suffix)
            n = check_pair_files(src, tgt)
            src_emb = cache.embed_file(src, code, pretokenized=pretokenized)
            tgt_emb = cache.embed_file(tgt, "en", pretokenized=pretokenized)
            texts = (list(read_lines(src)), list(read_lines(tgt))) if textual else (None, None)
        else:
            ds = load_tatoeba_hub(lang, hub_repo, **(hub_kwargs or {}))
            n = len(ds)
            src_emb = cache.embed_texts(ds["source"], code, pretokenized=pretokenized, name=f"tatoeba.{lang}")
            tgt_emb = cache.embed_texts(ds["target"], "en", pretokenized=pretokenized, name=f"tatoeba.{lang}.eng")
            texts = (ds["source"], ds["target"]) if textual else (None, None)
        if len(src_emb) != n or len(tgt_emb) != n:
            raise RuntimeError(f"{lang}: got {len(src_emb)}/{len(tgt_emb)} embeddings for {n} pairs")
        cos = retrieval_errors(src_emb, tgt_emb, k=k)
        row = {"xx2en_error": _pct(cos["xx2en_errors"], n), "en2xx_error": _pct(cos["en2xx_errors"], n), "n": n}
        if margin:
            m = retrieval_errors(src_emb, tgt_emb, margin=margin, k=k)
            row["xx2en_error_margin"] = _pct(m["xx2en_errors"], n)
            row["en2xx_error_margin"] = _pct(m["en2xx_errors"], n)
        if auto_lang:
            if folder is not None:
                auto_src = cache.embed_file(src, "auto", pretokenized=pretokenized)
                auto_tgt = cache.embed_file(tgt, "auto", pretokenized=pretokenized)
            else:
                auto_src = cache.embed_texts(ds["source"], "auto", name=f"tatoeba.{lang}")
                auto_tgt = cache.embed_texts(ds["target"], "auto", name=f"tatoeba.{lang}.eng")
            a = retrieval_errors(auto_src, auto_tgt, k=k)
            row["xx2en_error_auto"] = _pct(a["xx2en_errors"], n)
            row["en2xx_error_auto"] = _pct(a["en2xx_errors"], n)
            if margin:
                am = retrieval_errors(auto_src, auto_tgt, margin=margin, k=k)
                row["xx2en_error_margin_auto"] = _pct(am["xx2en_errors"], n)
                row["en2xx_error_margin_auto"] = _pct(am["en2xx_errors"], n)
        if textual:
            t = retrieval_errors(src_emb, tgt_emb, k=k, src_texts=texts[0], tgt_texts=texts[1])
            row["xx2en_error_text"] = _pct(t["xx2en_errors"], n)
            row["en2xx_error_text"] = _pct(t["en2xx_errors"], n)
        results[lang] = row
        log(f"tatoeba {lang}: xx→en {row['xx2en_error']:.2f}%  en→xx {row['en2xx_error']:.2f}%  (n={n}, "
            f"{time.time() - t0:.1f}s)")
    results["average"] = average_errors(results)
    return results


def auto_lang_comparison(results: dict, worst: int = 10) -> dict:
    """How `lang="auto"` compares with the true language codes in [`evaluate_tatoeba`]`(auto_lang=True)` results.

    Returns:
        `{"languages", "average": {"xx2en_error", "xx2en_error_auto", "en2xx_error", "en2xx_error_auto"} (unweighted
        means, %), "worse", "better", "same": languages whose summed xx→en + en→xx error is higher / lower / equal
        with auto, "largest_increase": the `worst` languages with the largest increase, as
        `{"lang", "xx2en_error", "xx2en_error_auto", "en2xx_error", "en2xx_error_auto"}`}`.
    """
    keys = ("xx2en_error", "xx2en_error_auto", "en2xx_error", "en2xx_error_auto")
    rows = {lang: row for lang, row in results.items() if lang != "average"}
    missing = [lang for lang, row in rows.items() if "xx2en_error_auto" not in row]
    if not rows or missing:
        raise ValueError("no lang='auto' errors in these results (run evaluate_tatoeba with auto_lang=True)"
                         + (f"; missing for {missing[:5]}" if missing else ""))

    def delta(row):
        return round(row["xx2en_error_auto"] + row["en2xx_error_auto"] - row["xx2en_error"] - row["en2xx_error"], 2)

    deltas = {lang: delta(row) for lang, row in rows.items()}
    ranked = sorted((lang for lang in rows if deltas[lang] > 0), key=lambda lang: (-deltas[lang], lang))
    return {
        "languages": len(rows),
        "average": {key: round(float(np.mean([row[key] for row in rows.values()])), 2) for key in keys},
        "worse": sum(d > 0 for d in deltas.values()),
        "better": sum(d < 0 for d in deltas.values()),
        "same": sum(d == 0 for d in deltas.values()),
        "largest_increase": [{"lang": lang, **{key: rows[lang][key] for key in keys}} for lang in ranked[:worst]],
    }


def _print_auto_lang_comparison(comparison: dict, model: str, log=print) -> None:
    avg = comparison["average"]
    log(f"lang='auto' vs the true language codes, {comparison['languages']} Tatoeba languages, model {model}:")
    log(f"  average error xx→en {avg['xx2en_error']:.2f}% (true codes) / {avg['xx2en_error_auto']:.2f}% (auto); "
        f"en→xx {avg['en2xx_error']:.2f}% / {avg['en2xx_error_auto']:.2f}%")
    log(f"  languages with a higher / lower / equal error with auto: {comparison['worse']} / {comparison['better']} "
        f"/ {comparison['same']}")
    for row in comparison["largest_increase"]:
        log(f"  {row['lang']}: xx→en {row['xx2en_error']:.2f}% -> {row['xx2en_error_auto']:.2f}%, "
            f"en→xx {row['en2xx_error']:.2f}% -> {row['en2xx_error_auto']:.2f}%")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.tatoeba", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="LASER model directory or Hub id (default: the shipped laser-mini)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--tatoeba-dir", help="LASER-layout folder (tatoeba.xxx-eng.{xxx,eng})")
    src.add_argument("--tatoeba-hub", help=f"Hub dataset (e.g. {DEFAULT_HUB_REPO})")
    parser.add_argument("--langs", default=None, help="comma-separated ISO 639-3 codes (default: all in the folder)")
    parser.add_argument("--margin", choices=["ratio", "distance"], default=None, help="also the margin variant")
    parser.add_argument("--textual", action="store_true", help="also count retrieved duplicates as correct")
    parser.add_argument("--auto-lang", action="store_true",
                        help="also embed both sides with lang='auto' (detected per sentence) and compare the errors "
                             "with those of the true language codes (*_error_auto, and an 'auto_lang' summary)")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    from hf_laser.models import resolve_model

    args.model = resolve_model(args.model, who="evaluation.tatoeba")
    from hf_laser.encoder import LaserEncoder

    from .cache import EmbeddingCache

    encoder = LaserEncoder.from_pretrained(args.model, device=args.device)
    cache = EmbeddingCache(encoder, args.cache_dir)
    langs = [x.strip() for x in args.langs.split(",") if x.strip()] if args.langs else None
    res = evaluate_tatoeba(cache, langs, folder=args.tatoeba_dir, hub_repo=args.tatoeba_hub, margin=args.margin,
                           textual=args.textual, auto_lang=args.auto_lang)
    out = {"tatoeba": res}
    if args.auto_lang:
        out["auto_lang"] = auto_lang_comparison(res)
        _print_auto_lang_comparison(out["auto_lang"], args.model, log=lambda m: print(m, file=sys.stderr))
    text = json.dumps(out, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
