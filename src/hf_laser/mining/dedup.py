"""Unique items of a corpus (LASER's `--unify`): positions of first occurrences and the map back."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .lines import iter_lines

@dataclass
class Dedup:
    """Mapping between a corpus and its unique items.

    Attributes:
        first: ``[U]`` int64, original position of the first occurrence of each unique item (increasing).
        inverse: ``[N]`` int64, unique id of every original position (``first[inverse[i]]`` is the first occurrence
            of item ``i``); may be None when only ``first`` was kept (:func:`deduplicate_file` on big files).
        n: ``N``, number of original items.
    """

    first: np.ndarray
    inverse: np.ndarray | None
    n: int

    @property
    def num_unique(self) -> int:
        return int(self.first.shape[0])

    def to_original(self, unique_ids: np.ndarray) -> np.ndarray:
        """Original positions (first occurrences) ``[m]`` of unique ids ``[m]``."""
        return self.first[np.asarray(unique_ids, dtype=np.int64)]


def _digest(s: str) -> bytes:
    return hashlib.blake2b(s.encode("utf-8", "surrogateescape"), digest_size=16).digest()


def deduplicate(items: Iterable[str]) -> Dedup:
    """Unique items in order of first occurrence, like LASER's ``TextLoadUnify`` (``--unify``).

    Items are compared exactly (after the caller's own normalisation); a 128-bit hash is kept per unique item
    instead of the text.
    """
    seen: dict[bytes, int] = {}
    first, inverse = [], []
    for pos, item in enumerate(items):
        h = _digest(item)
        uid = seen.get(h)
        if uid is None:
            uid = seen[h] = len(first)
            first.append(pos)
        inverse.append(uid)
    return Dedup(np.asarray(first, dtype=np.int64), np.asarray(inverse, dtype=np.int64), len(inverse))


def deduplicate_file(path: str | os.PathLike, unique_path: str | os.PathLike, keep_inverse: bool = False) -> Dedup:
    """Stream ``path`` and write its unique lines (first occurrences, in order) to ``unique_path``.

    Memory: 16-byte hash + ids per unique line; the text is never held. ``inverse`` is only kept on request.
    """
    seen: dict[bytes, int] = {}
    first, inverse = [], ([] if keep_inverse else None)
    n = 0
    tmp = Path(str(unique_path) + ".tmp")
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as out:
        for pos, line in enumerate(iter_lines(path)):
            h = _digest(line)
            uid = seen.get(h)
            if uid is None:
                uid = seen[h] = len(first)
                first.append(pos)
                out.write(line + "\n")
            if inverse is not None:
                inverse.append(uid)
            n = pos + 1
    os.replace(tmp, unique_path)
    inv = np.asarray(inverse, dtype=np.int64) if inverse is not None else None
    return Dedup(np.asarray(first, dtype=np.int64), inv, n)
