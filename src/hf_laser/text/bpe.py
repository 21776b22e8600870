"""Bit-exact port of fastBPE ``applybpe`` (glample/fastBPE, the ``fast`` binary LASER1 uses).

Semantics reproduced (``fastBPE.hpp``: ``readCodes``, ``readVocab``, ``tokenize_str``,
``process_bpe``, ``limitVocab``, ``decompose``, ``output_or_count``):

* **Words.** In file mode only the bytes ``' '`` and ``'\\n'`` separate words; every separator is
  copied to the output, so repeated / leading / trailing spaces and empty lines survive.  Tabs,
  CR, U+00A0 ... are ordinary word characters.
* **Symbols.** A word is split into UTF-8 characters (a new symbol starts at every byte that is
  not a continuation byte ``10xxxxxx``; the C loop stops at a NUL byte, whose tail then stays in
  the last symbol).  ``</w>`` is appended to the last symbol.
* **Merges.** Repeatedly take the adjacent pair with the lowest rank (= line number in the codes
  file) and merge *every* non-overlapping occurrence of it, left to right.
* **Vocabulary restriction** (when a vocab file is given and non-empty).  A non-final subword
  ``s`` is kept if ``s@@`` is in the vocabulary, the final one if ``s`` without ``</w>`` is;
  otherwise it is split back along the merge that created it (``reversed_codes``), recursively,
  each half checked the same way (the right half keeps the "final" flag).
* **Output.** Subwords joined with ``"@@ "``, ``</w>`` removed from the last one.

Python strings are used throughout.  For valid UTF-8 "bytes that are not continuation bytes"
are exactly code points; text read with ``errors="surrogateescape"`` keeps invalid bytes as
lone surrogates U+DC80..U+DCFF and :func:`split_symbols` groups them the way the C byte loop
does, so such input round-trips byte for byte as well.

Not reproduced on purpose: the binary's file mode silently drops the last word of a file that
does not end with a separator (``output_or_count`` never flushes it); :meth:`FastBPE.apply`
works on lines, each treated as ``'\\n'``-terminated (which is what every ``.tok`` file is).
:meth:`FastBPE.apply_file` does reproduce it, since it is meant to stand in for the binary.

Rust (HF ``tokenizers``) vs this Python implementation
------------------------------------------------------
``tokenizers.models.BPE`` built from the codes (merges in rank order, ``end_of_word_suffix="</w>"``)
reproduces the rank-ordered merges, but it has no equivalent of fastBPE's vocabulary-restricted
split-back and it cannot represent characters missing from its vocabulary, so on its own it is
*not* identical: on the 177 754 tokenised lines of the 224 full Tatoeba files its output differs
on 2 306 lines (2 296 with a character it does not know, the rest from the split-back).  Made
identical with a per-word Python post-pass (split-back + fallback), it matched this port on
177 754 / 177 754 lines, but it is slower.  Measured with ``python benchmarks/tokenize_throughput.py`` (2 shared vCPUs):

=========================================  ======================  ======================
BPE of the ``.tok`` lines                   224 full Tatoeba files  224 reference ``.tok``
                                            (177 754 lines)         (22 400 lines)
=========================================  ======================  ======================
this port, fresh cache                      1.35 s                  0.26 s
this port, warm cache                       0.27 s                  0.03 s
Rust BPE alone (not identical)              2.00 s                  0.14 s
Rust BPE + post-pass (identical)            3.29 s                  0.41 s
=========================================  ======================  ======================

So the cached Python port is used: it is identical to the binary on every reference file and
faster than the identical Rust variant; each distinct word is BPE'd once per process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator

__all__ = ["FastBPE", "split_symbols", "read_codes", "read_vocab"]

END_WORD = "</w>"
# The word cache is bounded in size, not only in entries: words longer than this are not kept, and the cache is
# cleared when its keys and values hold more characters than CACHE_CHARS (a server's memory must not keep what one
# request sent: 16 MB words kept 20 MB each)
CACHE_MAX_WORD_CHARS = 256
CACHE_CHARS = 32 << 20
TOKEN_DELIM = "@@"

# NUL (ends the C loop) and surrogateescape'd bytes need the slow path of split_symbols
_SPECIAL_CHARS = re.compile("[\x00\udc80-\udcff]")


def read_codes(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Read a fastBPE codes file (``left right count`` per line); returns the pairs in rank order.

    Fields are split on ``' '`` with empty fields skipped, like fastBPE's ``split``.
    """
    return [(left, right) for left, right, _ in read_fields(path, 3, "left right count")]


def read_vocab(path: str | os.PathLike) -> dict[str, int]:
    """Read a fastBPE vocabulary file (``token count`` per line) into ``{token: count}``."""
    return {token: int(count) for token, count in read_fields(path, 2, "token count")}


def read_fields(path: str | os.PathLike, n_fields: int, what: str) -> Iterator[list[str]]:
    """The non-empty lines of a fastBPE text file split on ``' '`` (empty fields skipped, like fastBPE's ``split``),
    each checked to have ``n_fields`` fields."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
        text = fh.read()  # one read and split: a third of the time of reading line by line (start-up of a command)
    for lineno, line in enumerate(text.split("\n"), 1):
        fields = line.split(" ")
        if len(fields) != n_fields or "" in fields:  # rare: repeated, leading or trailing spaces, or a bad line
            fields = [f for f in fields if f]
            if not fields:
                continue
            if len(fields) != n_fields:
                raise ValueError(f"{path}:{lineno}: expected '{what}', got {line!r}")
        yield fields


def split_symbols(word: str) -> list[str]:
    """Split a word into fastBPE's initial symbols (UTF-8 characters), before ``</w>``."""
    if _SPECIAL_CHARS.search(word) is None:
        return list(word)
    tail = ""
    nul = word.find("\x00")
    if nul >= 0:
        # `while (word[pos])` stops at the NUL: everything from the start of the current
        # symbol to the end of the word becomes the last symbol.
        word, tail = word[:nul], word[nul:]
    groups: list[str] = []
    for ch in word:
        # surrogateescape'd continuation bytes 0x80..0xBF continue the current symbol
        if groups and "\udc80" <= ch <= "\udcbf":
            groups[-1] += ch
        else:
            groups.append(ch)
    if tail:
        if groups:
            groups[-1] += tail
        else:
            groups.append(tail)
    return groups


class FastBPE:
    """fastBPE ``applybpe`` with codes and (optionally) a vocabulary; see the module docstring.

    >>> bpe = FastBPE("laser.fcodes", "laser.fvocab")      # doctest: +SKIP
    >>> bpe.apply("au commencement , dieu")                # doctest: +SKIP
    'au commen@@ c@@ ement , di@@ eu'
    """

    def __init__(
        self,
        codes: str | os.PathLike | Iterable[tuple[str, str]],
        vocab: str | os.PathLike | dict[str, int] | None = None,
        *,
        cache_size: int | None = 500_000,
    ):
        pairs = read_codes(codes) if isinstance(codes, (str, os.PathLike)) else list(codes)
        self.codes: dict[tuple[str, str], int] = {}
        self.reversed_codes: dict[str, tuple[str, str]] = {}
        for rank, pair in enumerate(pairs):
            pair = (pair[0], pair[1])
            if pair in self.codes:
                raise ValueError(f"duplicate BPE code {pair!r}")  # fastBPE asserts
            self.codes[pair] = rank
            self.reversed_codes[pair[0] + pair[1]] = pair
        if vocab is None:
            self.vocab: dict[str, int] = {}
        elif isinstance(vocab, (str, os.PathLike)):
            self.vocab = read_vocab(vocab)
        else:
            self.vocab = dict(vocab)
        self.cache_size = cache_size
        self._cache: dict[str, str] = {}
        self._cache_chars = 0  # characters held by the cache (keys + values): bounded by CACHE_CHARS

    # ------------------------------------------------------------------ core
    def _merge(self, word: str) -> list[str]:
        syms = split_symbols(word)
        syms[-1] += END_WORD
        codes = self.codes
        get = codes.get
        while len(syms) > 1:
            best = None
            best_rank = None
            prev = syms[0]
            for cur in syms[1:]:
                rank = get((prev, cur))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best_rank = rank
                    best = (prev, cur)
                prev = cur
            if best is None:
                break
            a, b = best
            merged = a + b
            out = []
            i = 0
            n = len(syms)
            while i < n:
                if i + 1 < n and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        return syms

    def _decompose(self, s: str, out: list[str], is_final: bool) -> None:
        pair = self.reversed_codes.get(s)
        if pair is None:
            out.append(s)  # a single character (fastBPE asserts this)
            return
        vocab = self.vocab
        left, right = pair
        if left + TOKEN_DELIM in vocab:
            out.append(left)
        else:
            self._decompose(left, out, False)
        query = right[: len(right) - len(END_WORD)] if is_final else right + TOKEN_DELIM
        if query in vocab:
            out.append(right)
        else:
            self._decompose(right, out, is_final)

    def _limit_vocab(self, subwords: list[str]) -> list[str]:
        vocab = self.vocab
        out: list[str] = []
        last = len(subwords) - 1
        for i, sw in enumerate(subwords):
            is_final = i == last
            query = sw[: len(sw) - len(END_WORD)] if is_final else sw + TOKEN_DELIM
            if query in vocab:
                out.append(sw)
            else:
                self._decompose(sw, out, is_final)
        return out

    def bpe_word(self, word: str) -> str:
        """BPE of one non-empty word (no separators inside), uncached: ``"a@@ b@@ c"``."""
        subwords = self._merge(word)
        if self.vocab:
            subwords = self._limit_vocab(subwords)
        return (TOKEN_DELIM + " ").join(subwords)[: -len(END_WORD)]

    def apply_word(self, word: str) -> str:
        """Cached :meth:`bpe_word`."""
        try:
            return self._cache[word]
        except KeyError:
            pass
        res = self.bpe_word(word)
        if len(word) > CACHE_MAX_WORD_CHARS:  # a long word is rare and costs more to keep than to redo
            return res
        if self.cache_size is not None and (len(self._cache) >= self.cache_size or self._cache_chars > CACHE_CHARS):
            self._cache.clear()
            self._cache_chars = 0
        self._cache[word] = res
        self._cache_chars += len(word) + len(res)
        return res

    # ------------------------------------------------------------------ lines
    def apply(self, line: str) -> str:
        """BPE one ``.tok`` line with file-mode semantics (``' '``/``'\\n'`` separators copied)."""
        if "\n" in line:
            return "\n".join(self.apply(part) for part in line.split("\n"))
        cache = self._cache
        out = []
        for w in line.split(" "):
            if w:
                r = cache.get(w)
                if r is None:
                    r = self.apply_word(w)
                out.append(r)
            else:
                out.append(w)
        return " ".join(out)

    def apply_lines(self, lines: Iterable[str]) -> list[str]:
        """:meth:`apply` on every line (lines without their ``'\\n'``)."""
        apply = self.apply
        return [apply(line) for line in lines]

    def apply_words(self, words: Iterable[str]) -> list[str]:
        """BPE of already separated, non-empty words (fast path); one ``"a@@ b"`` string per word."""
        cache = self._cache
        aw = self.apply_word
        out = []
        for w in words:
            r = cache.get(w)
            out.append(r if r is not None else aw(w))
        return out

    def apply_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike) -> None:
        """Stand-in for ``fast applybpe OUT IN codes [vocab]``, byte-identical output.

        Includes the binary's quirk that a last word not followed by ``' '``/``'\\n'`` is dropped.
        """
        with open(input_path, encoding="utf-8", errors="surrogateescape", newline="") as fh:
            text = fh.read()
        # everything after the last separator is dropped by the binary
        cut = max(text.rfind(" "), text.rfind("\n")) + 1
        text = text[:cut]
        with open(output_path, "w", encoding="utf-8", errors="surrogateescape", newline="") as fh:
            fh.write(self.apply(text))

    def __repr__(self) -> str:
        return f"FastBPE(codes={len(self.codes)}, vocab={len(self.vocab)})"
