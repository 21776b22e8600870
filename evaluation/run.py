"""Evaluates a LASER model on the paper's benchmarks with one command.

    python -m evaluation.run --model DIR --tasks tatoeba,xnli,mldoc[,bucc][,xsim] [--langs fra,deu,...] \\
        --out RESULTS_DIR \\
        [--tatoeba-dir ../shared/data/tatoeba/v1] [--xnli-dir XNLI-1.0 --mnli multinli_1.0] [--mldoc-dir MLDoc] \\
        [--bucc-dir ../shared/data/mining] [--xsim-dir ../shared/data/parallel/valid/flores200-devtest]

Writes to RESULTS_DIR:
- `results.json`: task → language (or pair) → metric, all in percent (schema in docs/evaluate.md and below);
- `results.md`: the same as Markdown tables; `tatoeba.png`, `xnli.png`, `mldoc.png`: per-language plots;
- `xsim/`: with `--tasks xsim`, the N-way similarity search's matrix, heatmap and per-language table
  (`evaluation/xsim.py`);
- `results_info.json`: settings, data counts (e.g. MultiNLI pairs dropped for lack of a gold label), timings.

results.json::

    {"tatoeba": {"fra": {"xx2en_error": 4.3, "en2xx_error": 4.9, "n": 1000}, ...,
                 "average": {"xx2en_error": ..., "en2xx_error": ..., "n": total pairs, "languages": 112}},
     "xnli": {"en": {"accuracy": 73.9, "n": 5010, "dev_accuracy": 74.5}, "fr": {...}, ..., "average": {...}},
     "xnli_cross_lingual": {"en": {"en": 73.9, "fr": ...}, ...},          # with --xnli-cross-lingual
     "mldoc": {"en": {"accuracy_1k": 89.9, ..., "n": 4000, "dev_accuracy_1k": ...}, ..., "average": {...}},
     "bucc": {"de-en": {"precision": ..., "recall": ..., "f1": ..., "threshold": ..., "n_gold": ...}}}

Embeddings are cached on disk per (model, text, language) (`--cache-dir`, see `evaluation/cache.py`), so re-running
or adding a task re-embeds nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

TASK_NAMES = ("tatoeba", "xnli", "mldoc", "bucc", "xsim")


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [x.strip() for x in value.split(",") if x.strip()]
    return items or None


def language_filter(codes: Sequence[str] | None):
    """`--langs` accepts Tatoeba ISO 639-3 codes and the 2-letter codes of XNLI/MLDoc/BUCC; returns
    `(iso3 set, iso1 set)` (None: no filter)."""
    if codes is None:
        return None, None
    from .tatoeba import TATOEBA_LANGS

    iso3, iso1 = set(), set()
    for code in codes:
        if code in TATOEBA_LANGS:
            iso3.add(code)
            iso1.add(TATOEBA_LANGS[code])
        else:
            iso1.add(code)
            iso3.update(k for k, v in TATOEBA_LANGS.items() if v == code)
            iso3.add(code)  # a Tatoeba folder may hold languages the table does not know
    return iso3, iso1


def tatoeba_selection(codes: Sequence[str], present: Sequence[str]) -> list[str]:
    """Tatoeba languages for `--langs`: an ISO 639-3 code is taken as is (a missing file is then an error naming
    it); a 2-letter code selects the present languages preprocessed with it (`zh` → cmn, wuu, yue)."""
    from .tatoeba import TATOEBA_LANGS

    out = []
    for code in codes:
        if code in TATOEBA_LANGS or len(code) != 2:
            out.append(code)
        else:
            out += [x for x in present if TATOEBA_LANGS.get(x) == code]
    return list(dict.fromkeys(x for x in out if x != "eng"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evaluation.run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="LASER model directory (hf-laser convert / training) or Hub id "
                   "(default: the shipped laser-mini)")
    p.add_argument("--tasks", default="tatoeba",
                   help="comma-separated: tatoeba,xnli,mldoc,bucc,xsim (default tatoeba)")
    p.add_argument("--langs", default=None,
                   help="restrict every task to these languages (ISO 639-3 like fra,deu or 2-letter like fr,de)")
    p.add_argument("--out", required=True, help="RESULTS_DIR")
    g = p.add_argument_group("Tatoeba")
    g.add_argument("--tatoeba-dir", default=None, help="LASER-layout folder (e.g. ../shared/data/tatoeba/v1)")
    g.add_argument("--tatoeba-hub", default=None, help="Hub dataset instead (e.g. mteb/tatoeba-bitext-mining)")
    g.add_argument("--tatoeba-suffix", default="", help="file suffix, e.g. .bpe for pre-tokenised files")
    g.add_argument("--margin", choices=["ratio", "distance"], default=None, help="also the margin-based variant")
    g.add_argument("--textual", action="store_true", help="also count retrieved duplicates of the gold as correct")
    g = p.add_argument_group("XNLI")
    g.add_argument("--xnli-dir", default=None, help="XNLI-1.0 folder (xnli.dev.tsv, xnli.test.tsv)")
    g.add_argument("--mnli", default=None, help="MultiNLI training file or folder (multinli_1.0_train.txt/.jsonl)")
    g.add_argument("--xnli-hub", default=None, help="XNLI Hub dataset (default facebook/xnli without --xnli-dir)")
    g.add_argument("--mnli-hub", default=None, help="MultiNLI Hub dataset (default nyu-mll/multi_nli without --mnli)")
    g.add_argument("--xnli-cross-lingual", action="store_true", help="also the premise × hypothesis language matrix")
    g.add_argument("--xnli-epochs", type=int, default=None, help="default 200 (LASER)")
    g.add_argument("--xnli-max-train", type=int, default=None, help="use only the first N MultiNLI pairs")
    g = p.add_argument_group("MLDoc")
    g.add_argument("--mldoc-dir", default=None, help="folder with english.train.1000, english.dev, german.test, ...")
    g.add_argument("--mldoc-hub", default=None, help="Hub dataset (config per language, text/label columns)")
    g.add_argument("--mldoc-train-sizes", default=None, help="e.g. 1000,10000 (default: every size present)")
    g.add_argument("--mldoc-epochs", type=int, default=None, help="default 500 (LASER)")
    g = p.add_argument_group("BUCC (evaluation/bucc.py)")
    g.add_argument("--bucc-dir", default=None, help="folder with {xx}-en/{xx}-en.{split}.{xx,en,gold}")
    g.add_argument("--bucc-pairs", default="de-en,fr-en,ru-en,zh-en")
    g.add_argument("--bucc-train-split", default="training")
    g.add_argument("--bucc-eval-split", default="sample")
    g.add_argument("--bucc-max-sentences", type=int, default=None, help="subsample each side (quick checks)")
    g = p.add_argument_group("N-way similarity search (evaluation/xsim.py)")
    g.add_argument("--xsim-dir", default=None, help="multi-parallel folder of {lang}.txt files (default "
                   "../shared/data/parallel/valid/flores200-devtest); --langs selects file names")
    g.add_argument("--xsim-margin", action="store_true", help="also the ratio-margin variant")
    g.add_argument("--xsim-drop-duplicates", action="store_true", help="drop rows whose text occurs on another row")
    g.add_argument("--xsim-drop-empty", action="store_true", help="drop rows that are empty in some language")
    g.add_argument("--xsim-max-sentences", type=int, default=None, help="only the first N lines")
    g.add_argument("--xsim-langs-tsv", default=None, help="langs.tsv with script and name of each code "
                   "(default ../shared/data/parallel/langs.tsv when present)")
    g = p.add_argument_group("classifiers and embedding")
    g.add_argument("--patience", type=int, default=None, help="early stop after N epochs without dev gain")
    g.add_argument("--save-classifiers", action="store_true",
                   help="save the selected XNLI/MLDoc classifiers as LaserForSequenceClassification under OUT/")
    g.add_argument("--pretokenized", action="store_true", help="every input text is already BPE-tokenised")
    g.add_argument("--cache-dir", default=None, help="embedding cache (default $HF_LASER_EMBEDDING_CACHE or ~/.cache/hf_laser/embeddings)")
    g.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    g.add_argument("--fp16-cache", action="store_true", help="cache float16 embeddings")
    g.add_argument("--device", default="cpu", help="encoder and classifier device (cpu, cuda, ...)")
    g.add_argument("--max-tokens", type=int, default=12000, help="encoder token budget per batch")
    g.add_argument("--num-proc", type=int, default=1, help="processes for the text preprocessing")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return p


def run(args: argparse.Namespace, argv: Sequence[str] | None = None) -> dict:
    tasks = _split(args.tasks) or []
    unknown = [t for t in tasks if t not in TASK_NAMES]
    if unknown or not tasks:
        raise SystemExit(f"evaluation.run: error: unknown task(s) {unknown}; choose from {list(TASK_NAMES)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    iso3, iso1 = language_filter(_split(args.langs))
    show = not args.quiet and sys.stderr.isatty()  # progress bars: on a terminal only
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    t_start = time.time()

    from hf_laser.encoder import LaserEncoder

    from .cache import EmbeddingCache

    encoder = LaserEncoder.from_pretrained(args.model, device=args.device)
    cache = EmbeddingCache(encoder, args.cache_dir, fp16=args.fp16_cache, enabled=not args.no_cache,
                           show_progress=show, encode_kwargs={"max_tokens": args.max_tokens, "num_proc": args.num_proc})
    results: dict = {}
    info: dict = {"model": str(args.model), "command": "python -m evaluation.run " + shlex.join(argv or []),
                  "tasks": {},
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}

    def log(msg):
        print(msg, flush=True)

    for task in tasks:
        t0 = time.time()
        if task == "tatoeba":
            from .tatoeba import TATOEBA_LANGS, available_languages, evaluate_tatoeba

            if args.tatoeba_dir is None and args.tatoeba_hub is None:
                raise SystemExit("evaluation.run: error: --tasks tatoeba needs --tatoeba-dir or --tatoeba-hub")
            if args.tatoeba_dir is not None:
                present = [x for x in available_languages(args.tatoeba_dir, args.tatoeba_suffix) if x != "eng"]
            else:
                present = [x for x in TATOEBA_LANGS if x != "eng"]
            langs = present if iso3 is None else tatoeba_selection(_split(args.langs), present)
            if not langs:
                log("tatoeba: no language selected; skipped")
                continue
            results["tatoeba"] = evaluate_tatoeba(
                cache, langs, folder=args.tatoeba_dir, hub_repo=args.tatoeba_hub if args.tatoeba_dir is None else None,
                suffix=args.tatoeba_suffix, pretokenized=args.pretokenized, margin=args.margin,
                textual=args.textual, show_progress=show, log=log)
            info["tasks"]["tatoeba"] = {"languages": len(langs), "source": args.tatoeba_dir or args.tatoeba_hub,
                                        "margin": args.margin}
        elif task == "xnli":
            from .xnli import PAPER_DEFAULTS, XNLI_LANGS, evaluate_xnli

            langs = [x for x in XNLI_LANGS if iso1 is None or x in iso1]
            if not langs:
                log("xnli: none of --langs is an XNLI language; skipped")
                continue
            res = evaluate_xnli(cache, xnli_dir=args.xnli_dir, mnli=args.mnli, xnli_hub=args.xnli_hub,
                                mnli_hub=args.mnli_hub, langs=langs, cross_lingual=args.xnli_cross_lingual,
                                epochs=args.xnli_epochs or PAPER_DEFAULTS["epochs"], patience=args.patience,
                                max_train=args.xnli_max_train, pretokenized=args.pretokenized, device=args.device,
                                show_progress=show, log=log)
            results["xnli"] = res["results"]
            if res["cross_lingual"]:
                results["xnli_cross_lingual"] = res["cross_lingual"]
            info["tasks"]["xnli"] = res["info"]
            if args.save_classifiers:
                from .classifier import save_classifier

                path = save_classifier(args.model, res["head"], out / "classifiers" / "xnli")
                info["tasks"]["xnli"]["classifier"] = str(path)
        elif task == "mldoc":
            from .mldoc import MLDOC_LANGS, PAPER_DEFAULTS, evaluate_mldoc, size_key

            if args.mldoc_dir is None and args.mldoc_hub is None:
                raise SystemExit("evaluation.run: error: --tasks mldoc needs --mldoc-dir or --mldoc-hub")
            langs = [x for x in MLDOC_LANGS if iso1 is None or x in iso1]
            if not langs:
                log("mldoc: none of --langs is an MLDoc language; skipped")
                continue
            sizes = [int(s) for s in _split(args.mldoc_train_sizes)] if args.mldoc_train_sizes else None
            res = evaluate_mldoc(cache, folder=args.mldoc_dir, hub_repo=args.mldoc_hub if not args.mldoc_dir else None,
                                 langs=langs, train_sizes=sizes, epochs=args.mldoc_epochs or PAPER_DEFAULTS["epochs"],
                                 patience=args.patience, pretokenized=args.pretokenized, device=args.device,
                                 show_progress=show, log=log)
            results["mldoc"] = res["results"]
            info["tasks"]["mldoc"] = res["info"]
            if args.save_classifiers:
                from .classifier import save_classifier

                for size, head in res["heads"].items():
                    save_classifier(args.model, head, out / "classifiers" / f"mldoc-{size_key(size)}")
        elif task == "bucc":
            if args.bucc_dir is None:
                raise SystemExit("evaluation.run: error: --tasks bucc needs --bucc-dir")
            from .bucc import evaluate_bucc

            pairs = [x for x in _split(args.bucc_pairs) or [] if iso1 is None or x.split("-")[0] in iso1]
            if not pairs:
                log("bucc: no pair selected; skipped")
                continue
            results["bucc"], info["tasks"]["bucc"] = {}, {}
            for pair in pairs:
                kw = {"max_tokens": args.max_tokens}
                if args.pretokenized:
                    kw["pretokenized"] = True
                r = evaluate_bucc(encoder, args.bucc_dir, pair=pair, train_split=args.bucc_train_split,
                                  eval_split=args.bucc_eval_split, max_sentences=args.bucc_max_sentences,
                                  encode_kwargs=kw, show_progress=show)
                ev = r["eval"]
                results["bucc"][pair] = {"precision": round(100 * ev["precision"], 2),
                                         "recall": round(100 * ev["recall"], 2), "f1": round(100 * ev["f1"], 2),
                                         "threshold": round(float(r["threshold"]), 6), "n_gold": ev["n_gold"]}
                info["tasks"]["bucc"][pair] = {k: r[k] for k in ("train_split", "eval_split", "sizes", "settings",
                                                                 "seconds") if k in r}
                log(f"bucc {pair}: P {results['bucc'][pair]['precision']:.2f} R {results['bucc'][pair]['recall']:.2f}"
                    f" F1 {results['bucc'][pair]['f1']:.2f}")
        elif task == "xsim":
            from .xsim import DEFAULT_DATA, DEFAULT_LANGS_TSV, evaluate_xsim

            res = evaluate_xsim(cache, args.xsim_dir or DEFAULT_DATA, _split(args.langs),
                                margin=args.xsim_margin, drop_duplicates=args.xsim_drop_duplicates,
                                drop_empty=args.xsim_drop_empty, max_sentences=args.xsim_max_sentences,
                                pretokenized=args.pretokenized, device=args.device,
                                langs_tsv=args.xsim_langs_tsv or DEFAULT_LANGS_TSV, out_dir=out / "xsim",
                                title=Path(str(args.model)).name, show_progress=show, log=log)
            results["xsim"] = {"average": res["average"], "pooled_average": res["pooled_average"],
                               "languages": len(res["languages"]), "n_sentences": res["n_sentences"],
                               **({"average_margin": res["average_margin"]} if "average_margin" in res else {}),
                               "per_language": res["per_language"]}
            info["tasks"]["xsim"] = {k: res[k] for k in ("data", "settings", "timing", "memory")}
            info["tasks"]["xsim"]["files"] = {k: f"xsim/{v}" for k, v in res["files"].items()}
        if task in info["tasks"]:
            info["tasks"][task]["wall_seconds"] = round(time.time() - t0, 2)

    info["seconds"] = round(time.time() - t_start, 2)
    info["cache"] = {"dir": str(cache.root) if cache.enabled else None, "hits": cache.hits, "misses": cache.misses,
                     "fp16": args.fp16_cache}
    (out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "results_info.json").write_text(json.dumps(info, indent=2, ensure_ascii=False, default=str) + "\n",
                                           encoding="utf-8")
    from .report import plot_results, write_markdown

    plots = plot_results(results, out, title=Path(str(args.model)).name)
    write_markdown(results, out / "results.md", plots=plots,
                   header=f"# Evaluation of `{args.model}`\n\n`{info['command']}` ({info['started']}, "
                          f"{info['seconds']:.0f} s)")
    if "xsim" in results:  # hf_laser.checkpoints.hub's tables do not cover it: append the per-language table xsim wrote
        table = (out / "xsim" / "xsim_languages.md").read_text(encoding="utf-8")
        table = table.replace("](xsim_heatmap.png)", "](xsim/xsim_heatmap.png)").replace("# N-way", "## N-way", 1)
        with open(out / "results.md", "a", encoding="utf-8") as fh:
            fh.write("\n" + table)
    log(f"wrote {out / 'results.json'}, {out / 'results.md'}" + "".join(f", {out / p}" for p in plots.values()))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    from hf_laser.models import resolve_model

    args.model = resolve_model(args.model, who="evaluation.run")
    try:
        run(args, argv)
    except (FileNotFoundError, ValueError) as err:
        print(f"evaluation.run: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
