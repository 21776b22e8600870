"""Word-alignment fine-tuning of a LASER encoder (Cao, Kitaev & Klein 2020, section 3), with Accelerate.

    accelerate launch --config_file training/accelerate_configs/cpu.yaml training/align_words.py \\
        --model DIR --langs bg,de,el,es,fr --corpus ../shared/data/parallel/train --output-dir OUT \\
        [--max-pairs-per-lang 10000] [--epochs 1] [--batch-size 32] [--lr 1e-4] [--reg-weight 1.0] [--evaluate]

For parallel sentence pairs (xx, English) with one-to-one word links A from eflomal (both directions,
intersection; `evaluation/word_retrieval.py`), the loss of a batch is

    L = Σ_{(i,j) ∈ A} ‖f(xx)_i − f(en)_j‖²  +  λ Σ_{j ∈ English words} ‖f(en)_j − f₀(en)_j‖²

divided by the number of sentence pairs, where f is the fine-tuned encoder's word vector (mean, or first, of the
word's BPE states in `last_hidden_state`) and f₀ the initial encoder's (frozen): the paper's regulariser keeps the
English vectors where they were, so the other languages move towards English. Dropout is off (`--dropout 0`), so the
regulariser compares like with like.

OUT receives `final/` (a normal LASER directory: config, weights, tokenizer, modeling code, model card,
`alignment.json` with the settings and data sizes), `aligned_word_pairs/{xx}-en.tsv` (the word pair types of the
training links, which `python -m evaluation.word_retrieval --exclude-pairs` leaves out of its test),
`data_stats.json` and `metrics.jsonl` (loss terms every `--log-every` steps). With `--evaluate`, the initial and the
fine-tuned encoder are then compared (`report.json`, `report.md`): word retrieval on FLORES-200 devtest
(`evaluation/word_retrieval.py`), Tatoeba errors (`evaluation/tatoeba.py`) and FLORES similarity-search errors
(`evaluation/xsim.py`).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `training` / `evaluation` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from evaluation.word_retrieval import (  # noqa: E402
    WordPieces,
    aligner_text,
    align_bitext,
    word_pieces,
    word_vectors,
    write_word_pairs,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = "../shared/data/parallel/train"
# Tatoeba codes of the languages this script is usually run on, and the 12 of the laser-mini report
TATOEBA_CODES = {"bg": "bul", "de": "deu", "el": "ell", "es": "spa", "fr": "fra", "it": "ita", "pt": "por",
                 "nl": "nld", "pl": "pol", "cs": "ces", "ru": "rus", "tr": "tur", "fi": "fin", "sv": "swe"}
CONTROL_LANGS = ["it", "pt", "nl", "pl", "cs", "ru", "tr", "fi", "sv"]  # not fine-tuned: side effects


# ---------------------------------------------------------------------------------------------- data
class AlignedPairs:
    """Training examples: per sentence pair its language, both sides' pieces and spans, and the word links."""

    def __init__(self):
        self.lang: list[str] = []
        self.xx = WordPieces([], [])
        self.en = WordPieces([], [])
        self.links: list[list[tuple[int, int]]] = []

    def __len__(self) -> int:
        return len(self.links)

    def add(self, lang: str, xx: WordPieces, en: WordPieces, links, max_pieces: int) -> dict:
        kept = {"pairs": 0, "no_link": 0, "too_long": 0, "links": 0}
        for k, pair_links in enumerate(links):
            if not pair_links:
                kept["no_link"] += 1
            elif len(xx.ids[k]) > max_pieces or len(en.ids[k]) > max_pieces:
                kept["too_long"] += 1
            else:
                self.lang.append(lang)
                self.xx.ids.append(xx.ids[k])
                self.xx.spans.append(xx.spans[k])
                self.en.ids.append(en.ids[k])
                self.en.spans.append(en.spans[k])
                self.links.append(list(pair_links))
                kept["pairs"] += 1
                kept["links"] += len(pair_links)
        return kept


def prepare_pairs(tokenizer, langs, corpora, out: Path, *, max_pairs: int | None, max_pieces: int, seed: int,
                  log) -> tuple[AlignedPairs, dict]:
    data, stats = AlignedPairs(), {}
    for lang in langs:
        src, tgt = aligner_text(corpora, lang, "en", max_pairs, seed=seed)
        if not src:
            raise ValueError(f"no {lang}-en sentence pair in {corpora}")
        bitext = align_bitext(tokenizer, src, tgt, lang, "en", log=log)
        write_word_pairs(out / "aligned_word_pairs" / f"{lang}-en.tsv", bitext.word_pair_types())
        kept = data.add(lang, word_pieces(tokenizer, bitext.src_words), word_pieces(tokenizer, bitext.tgt_words),
                        bitext.links, max_pieces)
        if kept["pairs"] == 0:
            raise ValueError(f"{lang}-en: no sentence pair with a word link is left ({kept})")
        stats[lang] = {**bitext.stats, **{f"kept_{k}": v for k, v in kept.items()},
                       "word_pair_types": len(bitext.word_pair_types())}
        log(f"{lang}-en: {len(src):,} sentence pairs, {bitext.stats['links']:,} one-to-one links; training on "
            f"{kept['pairs']:,} pairs ({kept['no_link']} without link, {kept['too_long']} over {max_pieces} pieces)")
    return data, stats


# ---------------------------------------------------------------------------------------------- loss
def alignment_loss(model, initial, data: AlignedPairs, batch: list[int], *, reg_weight: float, pooling: str,
                   max_tokens: int) -> tuple[torch.Tensor, dict]:
    """The paper's loss for the sentence pairs `batch` (see module docstring); returns (loss, its terms). Both
    sides go through the model in one call (one forward per backward, as DistributedDataParallel expects)."""
    both = WordPieces([data.xx.ids[b] for b in batch] + [data.en.ids[b] for b in batch],
                      [data.xx.spans[b] for b in batch] + [data.en.spans[b] for b in batch])
    words = [[i for i, _ in data.links[b]] for b in batch] + [range(len(data.en.spans[b])) for b in batch]
    vectors = word_vectors(model, both, words=words, pooling=pooling, max_tokens=max_tokens)
    xx, en = vectors[:len(batch)], vectors[len(batch):]
    with torch.no_grad():
        en0 = word_vectors(initial, data.en, sentences=batch, pooling=pooling, max_tokens=max_tokens)
    en_linked = torch.cat([en[k][[j for _, j in data.links[b]]] for k, b in enumerate(batch)])
    align = (torch.cat(xx) - en_linked).pow(2).sum()
    reg = (torch.cat(en) - torch.cat(en0)).pow(2).sum()
    loss = (align + reg_weight * reg) / len(batch)
    n_links = en_linked.shape[0]
    a, r = float(align.detach()), float(reg.detach())
    return loss, {"align": a / len(batch), "reg": r / len(batch), "links": n_links,
                  "align_per_link": a / max(n_links, 1)}


def set_dropout(model: torch.nn.Module, p: float) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p
        elif isinstance(m, torch.nn.LSTM) and m.num_layers > 1:
            m.dropout = p


# ---------------------------------------------------------------------------------------------- report
def evaluate_before_after(initial_dir: str, final_dir: Path, out: Path, langs: list[str], args, log) -> dict:
    """Word retrieval (FLORES devtest, same word pairs for both models, training pairs excluded), Tatoeba errors and
    FLORES similarity-search errors of the initial and the fine-tuned encoder."""
    from evaluation.cache import EmbeddingCache
    from evaluation.tatoeba import evaluate_tatoeba
    from evaluation.word_retrieval import (
        DEFAULT_TEST_DIR,
        align_bitext,
        evaluate_word_retrieval,
        load_test_bitext,
        read_word_pairs,
    )
    from evaluation.xsim import evaluate_xsim
    from hf_laser import LaserEncoder

    models = {"initial": initial_dir, "aligned": str(final_dir)}
    encoders = {k: LaserEncoder.from_pretrained(v, device=args.device) for k, v in models.items()}
    tokenizer = encoders["initial"].tokenizer
    report: dict = {"models": models, "languages": langs, "word_retrieval": {}, "tatoeba": {}, "flores": {}}
    for lang in tqdm(langs, desc="word retrieval", unit="lang"):
        src, tgt = load_test_bitext(DEFAULT_TEST_DIR, lang, "en")
        extra = aligner_text(args.corpus, lang, "en", args.eval_aligner_pairs, seed=args.seed)
        bitext = align_bitext(tokenizer, src, tgt, lang, "en", extra=extra, log=log)
        exclude = read_word_pairs(out / "aligned_word_pairs" / f"{lang}-en.tsv")
        report["word_retrieval"][lang] = {
            name: evaluate_word_retrieval(enc.model, tokenizer, bitext, exclude=exclude, pooling=args.pooling,
                                          device=args.device) for name, enc in encoders.items()}
    tatoeba_langs = [TATOEBA_CODES[x] for x in list(dict.fromkeys(langs + CONTROL_LANGS)) if x in TATOEBA_CODES]
    flores_langs = ["en"] + list(dict.fromkeys(langs + CONTROL_LANGS))
    for name, enc in encoders.items():
        cache = EmbeddingCache(enc, args.cache_dir, show_progress=True)
        if args.tatoeba_dir and Path(args.tatoeba_dir).is_dir():
            report["tatoeba"][name] = evaluate_tatoeba(cache, tatoeba_langs, folder=args.tatoeba_dir,
                                                       show_progress=True, log=lambda m: None)
        res = evaluate_xsim(cache, DEFAULT_TEST_DIR, flores_langs, device=args.device, show_progress=True,
                            log=lambda m: None)
        en = res["languages"].index("en")
        report["flores"][name] = {
            "average": res["average"], "pooled_average": res["pooled_average"], "languages": res["languages"],
            "xx2en": {x: res["matrix"][i][en] for i, x in enumerate(res["languages"]) if x != "en"},
            "en2xx": {x: res["matrix"][en][i] for i, x in enumerate(res["languages"]) if x != "en"}}
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(report_markdown(report), encoding="utf-8")
    log(f"wrote {out / 'report.md'}")
    return report


def _delta(before, after) -> str:
    return f"{before:.2f} → {after:.2f} ({after - before:+.2f})"


def report_markdown(report: dict) -> str:
    langs = report["languages"]
    lines = ["# Word-alignment fine-tuning: before / after", "",
             f"initial: `{report['models']['initial']}`; aligned: `{report['models']['aligned']}`", "",
             "## Word retrieval (FLORES-200 devtest, CSLS k=10, accuracy %, higher is better)", "",
             "| pair | test word pairs | xx→en contextual | en→xx contextual | xx→en non-contextual | "
             "en→xx non-contextual |", "|---|---|---|---|---|---|"]
    for lang in langs:
        b, a = report["word_retrieval"][lang]["initial"], report["word_retrieval"][lang]["aligned"]
        lines.append(f"| {lang}-en | {b['pairs']['pairs']} | "
                     f"{_delta(b['src2tgt']['contextual'], a['src2tgt']['contextual'])} | "
                     f"{_delta(b['tgt2src']['contextual'], a['tgt2src']['contextual'])} | "
                     f"{_delta(b['src2tgt']['non_contextual'], a['src2tgt']['non_contextual'])} | "
                     f"{_delta(b['tgt2src']['non_contextual'], a['tgt2src']['non_contextual'])} |")
    if report["tatoeba"]:
        lines += ["", "## Tatoeba similarity-search error (%, lower is better; * = fine-tuned language)", "",
                  "| language | xx→en | en→xx |", "|---|---|---|"]
        b, a = report["tatoeba"]["initial"], report["tatoeba"]["aligned"]
        for code in [k for k in b if k != "average"]:
            star = "*" if code in {TATOEBA_CODES.get(x) for x in langs} else ""
            lines.append(f"| {code}{star} | {_delta(b[code]['xx2en_error'], a[code]['xx2en_error'])} | "
                         f"{_delta(b[code]['en2xx_error'], a[code]['en2xx_error'])} |")
        lines.append(f"| **mean** | {_delta(b['average']['xx2en_error'], a['average']['xx2en_error'])} | "
                     f"{_delta(b['average']['en2xx_error'], a['average']['en2xx_error'])} |")
    b, a = report["flores"]["initial"], report["flores"]["aligned"]
    lines += ["", f"## FLORES-200 devtest similarity-search error (%, lower is better; {len(b['languages'])} "
              "languages, * = fine-tuned)", "", "| language | xx→en | en→xx |", "|---|---|---|"]
    for x in b["xx2en"]:
        lines.append(f"| {x}{'*' if x in langs else ''} | {_delta(b['xx2en'][x], a['xx2en'][x])} | "
                     f"{_delta(b['en2xx'][x], a['en2xx'][x])} |")
    lines.append(f"| **all {len(b['languages'])}×{len(b['languages']) - 1} pairs** | "
                 f"{_delta(b['average'], a['average'])} | pooled {_delta(b['pooled_average'], a['pooled_average'])} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="LASER model directory (default: the shipped laser-mini)")
    p.add_argument("--langs", required=True, help="comma-separated languages aligned to English, e.g. bg,de,el,es,fr")
    p.add_argument("--corpus", action="append", default=None,
                   help=f"parallel corpora (training-config style folders; default {DEFAULT_CORPUS})")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-pairs-per-lang", type=int, default=None, help="sample at most N sentence pairs per language")
    p.add_argument("--max-pieces", type=int, default=100, help="skip sentence pairs with a side over N BPE pieces")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=32, help="sentence pairs per step (per process)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--reg-weight", type=float, default=1.0, help="λ of the English regulariser")
    p.add_argument("--pooling", choices=["mean", "first"], default="mean")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--max-minutes", type=float, default=None, help="stop (and export) after this much training")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--evaluate", action="store_true", help="compare initial and fine-tuned encoder at the end")
    p.add_argument("--eval-aligner-pairs", type=int, default=20000,
                   help="--evaluate: parallel pairs per language given to the aligner with the test sentences")
    p.add_argument("--tatoeba-dir", default="../shared/data/tatoeba/v1")
    p.add_argument("--cache-dir", default=None, help="--evaluate: embedding cache")
    p.add_argument("--device", default=None, help="--evaluate: device of the evaluation")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_scheduler

    from hf_laser import LaserModel, LaserTokenizer
    from hf_laser.checkpoints.model_card import write_model_card
    from hf_laser.models import resolve_model

    args.model = str(resolve_model(args.model, who="align_words"))
    args.corpus = args.corpus or [DEFAULT_CORPUS]
    langs = [x.strip() for x in args.langs.split(",") if x.strip()]
    if "en" in langs or not langs:
        raise SystemExit("align_words: --langs lists the languages aligned to English (not en itself)")
    out = Path(args.output_dir)
    accelerator = Accelerator(cpu=not torch.accelerator.is_available())
    set_seed(args.seed)

    def log(msg: str):
        if accelerator.is_local_main_process:
            tqdm.write(f"[align-words] {msg}", file=sys.stderr)

    t_start = time.time()
    tokenizer = LaserTokenizer.from_pretrained(args.model)
    with accelerator.main_process_first():
        if accelerator.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
        data, stats = prepare_pairs(tokenizer, langs, args.corpus, out, max_pairs=args.max_pairs_per_lang,
                                    max_pieces=args.max_pieces, seed=args.seed, log=log)
    if accelerator.is_main_process:
        (out / "data_stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    model = LaserModel.from_pretrained(args.model, dtype=torch.float32)
    initial = copy.deepcopy(model).eval().requires_grad_(False)
    set_dropout(model, args.dropout)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    rng = np.random.default_rng(args.seed)
    world = accelerator.num_processes
    per_epoch = len(data) // (args.batch_size * world)
    if per_epoch == 0:
        raise ValueError(f"{len(data)} sentence pairs make no full batch of {args.batch_size} × {world} processes")
    total_steps = max(1, math.ceil(per_epoch * args.epochs))
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=min(100, total_steps // 10),
                              num_training_steps=total_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    initial.to(accelerator.device)
    max_tokens = 2 * args.batch_size * args.max_pieces  # one forward call for both sides of a batch
    metrics = (out / "metrics.jsonl").open("w") if accelerator.is_main_process else None
    step, stopped = 0, "epochs"
    t_train = time.time()
    bar = tqdm(total=total_steps, desc="align words", unit="step", disable=not accelerator.is_local_main_process)
    while step < total_steps:
        order = rng.permutation(len(data))
        for first in range(0, per_epoch * args.batch_size * world, args.batch_size * world):
            if step >= total_steps:
                break
            mine = order[first + accelerator.process_index * args.batch_size:
                         first + (accelerator.process_index + 1) * args.batch_size].tolist()
            loss, terms = alignment_loss(model, initial, data, mine, reg_weight=args.reg_weight,
                                         pooling=args.pooling, max_tokens=max_tokens)
            optimizer.zero_grad()
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            step += 1
            bar.update(1)
            if metrics is not None and (step % args.log_every == 0 or step == 1 or step == total_steps):
                row = {"step": step, "loss": round(float(loss.detach()), 4),
                       **{k: round(v, 4) if isinstance(v, float) else v for k, v in terms.items()},
                       "lr": scheduler.get_last_lr()[0], "minutes": round((time.time() - t_train) / 60, 2)}
                metrics.write(json.dumps(row) + "\n")
                metrics.flush()
                bar.set_postfix(loss=f"{float(loss.detach()):.3f}", align=f"{terms['align_per_link']:.3f}")
            if args.max_minutes is not None and (time.time() - t_train) / 60 >= args.max_minutes:
                stopped = f"max_minutes ({args.max_minutes})"
                total_steps = step
                break
    bar.close()
    accelerator.wait_for_everyone()
    final = out / "final"
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model).eval()
        unwrapped.save_pretrained(final)
        tokenizer.save_pretrained(final)
        info = {"initial_model": args.model, "languages": langs, "corpora": args.corpus, "steps": step,
                "stopped_by": stopped, "train_minutes": round((time.time() - t_train) / 60, 2),
                "total_minutes": round((time.time() - t_start) / 60, 2), "processes": world,
                "settings": {k: getattr(args, k) for k in ("max_pairs_per_lang", "max_pieces", "epochs",
                                                           "batch_size", "lr", "reg_weight", "pooling", "dropout",
                                                           "seed")},
                "data": stats}
        (final / "alignment.json").write_text(json.dumps(info, indent=1) + "\n")
        pairs = ", ".join(f"{x}-en {stats[x]['kept_pairs']:,}" for x in langs)
        write_model_card(final, model_name=f"{Path(args.model).name} + word alignment ({','.join(langs)})",
                         base_model=args.model,
                         training=(f"`{args.model}` fine-tuned with `training/align_words.py` (Cao, Kitaev & Klein "
                                   f"2020): squared distance of eflomal-aligned words' states, English kept near the "
                                   f"initial model (λ = {args.reg_weight}); {step} steps of {args.batch_size} "
                                   f"sentence pairs, Adam lr {args.lr}; sentence pairs: {pairs}. Settings and data "
                                   "sizes: `alignment.json`."))
        log(f"exported {final} after {step} steps ({stopped}), {info['train_minutes']} min of training")
        if metrics is not None:
            metrics.close()
        if args.evaluate:
            evaluate_before_after(args.model, final, out, langs, args, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
