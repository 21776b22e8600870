"""Text files numbered exactly as `LaserEncoder.encode_file` reads them (only `'\\n'` ends a line)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Sequence

import numpy as np

from ..encoder import count_lines, read_lines  # noqa: F401 (count_lines is part of hf_laser.mining)

# Lines are numbered exactly as `LaserEncoder.encode_file` reads them: only '\n' ends a line.
iter_lines = read_lines


def line_byte_offsets(path: str | os.PathLike, lines: Sequence[int], chunk_bytes: int = 1 << 24) -> list[int]:
    """Where each of `lines` (0-based line numbers, increasing) starts in the file, in bytes, in one pass at the
    speed of counting newlines; a line number equal to the file's number of lines gives the file's size."""
    wanted = [int(i) for i in lines]
    if wanted != sorted(wanted) or (wanted and wanted[0] < 0):
        raise ValueError("line numbers must be increasing and >= 0")
    out, line, base, w = [], 0, 0, 0  # `line`: the number of the line that starts at byte `base` (or later)
    while w < len(wanted) and wanted[w] == 0:
        out.append(0)
        w += 1
    with open(path, "rb") as f:
        while w < len(wanted) and (chunk := f.read(chunk_bytes)):
            ends = chunk.count(b"\n")
            if w < len(wanted) and wanted[w] <= line + ends:
                newlines = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
                while w < len(wanted) and wanted[w] <= line + ends:
                    # the start of line L is one byte after the (L - line)-th newline of this chunk
                    out.append(base + int(newlines[wanted[w] - line - 1]) + 1)
                    w += 1
            line, base = line + ends, base + len(chunk)
    size = os.path.getsize(path)
    total = line + (1 if size and base == size and not _ends_with_newline(path, size) else 0)
    for extra in wanted[w:]:
        if extra != total:
            raise ValueError(f"{path}: line {extra} requested but the file has {total} lines")
        out.append(size)
    return out


def _ends_with_newline(path, size: int) -> bool:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1) == b"\n"


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


class LineReader:
    """Any line of a text file, numbered as [`read_lines_at`] numbers them, read where it is: one pass finds where
    every line starts (8 bytes per line, in memory or in `offsets_file`), then each line is sliced out of a memory
    map of the file. For writing millions of mined pairs in score order without holding their texts.

    Args:
        path: the text file.
        offsets_file: where the line starts go (raw int64, overwritten); None: in memory.
    """

    def __init__(self, path: str | os.PathLike, offsets_file: str | os.PathLike | None = None,
                 chunk_bytes: int = 1 << 24):
        self.path = str(path)
        self._file = open(path, "rb")
        try:
            self.starts = self._line_starts(offsets_file, chunk_bytes)
            size = os.fstat(self._file.fileno()).st_size
            self._data = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except BaseException:
            self._file.close()
            raise

    def _line_starts(self, offsets_file, chunk_bytes: int) -> np.ndarray:
        """Where every line starts, then the file's size: in memory, or written part by part to `offsets_file`
        (then memory-mapped: memory holds one chunk's worth)."""
        size = os.fstat(self._file.fileno()).st_size
        parts: list[np.ndarray] = []
        out = open(offsets_file, "wb") if offsets_file is not None else None
        try:
            def keep(part: np.ndarray) -> None:
                if out is not None:
                    out.write(part.tobytes())
                else:
                    parts.append(part)

            keep(np.zeros(1, dtype=np.int64))
            base, last = 0, b""
            while chunk := self._file.read(chunk_bytes):
                keep(np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10).astype(np.int64) + base + 1)
                base, last = base + len(chunk), chunk[-1:]
            if base != size:
                raise ValueError(f"{self.path} changed while it was read")
            if size and last != b"\n":
                keep(np.array([size], dtype=np.int64))  # a last line without a newline is a line
        finally:
            if out is not None:
                out.close()
        return np.concatenate(parts) if offsets_file is None else np.memmap(offsets_file, dtype=np.int64, mode="r")

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, line: int) -> str:
        if not 0 <= line < len(self):
            raise IndexError(f"{self.path}: line {line} requested but the file has {len(self)} lines")
        raw = self._data[int(self.starts[line]):int(self.starts[line + 1])]
        return raw[:-1].decode("utf-8", "surrogateescape") if raw.endswith(b"\n") else \
            raw.decode("utf-8", "surrogateescape")

    def lines_at(self, lines: Sequence[int]) -> list[str]:
        """The texts of `lines` (0-based), in the order given; a line past the end is a ValueError (the file is not
        the one the line numbers came from)."""
        lines = np.asarray(lines, dtype=np.int64)
        bad = lines[(lines < 0) | (lines >= len(self))]
        if bad.size:
            raise ValueError(f"{self.path}: line(s) {bad[:5].tolist()} requested but the file has {len(self)} lines "
                             "(did it change since it was embedded?)")
        return [self[i] for i in lines.tolist()]

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            self._data.close()
        self.starts = None  # (a memory map of the offsets file closes with its last reference)
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
