"""Learns a joint BPE on the training text, in fastBPE format, and builds the `LaserTokenizer` that applies it.

    python training/learn_bpe.py --config training/configs/tiny-cpu.yaml --output-dir bpe-dir [--merges 50000]
    python training/learn_bpe.py --config training/configs/laser-mini.yaml --set 'data.corpora=[...]' --output-dir bpe-dir
    python training/learn_bpe.py --input en:corpus.en --input de:corpus.de.gz --output-dir bpe-dir

The text is that of the training pairs of the config (every language on either side, each distinct line once), or of
the `--input LANG:FILE` files. Languages are balanced by sampling: language `l` with `n_l` lines gets
`N * n_l**alpha / sum(n**alpha)` lines (`N`: `--max-lines`, default all lines; lines repeat when that is more than
`n_l`), so `alpha=1` keeps the natural proportions and `alpha=0` gives every language the same share. The sample
goes through the LASER preprocessing of its language (Moses tokenization, lower-casing, ...) and the merges are
learned with the `tokenizers` BPE trainer on words split at spaces, like fastBPE (`</w>` marks word ends).

Written to the output directory (a `LaserTokenizer` directory, loadable with `LaserTokenizer.from_pretrained`):
`bpe.fcodes` (`left right count`, in merge order; `count` = merges made on the sample), `bpe.fvocab` (`token count`
of the sample after BPE, fastBPE's `getvocab`), `vocab.json` (`<s> <pad> </s> <unk>`, then the subwords by
frequency), `tokenizer_config.json`, and `bpe_stats.json`. The script then applies the codes with the tokenizer to
every sampled line and checks that the subwords join back into the preprocessed text with no `<unk>`; it fails if
not.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make `training` (and, if not installed, `hf_laser`) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))

from hf_laser.text.bpe import END_WORD, split_symbols  # noqa: E402

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")  # ids 0..3, as in the LASER dictionaries


def balance_lines(lines_by_lang: dict[str, Sequence[str]], *, alpha: float = 0.5, max_lines: int | None = None,
                  seed: int = 0) -> dict[str, list[str]]:
    """Samples each language's lines to `N * n_l**alpha / sum(n**alpha)` (see the module docstring)."""
    counts = {lang: len(v) for lang, v in lines_by_lang.items() if len(v)}
    if not counts:
        raise ValueError("no text to learn BPE from")
    total = max_lines or sum(counts.values())
    weights = {lang: n ** alpha for lang, n in counts.items()}
    norm = sum(weights.values())
    rng = np.random.default_rng(seed)
    out = {}
    for lang in sorted(counts):
        n, quota = counts[lang], max(1, round(total * weights[lang] / norm))
        repeats, rest = divmod(quota, n)
        idx = np.concatenate([np.tile(np.arange(n), repeats), np.sort(rng.choice(n, rest, replace=False))])
        lines = lines_by_lang[lang]
        out[lang] = [lines[i] for i in idx.tolist()]
    return out


def _preprocess(args: tuple[str, list[str]]) -> list[str]:
    from hf_laser.text.preprocessing import preprocess

    lang, lines = args
    return preprocess(lines, lang)


def preprocess_lines(lines_by_lang: dict[str, list[str]], num_proc: int = 1) -> dict[str, list[str]]:
    """LASER preprocessing (`.tok` text) of every language's lines; each distinct line is processed once."""
    jobs, chunk = [], 5000
    uniques = {lang: list(dict.fromkeys(lines)) for lang, lines in lines_by_lang.items()}
    for lang, lines in uniques.items():
        jobs.extend((lang, lines[i:i + chunk]) for i in range(0, len(lines), chunk))
    if num_proc > 1 and len(jobs) > 1:
        context = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with multiprocessing.get_context(context).Pool(num_proc) as pool:
            results = pool.map(_preprocess, jobs)
    else:
        results = [_preprocess(job) for job in jobs]
    mapping: dict[str, dict[str, str]] = {lang: {} for lang in uniques}
    for (lang, lines), out in zip(jobs, results):
        mapping[lang].update(zip(lines, out))
    return {lang: [mapping[lang][line] for line in lines] for lang, lines in lines_by_lang.items()}


def train_merges(tok_lines: Iterable[str], merges: int) -> list[tuple[str, str]]:
    """The first `merges` merges of the `tokenizers` BPE trainer on `.tok` lines (words split at `' '` only)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok_lines = list(tok_lines)
    chars, finals = set(), set()
    for line in tok_lines:
        for word in line.split(" "):
            if word:
                chars.update(word)
                finals.add(word[-1])
    if not chars:
        raise ValueError("the text to learn BPE from has no word")
    tokenizer = Tokenizer(models.BPE(end_of_word_suffix=END_WORD))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    # The trainer breaks count ties by symbol id, and it numbers the word-final symbols ("s</w>") in hash-map order,
    # so the merges differ from one process to the next (huggingface/tokenizers#1794). Registering those symbols
    # first, sorted, numbers them deterministically: the same text then always gives the same merges.
    # Initial symbols = every character + every word-final character with </w>; each merge adds one.
    trainer = trainers.BpeTrainer(vocab_size=len(chars) + len(finals) + merges, min_frequency=0,
                                  end_of_word_suffix=END_WORD, show_progress=False,
                                  special_tokens=sorted(c + END_WORD for c in finals))
    tokenizer.train_from_iterator(tok_lines, trainer)
    learned = json.loads(tokenizer.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else (m[0], m[1]) for m in learned[:merges]]


def apply_merges_counts(word_counts: Counter, merges: Sequence[tuple[str, str]]) -> tuple[list[int], Counter]:
    """Applies the merges in rank order (fastBPE's `applybpe`, no vocabulary restriction) to every word.

    Returns the number of merges made per code (weighted by word frequency) and the subword counts in fastBPE's
    vocabulary format (`piece@@` inside a word, `piece` at its end).
    """
    ranks = {pair: r for r, pair in enumerate(merges)}
    merged = [0] * len(merges)
    vocab: Counter = Counter()
    for word, count in word_counts.items():
        syms = split_symbols(word)
        syms[-1] += END_WORD
        while len(syms) > 1:
            best = min((ranks.get(p, len(ranks)), i) for i, p in enumerate(zip(syms, syms[1:])))
            rank = best[0]
            if rank == len(ranks):
                break
            left, right = merges[rank]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == left and syms[i + 1] == right:
                    out.append(left + right)
                    merged[rank] += count
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        for sym in syms[:-1]:
            vocab[sym + "@@"] += count
        vocab[syms[-1][:-len(END_WORD)]] += count
    return merged, vocab


def verify_roundtrip(tokenizer, tok_lines: Sequence[str], lang: str) -> dict:
    """Applies the codes with `tokenizer` to `.tok` lines; counts lines that do not join back and `<unk>` ids."""
    failures, unk, examples = 0, 0, []
    unk_id = tokenizer.unk_token_id
    for line in tok_lines:
        pieces = tokenizer.tokenize(line, lang=lang, pretokenized="tok")
        ids = tokenizer.convert_tokens_to_ids(pieces)
        unk += sum(i == unk_id for i in ids)
        if tokenizer.convert_tokens_to_string(pieces) != " ".join(w for w in line.split(" ") if w) or unk_id in ids:
            failures += 1
            if len(examples) < 3:
                examples.append(line)
    return {"lines": len(tok_lines), "failures": failures, "unk_tokens": unk, "examples": examples}


def learn_bpe(lines_by_lang: dict[str, Sequence[str]], output_dir: str | Path, *, merges: int = 50000,
              alpha: float = 0.5, max_lines: int | None = None, seed: int = 0, num_proc: int = 1,
              log=print):
    """Samples, preprocesses, learns `merges` BPE merges and writes a `LaserTokenizer` directory; returns the
    tokenizer. Raises if applying the codes does not round-trip the sampled text."""
    from hf_laser.text.tokenization_laser import LaserTokenizer

    output_dir = Path(output_dir)
    sample = balance_lines(lines_by_lang, alpha=alpha, max_lines=max_lines, seed=seed)
    log("BPE sample: " + ", ".join(f"{lang} {len(v)}/{len(lines_by_lang[lang])}" for lang, v in sample.items()))
    tok = preprocess_lines(sample, num_proc=num_proc)
    all_lines = [line for lang in sorted(tok) for line in tok[lang]]
    codes = train_merges(all_lines, merges)
    word_counts = Counter(w for line in all_lines for w in line.split(" ") if w)
    merged, vocab = apply_merges_counts(word_counts, codes)
    dictionary = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    ordered = sorted(vocab.items(), key=lambda kv: (-kv[1], kv[0]))
    for token, _ in ordered:
        dictionary.setdefault(token, len(dictionary))
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        codes_path, vocab_path = Path(tmp) / "bpe.fcodes", Path(tmp) / "bpe.fvocab"
        codes_path.write_text("".join(f"{a} {b} {n}\n" for (a, b), n in zip(codes, merged)), encoding="utf-8",
                              errors="surrogateescape")
        vocab_path.write_text("".join(f"{t} {n}\n" for t, n in ordered), encoding="utf-8", errors="surrogateescape")
        tokenizer = LaserTokenizer.from_laser_files(dictionary, bpe_codes=codes_path, bpe_vocab=vocab_path,
                                                    save_dir=output_dir)
    checks = {lang: verify_roundtrip(tokenizer, lines, lang) for lang, lines in tok.items()}
    stats = {"merges": len(codes), "merges_requested": merges, "vocab_size": len(dictionary), "alpha": alpha,
             "seed": seed, "lines": {lang: {"available": len(lines_by_lang[lang]), "sampled": len(v)}
                                     for lang, v in sample.items()},
             "roundtrip": checks}
    (output_dir / "bpe_stats.json").write_text(json.dumps(stats, indent=1, ensure_ascii=False))
    bad = {lang: c for lang, c in checks.items() if c["failures"]}
    if bad:
        raise RuntimeError(f"the learned BPE does not round-trip the training text: {bad}")
    log(f"BPE: {len(codes)} merges, dictionary of {len(dictionary)} entries, round trip OK on "
        f"{sum(c['lines'] for c in checks.values())} lines -> {output_dir}")
    return tokenizer


def training_text(data_cfg: dict, base_dir: str | Path = ".") -> dict[str, list[str]]:
    """Distinct non-empty lines per language of the config's training pairs with a target language (both sides).

    With `bitext_pairs: all`, the pairs between two non-target languages are left out of the BPE sample, so the BPE
    does not depend on that setting (runs that differ only in it compare on the same tokens)."""
    from training.data import collect_pairs, resolve_corpora

    corpora = resolve_corpora(data_cfg["corpora"], base_dir)
    sources = data_cfg.get("source_languages", "all")
    targets = data_cfg.get("target_languages") or ["en", "es"]
    raw = collect_pairs(corpora, None if sources in (None, "all") else sources, targets,
                        data_cfg.get("bitext_pairs", "targets"))
    into_target = np.array([t in targets for _, t in raw.directions], dtype=bool)[np.asarray(raw.direction, dtype=int)]
    used = np.zeros(len(raw.texts), dtype=bool)
    used[np.asarray(raw.src, dtype=int)[into_target]] = True
    used[np.asarray(raw.tgt, dtype=int)[into_target]] = True
    by_lang: dict[str, dict[str, None]] = {}
    for i in np.flatnonzero(used).tolist():
        by_lang.setdefault(raw.langs[i], {})[raw.texts[i]] = None
    return {lang: list(lines) for lang, lines in sorted(by_lang.items())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="training config (YAML): learn on the text of its training pairs")
    src.add_argument("--input", action="append", metavar="LANG:FILE",
                     help="a text file (plain or .gz) and its language; repeat for more")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of --config, as train.py's --set (e.g. data.corpora=[a, b])")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--merges", type=int, default=None, help="number of merges (default: config's, else 50000)")
    parser.add_argument("--alpha", type=float, default=None, help="language balancing exponent (default 0.5)")
    parser.add_argument("--max-lines", type=int, default=None, help="lines sampled in all (default: all lines)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: the config's, else 0)")
    parser.add_argument("--num-proc", type=int, default=1, help="processes for the preprocessing")
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parents[1]
    bpe_cfg, seed = {}, 0
    if args.set and not args.config:
        parser.error("--set needs --config")
    if args.config:
        from training.common import load_config

        # train.py's reading of the config (its `base` configs, defaults and --set), so that both learn the same
        # BPE from one config
        cfg = load_config(args.config, args.set)
        bpe_cfg, seed = cfg["tokenizer"], cfg["seed"]
        lines = training_text(cfg["data"], base_dir=repo)
    else:
        from training.data import read_text_lines

        lines = {}
        for item in args.input:
            lang, _, path = item.partition(":")
            if not path:
                parser.error(f"--input expects LANG:FILE, got {item!r}")
            lines.setdefault(lang, []).extend(x for x in read_text_lines(path) if x.strip())
    learn_bpe(lines, args.output_dir,
              merges=args.merges or bpe_cfg.get("bpe_merges", 50000),
              alpha=args.alpha if args.alpha is not None else bpe_cfg.get("bpe_alpha", 0.5),
              max_lines=args.max_lines or bpe_cfg.get("bpe_max_lines"),
              seed=seed if args.seed is None else args.seed, num_proc=args.num_proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
