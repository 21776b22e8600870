"""Text files numbered exactly as `LaserEncoder.encode_file` reads them (only `'\\n'` ends a line)."""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from ..encoder import count_lines, read_lines  # noqa: F401 (count_lines is part of hf_laser.mining)

# Lines are numbered exactly as `LaserEncoder.encode_file` reads them: only '\n' ends a line.
iter_lines = read_lines


def read_lines_at(path: str | os.PathLike, line_numbers: Iterable[int]) -> dict[int, str]:
    """Read only the requested lines (0-based) of a text file in one streaming pass: ``{line_number: text}``."""
    wanted = np.unique(np.fromiter((int(i) for i in line_numbers), dtype=np.int64))
    out: dict[int, str] = {}
    if wanted.size == 0:
        return out
    targets = wanted.tolist()
    t = 0
    for pos, line in enumerate(iter_lines(path)):
        if pos == targets[t]:
            out[pos] = line
            t += 1
            if t == len(targets):
                break
    if len(out) != len(targets):
        missing = [i for i in targets if i not in out][:5]
        raise ValueError(f"{path}: line(s) {missing} requested but the file has fewer lines")
    return out
