"""Contextual word retrieval (Cao, Kitaev & Klein 2020, "Multilingual Alignment of Contextual Word Representations")
for LASER models: are the BiLSTM states of a word and of its translation in a parallel sentence close?

Procedure:
1. Words are the LASER preprocessing's tokens (Moses tokenisation, lowercased: the `.tok` text the BPE step
   splits), so every word is a run of the model's BPE pieces.
2. Word pairs come from a statistical word aligner, eflomal (`pip install "hf-laser[align]"`), run in both
   directions; the intersection of the two is one-to-one. The aligner can be given more parallel text than the test
   sentences (`extra`), which makes its links better; only the links of the test sentences are used.
3. A word's vector is the mean (or the first) of its BPE pieces' `last_hidden_state` rows.
4. Retrieval by CSLS (k = 10): each source word occurrence retrieves among the target words of all test pairs;
   correct when it finds its own aligned occurrence. Both directions; *contextual* uses every occurrence,
   *non-contextual* only the first occurrence of each query word type. Pairs whose two words are the same string
   are left out (numbers, names, punctuation would be trivial), and so are word pairs seen in the alignment
   training data (`exclude`, as written by `training/align_words.py`).

    python -m evaluation.word_retrieval --model DIR [--model DIR2 ...] --lang de [--lang fr ...] --out results.json \\
        [--test-dir ../shared/data/parallel/valid/flores200-devtest] [--aligner-corpus ../shared/data/parallel/train]
        [--exclude-pairs RUN/aligned_word_pairs] [--pooling mean|first]

Every model is evaluated on the same word pairs (the alignment is computed once per language).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = [
    "DEFAULT_TEST_DIR",
    "WordPieces",
    "AlignedBitext",
    "laser_words",
    "word_pieces",
    "eflomal_links",
    "align_bitext",
    "word_vectors",
    "csls_retrieve",
    "retrieval_pairs",
    "evaluate_word_retrieval",
    "read_word_pairs",
    "write_word_pairs",
]

DEFAULT_TEST_DIR = "../shared/data/parallel/valid/flores200-devtest"
CSLS_K = 10


# ---------------------------------------------------------------------------------------------- words and pieces
def laser_words(tokenizer, lines: Sequence[str], lang: str) -> list[list[str]]:
    """The words of each line as the model sees them before BPE: the LASER preprocessing's `.tok` tokens."""
    return [line.split() for line in tokenizer.pipeline.process(list(lines), lang, stage="tok")]


@dataclass
class WordPieces:
    """Model input of sentences given as words: `ids[s]` (BPE ids + `</s>`) and `spans[s][w] = (start, end)`, the
    pieces of word `w` in `ids[s]`."""

    ids: list[list[int]]
    spans: list[list[tuple[int, int]]]


def word_pieces(tokenizer, words: Sequence[Sequence[str]]) -> WordPieces:
    """Splits every word into the model's subword pieces (per word, as fastBPE and SentencePiece split a `.tok` line)
    and maps them to ids (`<unk>` for unknown pieces), `</s>` appended."""
    vocab = tokenizer.get_vocab()
    unk, eos = vocab[tokenizer.unk_token], vocab[tokenizer.eos_token]
    cache: dict[str, list[int]] = {}
    ids, spans = [], []
    for sentence in words:
        sent_ids: list[int] = []
        sent_spans = []
        for w in sentence:
            piece_ids = cache.get(w)
            if piece_ids is None:
                pieces = tokenizer.pipeline.subword_tokens([w])[0]
                if not pieces:
                    raise ValueError(f"word {w!r} gives no subword piece")
                piece_ids = cache[w] = [vocab.get(p, unk) for p in pieces]
            sent_spans.append((len(sent_ids), len(sent_ids) + len(piece_ids)))
            sent_ids.extend(piece_ids)
        ids.append(sent_ids + [eos])
        spans.append(sent_spans)
    return WordPieces(ids, spans)


# ---------------------------------------------------------------------------------------------- alignment
def _require_eflomal():
    try:
        import eflomal
    except ImportError as err:
        raise ImportError('word alignment needs eflomal: pip install "hf-laser[align]" (or pip install eflomal)') \
            from err
    return eflomal


def _read_links(path: str) -> list[set[tuple[int, int]]]:
    with open(path, encoding="utf-8") as fh:
        return [{tuple(int(x) for x in link.split("-")) for link in line.split()} for line in fh.read().splitlines()]


def eflomal_links(src_words: Sequence[Sequence[str]], tgt_words: Sequence[Sequence[str]], *,
                  quiet: bool = True) -> list[list[tuple[int, int]]]:
    """One-to-one word links of every sentence pair: the intersection of eflomal's forward and reverse alignments
    (each `(i, j)`: source word i ↔ target word j). A pair with an empty side gets no link."""
    if len(src_words) != len(tgt_words):
        raise ValueError(f"{len(src_words)} source sentences but {len(tgt_words)} target sentences")
    eflomal = _require_eflomal()
    usable = [i for i, (s, t) in enumerate(zip(src_words, tgt_words)) if s and t]
    out: list[list[tuple[int, int]]] = [[] for _ in src_words]
    if not usable:
        return out
    with tempfile.TemporaryDirectory(prefix="hf-laser-eflomal-") as tmp:
        fwd, rev = os.path.join(tmp, "fwd"), os.path.join(tmp, "rev")
        eflomal.Aligner().align([" ".join(src_words[i]) for i in usable], [" ".join(tgt_words[i]) for i in usable],
                                links_filename_fwd=fwd, links_filename_rev=rev, quiet=quiet)
        links_fwd, links_rev = _read_links(fwd), _read_links(rev)
    if len(links_fwd) != len(usable) or len(links_rev) != len(usable):
        raise RuntimeError(f"eflomal returned {len(links_fwd)}/{len(links_rev)} alignment lines for {len(usable)} "
                           "sentence pairs")
    for i, f, r in zip(usable, links_fwd, links_rev):
        out[i] = sorted(f & r)
    return out


@dataclass
class AlignedBitext:
    """Parallel sentences as words, with one-to-one word links per sentence pair."""

    src_lang: str
    tgt_lang: str
    src_words: list[list[str]]
    tgt_words: list[list[str]]
    links: list[list[tuple[int, int]]]
    stats: dict = field(default_factory=dict)

    def word_pair_types(self) -> set[tuple[str, str]]:
        return {(s[i], t[j]) for s, t, links in zip(self.src_words, self.tgt_words, self.links) for i, j in links}


def align_bitext(tokenizer, src_lines: Sequence[str], tgt_lines: Sequence[str], src_lang: str, tgt_lang: str, *,
                 extra: tuple[Sequence[str], Sequence[str]] | None = None, log=print) -> AlignedBitext:
    """Tokenises a line-aligned bitext into LASER words and aligns it with eflomal; `extra = (src_lines, tgt_lines)`
    is more parallel text given to the aligner only (better word statistics), its links are dropped.

    Raises:
        ValueError: different line counts, no sentence pair with text on both sides, or no link at all.
    """
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"{src_lang}-{tgt_lang}: {len(src_lines)} source lines but {len(tgt_lines)} target lines; "
                         "a bitext must be line-aligned")
    extra_src, extra_tgt = extra if extra is not None else ([], [])
    if len(extra_src) != len(extra_tgt):
        raise ValueError(f"aligner text: {len(extra_src)} source lines but {len(extra_tgt)} target lines")
    src_words = laser_words(tokenizer, list(src_lines) + list(extra_src), src_lang)
    tgt_words = laser_words(tokenizer, list(tgt_lines) + list(extra_tgt), tgt_lang)
    n = len(src_lines)
    empty_side = sum(1 for s, t in zip(src_words[:n], tgt_words[:n]) if not s or not t)
    if empty_side == n:
        raise ValueError(f"{src_lang}-{tgt_lang}: none of the {n} sentence pairs has words on both sides")
    t0 = time.time()
    links = eflomal_links(src_words, tgt_words)[:n]
    no_link = sum(1 for s, t, x in zip(src_words[:n], tgt_words[:n], links) if s and t and not x)
    n_links = sum(len(x) for x in links)
    if n_links == 0:
        raise ValueError(f"{src_lang}-{tgt_lang}: the aligner found no one-to-one word link in {n} sentence pairs "
                         "(give it more parallel text with `extra` / --aligner-corpus)")
    stats = {"sentence_pairs": n, "aligner_sentence_pairs": len(src_words), "empty_side": empty_side,
             "without_link": no_link, "links": n_links, "aligner_seconds": round(time.time() - t0, 1)}
    if empty_side or no_link:
        log(f"word alignment {src_lang}-{tgt_lang}: {empty_side} sentence pair(s) with an empty side and {no_link} "
            f"without any one-to-one link (of {n}); they give no word pair")
    return AlignedBitext(src_lang, tgt_lang, src_words[:n], tgt_words[:n], links, stats)


def write_word_pairs(path: str | Path, pairs: Iterable[tuple[str, str]]) -> Path:
    """Word pair types, one `src<TAB>tgt` per line, sorted."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{s}\t{t}\n" for s, t in sorted(pairs)), encoding="utf-8")
    return path


def read_word_pairs(path: str | Path) -> set[tuple[str, str]]:
    out = set()
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2:
                raise ValueError(f"{path}:{n}: expected 'source word<TAB>target word', got {line!r}")
            out.add((parts[0], parts[1]))
    return out


# ---------------------------------------------------------------------------------------------- vectors
def word_vectors(model, pieces: WordPieces, *, pooling: str = "mean", max_tokens: int = 6000,
                 sentences: Sequence[int] | None = None, words: Sequence[Sequence[int]] | None = None,
                 device=None, show_progress: bool = False) -> list[torch.Tensor]:
    """`last_hidden_state` vectors of words: for every sentence `s` (all, or `sentences`), a `(n_words, dim)`
    tensor with the mean (`pooling="mean"`) or the first (`"first"`) of each word's pieces' states; `words[k]`
    limits sentence k to some word positions (in that order). Runs under the caller's grad mode, so training can
    backpropagate through it; batches hold at most `max_tokens` padded tokens."""
    from hf_laser.encoder import plan_batches

    if pooling not in ("mean", "first"):
        raise ValueError(f"pooling must be 'mean' or 'first', got {pooling!r}")
    sentences = list(range(len(pieces.ids))) if sentences is None else list(sentences)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    pad = getattr(model, "module", model).config.pad_token_id  # the model may be wrapped (DDP)
    lengths = [len(pieces.ids[s]) for s in sentences]
    out: list[torch.Tensor | None] = [None] * len(sentences)
    for batch in tqdm(list(plan_batches(lengths, max_tokens)), desc="word vectors", unit="batch",
                      disable=not show_progress, leave=False):
        width = max(lengths[b] for b in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        for r, b in enumerate(batch):  # right padding: piece k of a sentence is column k
            ids[r, :lengths[b]] = torch.tensor(pieces.ids[sentences[b]])
        mask = ids.ne(pad)
        hidden = model(ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        rows, cols, owner = [], [], []  # one entry per (piece, word) to pool
        bounds = []  # words of batch row r: vectors bounds[r][0]:bounds[r][1]
        n_words = 0
        for r, b in enumerate(batch):
            spans = pieces.spans[sentences[b]]
            start_word = n_words
            for w in (range(len(spans)) if words is None else words[b]):
                start, end = spans[w]
                end = start + 1 if pooling == "first" else end
                rows.extend([r] * (end - start))
                cols.extend(range(start, end))
                owner.extend([n_words] * (end - start))
                n_words += 1
            bounds.append((start_word, n_words))
        picked = hidden[torch.tensor(rows, device=device, dtype=torch.long),
                        torch.tensor(cols, device=device, dtype=torch.long)]
        owner_t = torch.tensor(owner, device=device, dtype=torch.long)
        sums = torch.zeros((n_words, hidden.shape[-1]), dtype=hidden.dtype, device=device)
        sums = sums.index_add(0, owner_t, picked)
        counts = torch.bincount(owner_t, minlength=n_words).clamp(min=1).to(hidden.dtype)
        vecs = sums / counts[:, None]
        for (a, z), b in zip(bounds, batch):
            out[b] = vecs[a:z]
    return out  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- retrieval
def csls_retrieve(queries: torch.Tensor, candidates: torch.Tensor, k: int = CSLS_K, chunk: int = 4096) -> torch.Tensor:
    """Index of the best candidate of every query by CSLS (Conneau et al. 2018):
    `2 cos(q, c) - r_C(q) - r_Q(c)`, `r_C(q)` the mean cosine of q's k nearest candidates, `r_Q(c)` that of c's k
    nearest queries."""
    if queries.shape[0] == 0 or candidates.shape[0] == 0:
        raise ValueError(f"CSLS needs queries and candidates, got {queries.shape[0]} and {candidates.shape[0]}")
    q = torch.nn.functional.normalize(queries.float(), dim=-1)
    c = torch.nn.functional.normalize(candidates.float(), dim=-1)
    kq, kc = min(k, c.shape[0]), min(k, q.shape[0])
    r_q = torch.cat([(q[i:i + chunk] @ c.T).topk(kq, dim=1).values.mean(1) for i in range(0, len(q), chunk)])
    r_c = torch.cat([(c[i:i + chunk] @ q.T).topk(kc, dim=1).values.mean(1) for i in range(0, len(c), chunk)])
    best = [(2 * (q[i:i + chunk] @ c.T) - r_q[i:i + chunk, None] - r_c[None, :]).argmax(1)
            for i in range(0, len(q), chunk)]
    return torch.cat(best)


def retrieval_pairs(bitext: AlignedBitext, exclude: set[tuple[str, str]] | None = None) -> tuple[list, dict]:
    """The test word pairs `(sentence, source word index, target word index)`: the links without exact string
    matches and without the pairs in `exclude` (pairs seen in alignment training data). Returns (pairs, counts)."""
    exclude = exclude or set()
    pairs, same, seen = [], 0, 0
    for s, (src, tgt, links) in enumerate(zip(bitext.src_words, bitext.tgt_words, bitext.links)):
        for i, j in links:
            if src[i] == tgt[j]:
                same += 1
            elif (src[i], tgt[j]) in exclude:
                seen += 1
            else:
                pairs.append((s, i, j))
    counts = {"links": same + seen + len(pairs), "exact_match": same, "seen_in_training": seen, "pairs": len(pairs)}
    if not pairs:
        raise ValueError(f"{bitext.src_lang}-{bitext.tgt_lang}: no word pair left to evaluate ({counts})")
    return pairs, counts


def _first_of_each_type(pairs: list, words: list[list[str]], side: int) -> list[int]:
    seen, keep = set(), []
    for k, pair in enumerate(pairs):
        w = words[pair[0]][pair[side]]
        if w not in seen:
            seen.add(w)
            keep.append(k)
    return keep


def evaluate_word_retrieval(model, tokenizer, bitext: AlignedBitext, *, exclude: set[tuple[str, str]] | None = None,
                            pooling: str = "mean", k: int = CSLS_K, device=None, max_tokens: int = 6000) -> dict:
    """Word retrieval accuracy (%) of `model` on the aligned bitext, both directions, contextual and non-contextual:
    `{"src2tgt": {"contextual", "non_contextual", "n_contextual", "n_non_contextual"}, "tgt2src": {...},
    "pairs": counts}` (src = `bitext.src_lang`)."""
    pairs, counts = retrieval_pairs(bitext, exclude)
    model = model.eval()
    with torch.inference_mode():
        vec = {}
        for side, words, idx in (("src", bitext.src_words, 1), ("tgt", bitext.tgt_words, 2)):
            pieces = word_pieces(tokenizer, words)
            sents = sorted({p[0] for p in pairs})
            by_sent: dict[int, list[int]] = {s: [] for s in sents}
            for p in pairs:
                by_sent[p[0]].append(p[idx])
            vecs = word_vectors(model, pieces, pooling=pooling, sentences=sents, words=[by_sent[s] for s in sents],
                                device=device, max_tokens=max_tokens)
            # pairs are in sentence order, and inside a sentence in link order: concatenation follows `pairs`
            vec[side] = torch.cat([v.float().cpu() for v in vecs])
    gold = torch.arange(len(pairs))
    out = {"pairs": counts, "pooling": pooling, "csls_k": k}
    for name, q, c, words, side in (("src2tgt", vec["src"], vec["tgt"], bitext.src_words, 1),
                                    ("tgt2src", vec["tgt"], vec["src"], bitext.tgt_words, 2)):
        found = csls_retrieve(q, c, k)
        first = torch.tensor(_first_of_each_type(pairs, words, side))
        found_nc = csls_retrieve(q[first], c[first], k)
        out[name] = {"contextual": round(100.0 * float((found == gold).float().mean()), 2),
                     "non_contextual": round(100.0 * float((found_nc == torch.arange(len(first))).float().mean()), 2),
                     "n_contextual": len(pairs), "n_non_contextual": len(first)}
    return out


# ---------------------------------------------------------------------------------------------- command line
def load_test_bitext(folder: str | Path, lang: str, tgt_lang: str = "en", max_sentences: int | None = None):
    """`(lang lines, tgt_lang lines)` from a multi-parallel folder of `{lang}.txt` files (rows empty on either side
    dropped)."""
    folder = Path(folder)
    paths = []
    for code in (lang, tgt_lang):
        found = [p for p in (folder / f"{code}.txt", folder / f"{code}.txt.gz") if p.is_file()]
        if not found:
            raise FileNotFoundError(f"no {code}.txt[.gz] in {folder}")
        paths.append(found[0])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from training.data import read_text_lines

    src, tgt = read_text_lines(paths[0]), read_text_lines(paths[1])
    if len(src) != len(tgt):
        raise ValueError(f"{paths[0]} has {len(src)} lines but {paths[1]} has {len(tgt)}; they must be aligned")
    keep = [i for i in range(len(src)) if src[i].strip() and tgt[i].strip()][:max_sentences]
    return [src[i] for i in keep], [tgt[i] for i in keep]


def aligner_text(corpora: Sequence[str], lang: str, tgt_lang: str = "en", max_pairs: int | None = None,
                 seed: int = 0):
    """`(lang lines, tgt_lang lines)` of every `lang`–`tgt_lang` pair in training-style corpora (folders of
    bitexts or multi-parallel files, as `training/data.py` reads them; a folder of such folders, like
    `../shared/data/parallel/train`, stands for its sub-folders). With `max_pairs`, a random sample of that many
    pairs (seeded; in corpus order), so that no single corpus fills it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from training.data import collect_pairs, resolve_corpora

    specs = []
    for corpus in corpora:
        path = Path(corpus)
        subdirs = sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []
        if subdirs and not any(p.is_file() for p in path.iterdir()):
            specs += [str(p) for p in subdirs]
        else:
            specs.append(str(path))
    all_corpora = resolve_corpora(specs)
    # only the corpora that hold both languages (a folder of bitexts expands into one corpus per bitext)
    usable = [c for c in all_corpora if c.kind != "bitext" or set(c.files) == {lang, tgt_lang}]
    usable = [c for c in usable if c.kind != "multiparallel" or {lang, tgt_lang} <= set(c.files)]
    if not usable:
        return [], []
    raw = collect_pairs(usable, [lang], [tgt_lang])
    rows = np.arange(len(raw.src))
    if max_pairs is not None and max_pairs < len(rows):
        rows = np.sort(np.random.default_rng(seed).choice(len(rows), max_pairs, replace=False))
    return [raw.texts[raw.src[i]] for i in rows], [raw.texts[raw.tgt[i]] for i in rows]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evaluation.word_retrieval", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=None,
                   help="LASER model directory (repeat to compare models on the same pairs; default: laser-mini)")
    p.add_argument("--lang", action="append", required=True, help="language paired with --tgt-lang (repeatable)")
    p.add_argument("--tgt-lang", default="en")
    p.add_argument("--test-dir", default=DEFAULT_TEST_DIR, help="multi-parallel folder with the test sentences")
    p.add_argument("--max-sentences", type=int, default=None, help="only the first N test sentence pairs")
    p.add_argument("--aligner-corpus", action="append", default=[],
                   help="more parallel text for the aligner only (folder of bitexts / multi-parallel files)")
    p.add_argument("--aligner-max-pairs", type=int, default=None, help="a random sample of at most N of them")
    p.add_argument("--seed", type=int, default=0, help="of that sample")
    p.add_argument("--exclude-pairs", default=None,
                   help="folder of {lang}-{tgt}.tsv word pairs seen in alignment training (align_words.py's "
                        "OUT/aligned_word_pairs), or one .tsv file; those pairs are not evaluated")
    p.add_argument("--pooling", choices=["mean", "first"], default="mean")
    p.add_argument("--device", default=None)
    p.add_argument("--out", required=True, help="results JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from hf_laser.models import resolve_model

    models = args.model or [resolve_model(None, who="evaluation.word_retrieval")]
    try:
        from hf_laser import LaserModel, LaserTokenizer

        tokenizer = LaserTokenizer.from_pretrained(models[0])
        loaded = {m: LaserModel.from_pretrained(m).to(args.device or "cpu") for m in models}
        for m in models[1:]:
            if LaserTokenizer.from_pretrained(m).get_vocab() != tokenizer.get_vocab():
                raise ValueError(f"{m} has another vocabulary than {models[0]}: word pairs would not be comparable")
        results: dict = {"models": models, "tgt_lang": args.tgt_lang, "test_dir": args.test_dir, "languages": {}}
        for lang in args.lang:
            src, tgt = load_test_bitext(args.test_dir, lang, args.tgt_lang, args.max_sentences)
            extra = aligner_text(args.aligner_corpus, lang, args.tgt_lang, args.aligner_max_pairs, seed=args.seed) \
                if args.aligner_corpus else None
            bitext = align_bitext(tokenizer, src, tgt, lang, args.tgt_lang, extra=extra)
            exclude = None
            if args.exclude_pairs:
                path = Path(args.exclude_pairs)
                path = path / f"{lang}-{args.tgt_lang}.tsv" if path.is_dir() else path
                exclude = read_word_pairs(path)
            row = {"alignment": bitext.stats, "models": {}}
            for m, model in loaded.items():
                row["models"][m] = evaluate_word_retrieval(model, tokenizer, bitext, exclude=exclude,
                                                           pooling=args.pooling, device=args.device)
                r = row["models"][m]
                print(f"{lang}-{args.tgt_lang} {Path(m).name}: {lang}→{args.tgt_lang} contextual "
                      f"{r['src2tgt']['contextual']:.2f}% non-contextual {r['src2tgt']['non_contextual']:.2f}%, "
                      f"{args.tgt_lang}→{lang} {r['tgt2src']['contextual']:.2f}% / "
                      f"{r['tgt2src']['non_contextual']:.2f}%"
                      f" ({r['pairs']['pairs']} pairs)", flush=True)
            results["languages"][lang] = row
    except (FileNotFoundError, ValueError, ImportError) as err:
        print(f"evaluation.word_retrieval: error: {err}", file=sys.stderr)
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
