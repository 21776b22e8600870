"""Does the training data know Tatoeba's words, and do unknown words explain the encoder's Tatoeba errors?

    python training/coverage.py --config training/configs/laser-mini.yaml [--model DIR] [--langs deu,fra,...]
    python training/coverage.py --run OUT      # the run's config.yaml and its exported encoder OUT/final

For every Tatoeba language (default: the 12 of `report.FOCUS`) this counts the words of the config's training
corpora in that language (every corpus code with the same base language: `pt` and `pt_BR`; whole files, before the
training filters) and in English, and splits the Tatoeba pairs into *covered* (every word of both sides occurs at
least `--min-count` times in the training text of its language) and the rest. It reports the share of Tatoeba word
tokens never seen in training, the covered share, and the encoder's xx→en and en→xx error (nearest neighbour by
cosine, by index as in `evaluation/tatoeba.py`) on each part. If unknown words caused the errors, the covered
part would have a much lower error than the rest.

Words are lower-cased runs of `\\w` characters: meaningful for languages written with spaces, not for Chinese,
Japanese or Thai (refused). Writes `coverage.json` and `coverage.md` (with a mean row) to `--output-dir` (default:
the run, else the current directory) and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make `training`, `evaluation` (and `hf_laser`) importable
    sys.path.insert(0, str(REPO))
    sys.path.append(str(REPO / "src"))

from training.data import read_text_lines, resolve_corpora  # noqa: E402
from training.report import FOCUS, base_language  # noqa: E402

WORD = re.compile(r"\w+")
NO_SPACES = {"cmn", "wuu", "yue", "jpn", "tha", "khm", "lao", "mya"}


def words(text: str) -> list[str]:
    """Lower-cased `\\w+` runs: `"Du hast Recht."` → `["du", "hast", "recht"]`."""
    return WORD.findall(text.lower())


def training_vocabularies(corpora, langs: set[str]) -> dict[str, Counter]:
    """`{base language: Counter of words}` over every file of `corpora` (from `training.data.resolve_corpora`)
    whose language code has one of the base languages `langs` (`pt_BR` counts as `pt`)."""
    vocab = {lang: Counter() for lang in langs}
    for corpus in corpora:
        if corpus.kind == "datasets":
            raise ValueError(f"corpus {corpus.name}: Hub/datasets corpora are not counted; list files instead")
        for code, path in corpus.files.items():
            if base_language(code) in vocab:
                for line in read_text_lines(path):
                    vocab[base_language(code)].update(words(line))
    return vocab


def covered(sentences: list[str], vocab: Counter, min_count: int) -> np.ndarray:
    """`(n,)` bool: every word of the sentence occurs at least `min_count` times in `vocab`."""
    return np.array([all(vocab[w] >= min_count for w in words(s)) for s in sentences], dtype=bool)


def length_matched_error(wrong: np.ndarray, lengths: np.ndarray, part: np.ndarray, min_pairs: int = 5) -> float | None:
    """Error (%) of the pairs outside `part`, reweighted to the sentence-length distribution of `part` (lengths with
    fewer than `min_pairs` pairs outside `part` are left out): short sentences are both more often covered and
    harder to retrieve, so the raw errors of the two parts are not comparable."""
    total = weight = 0.0
    for length in np.unique(lengths[part]):
        rest = ~part & (lengths == length)
        if rest.sum() >= min_pairs:
            n = float((part & (lengths == length)).sum())
            total, weight = total + n * float(wrong[rest].mean()), weight + n
    return round(100.0 * total / weight, 1) if weight else None


def coverage_row(xx: list[str], en: list[str], vocab_xx: Counter, vocab_en: Counter, min_count: int,
                 wrong_xx2en: np.ndarray, wrong_en2xx: np.ndarray) -> dict:
    """Coverage and error figures (%) of one Tatoeba language; `wrong_*`: `(n,)` bool, the pair's retrieval failed."""
    tokens = [w for s in xx for w in words(s)]
    lengths = np.array([len(words(s)) for s in xx])
    both = covered(xx, vocab_xx, min_count) & covered(en, vocab_en, min_count)

    def pct(mask: np.ndarray) -> float | None:
        return round(100.0 * float(mask.mean()), 1) if mask.size else None

    return {
        "n": len(xx), "training_words": sum(vocab_xx.values()), "training_types": len(vocab_xx),
        "tatoeba_oov_tokens": round(100.0 * sum(vocab_xx[w] == 0 for w in tokens) / max(1, len(tokens)), 1),
        "covered": pct(both), "n_covered": int(both.sum()),
        "xx2en_error": pct(wrong_xx2en), "xx2en_error_covered": pct(wrong_xx2en[both]),
        "xx2en_error_rest": pct(wrong_xx2en[~both]),
        "xx2en_error_rest_length_matched": length_matched_error(wrong_xx2en, lengths, both),
        "en2xx_error": pct(wrong_en2xx), "en2xx_error_covered": pct(wrong_en2xx[both]),
        "en2xx_error_rest": pct(wrong_en2xx[~both]),
        "en2xx_error_rest_length_matched": length_matched_error(wrong_en2xx, lengths, both),
    }


def measure(config: dict, model_dir: str | None, langs: list[str], tatoeba_dir: Path, min_count: int,
            device: str | None = None) -> dict:
    from evaluation.tatoeba import TATOEBA_LANGS, load_tatoeba_local, retrieval_errors
    from hf_laser import LaserEncoder

    refused = [lang for lang in langs if lang in NO_SPACES or lang not in TATOEBA_LANGS]
    if refused:
        raise ValueError(f"cannot count words of {', '.join(refused)} (unknown, or written without spaces)")
    corpora = resolve_corpora(config["data"]["corpora"], REPO)
    codes = {lang: TATOEBA_LANGS[lang] for lang in langs}
    vocab = training_vocabularies(corpora, set(codes.values()) | {"en"})
    encoder = LaserEncoder.from_pretrained(model_dir, device=device)
    rows = {}
    for lang in langs:
        pairs = load_tatoeba_local(tatoeba_dir, lang)
        xx, en = pairs["source"], pairs["target"]
        wrong = retrieval_errors(encoder.encode(xx, lang=codes[lang]), encoder.encode(en, lang="en"),
                                 return_wrong=True)
        rows[lang] = coverage_row(xx, en, vocab[codes[lang]], vocab["en"], min_count,
                                  wrong["xx2en_wrong"], wrong["en2xx_wrong"])
    # name the model actually measured (the shipped default when none is given), never a bare "default"
    return {"min_count": min_count, "model": str(model_dir or encoder.model.name_or_path), "languages": rows}


def mean_row(result: dict) -> dict:
    """The mean of every figure over the languages of `result` (None where a language has none)."""
    rows = list(result["languages"].values())
    keys = [k for k in rows[0] if k not in ("n", "training_words", "training_types", "n_covered")]
    return {k: (round(sum(r[k] for r in rows) / len(rows), 1) if all(r[k] is not None for r in rows) else None)
            for k in keys}


def to_markdown(result: dict) -> str:
    k = result["min_count"]
    lines = [f"Tatoeba pairs whose every word occurs ≥ {k}× in the training text of its language (covered) against "
             f"the rest; model `{result['model']}`; errors in %; *matched*: the rest's error reweighted to the covered "
             "pairs' sentence lengths (words of the xx side).", "",
             "| language | training words | Tatoeba tokens unseen | covered pairs | xx→en error: covered / rest / "
             "matched | en→xx error: covered / rest / matched |", "|---|---|---|---|---|---|"]
    rows = [(lang, r, f"{r['training_words']:,}", f" ({r['n_covered']})") for lang, r in result["languages"].items()]
    rows.append(("**mean**", mean_row(result), "", ""))
    for lang, r, training_words, n_covered in rows:
        lines.append(f"| {lang} | {training_words} | {r['tatoeba_oov_tokens']} % | {r['covered']} %{n_covered} | "
                     f"{r['xx2en_error_covered']} / {r['xx2en_error_rest']} / {r['xx2en_error_rest_length_matched']} | "
                     f"{r['en2xx_error_covered']} / {r['en2xx_error_rest']} / {r['en2xx_error_rest_length_matched']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a train.py --output-dir: its config.yaml and OUT/final")
    source.add_argument("--config", help="a training config (its data.corpora are counted)")
    parser.add_argument("--model", default=None, help="encoder directory (default: OUT/final with --run, else the "
                                                      "shipped default model)")
    parser.add_argument("--langs", default=",".join(FOCUS), help="Tatoeba codes, comma-separated (default: FOCUS)")
    parser.add_argument("--min-count", type=int, default=3, help="occurrences that make a word known (default 3)")
    parser.add_argument("--tatoeba-dir", default=str(REPO.parent / "shared" / "data" / "tatoeba" / "v1"))
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    if args.min_count < 1:
        parser.error("--min-count must be at least 1")
    tatoeba_dir = Path(args.tatoeba_dir)
    if not tatoeba_dir.is_dir():
        parser.error(f"--tatoeba-dir {tatoeba_dir} not found")
    config_path = Path(args.run) / "config.yaml" if args.run else Path(args.config)
    if not config_path.is_file():
        parser.error(f"{config_path} not found")
    model = args.model or (str(Path(args.run) / "final") if args.run else None)
    try:
        result = measure(yaml.safe_load(config_path.read_text()), model, [s for s in args.langs.split(",") if s],
                         tatoeba_dir, args.min_count, args.device)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    out = Path(args.output_dir or args.run or ".")
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.json").write_text(json.dumps(result, indent=1))
    markdown = to_markdown(result)
    (out / "coverage.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
