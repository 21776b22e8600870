"""`hf-laser similar`: nearest neighbours of sentences among another set of sentences, across languages.

    hf-laser similar --lang fr -i examples/fr.txt --target-lang en --target examples/en.txt [-k 3]

Both sides are embedded with the same model (default: the shipped laser-mini) and compared by cosine similarity;
under every query, its `k` most similar target lines are printed with their cosine. Exact search over all target
lines: for large sets use `hf-laser mine`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ..models import resolve_model
from ..text.langid import detect, is_auto
from ..text.text_tokenizer import check_lang_argument
from .common import check_device_arg, check_lang_arg, load_encoder_for_cli, names_a_model_set


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="model directory or Hub id (default: the shipped laser-mini)")
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("-i", "--input", help="query sentences, one per line")
    query.add_argument("--text", action="append", help="a query sentence (repeatable)")
    parser.add_argument("--lang", required=True,
                        help="language of the queries: a code (en, fr, fra_Latn ...), a language name (french), or "
                             "'auto' to detect it per sentence")
    parser.add_argument("--target", required=True, help="sentences to search, one per line")
    parser.add_argument("--target-lang", required=True,
                        help="language of the target sentences: a code, a language name, or 'auto'")
    parser.add_argument("-k", type=int, default=3, help="neighbours per query (default 3)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda ...")


def nearest(queries: np.ndarray, targets: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-`k` targets by cosine for every query: `(indices, scores)`, both `(n_queries, k)`, best first."""
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    t = targets / np.maximum(np.linalg.norm(targets, axis=1, keepdims=True), 1e-12)
    scores = q @ t.T
    k = min(k, len(targets))
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(scores, idx, axis=1)


def _read(path: str) -> list[str]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} not found" if not Path(path).exists() else f"{path} is not a file")
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ValueError(f"{path} is empty")
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        if args.k < 1:
            raise ValueError(f"-k must be at least 1, got {args.k}")
        check_lang_argument(args.lang)
        check_lang_argument(args.target_lang)
        routed = names_a_model_set(args.model)
        args.lang = check_lang_arg(args.lang, "hf-laser similar", note=False, auto=not routed)
        args.target_lang = check_lang_arg(args.target_lang, "hf-laser similar", "--target-lang", note=False,
                                          auto=not routed)
        check_device_arg(args.device)
        queries = args.text if args.text else _read(args.input)
        targets = _read(args.target)
        encoder = load_encoder_for_cli(resolve_model(args.model, who="hf-laser similar"), "hf-laser similar",
                                       langs={"--lang": args.lang, "--target-lang": args.target_lang},
                                       device=args.device)
    except (FileNotFoundError, ValueError, OSError) as err:
        print(f"hf-laser similar: error: {err}", file=sys.stderr)
        return 2
    idx, scores = nearest(encoder.encode(queries, lang=args.lang), encoder.encode(targets, lang=args.target_lang),
                          args.k)
    # with auto, each line is labelled with the language detected for it (what its preprocessing used)
    query_langs = detect(queries) if is_auto(args.lang) else [args.lang] * len(queries)
    target_langs = detect(targets) if is_auto(args.target_lang) else [args.target_lang] * len(targets)
    for i, query in enumerate(queries):
        print(f"[{query_langs[i]}] {query}")
        for rank in range(idx.shape[1]):
            j = int(idx[i, rank])
            print(f"    {scores[i, rank]:.3f}  [{target_langs[j]}] {targets[j]}")
    return 0
