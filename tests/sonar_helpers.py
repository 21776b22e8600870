"""The lines of the SONAR fixtures (tests/fixtures/sonar/lines.json.gz). FLORES-200 devtest is not copied into the
repository: the record names each line's source (`sources`: a FLORES file and line, a run of FLORES lines joined
with spaces, or the text itself for the synthetic edge cases) with the sha256 of the text, and the lines are read
from ../shared/data/parallel/valid/flores200-devtest when a test needs them (skipped, saying so, when absent)."""

from __future__ import annotations

import gzip
import hashlib
import json
from functools import lru_cache
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "sonar"
FLORES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "parallel" / "valid" / "flores200-devtest"


@lru_cache(maxsize=1)
def sonar_record() -> dict:
    with gzip.open(FIXTURES / "lines.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def _flores(code: str) -> list[str]:
    path = FLORES / f"{code}.txt"
    if not path.is_file():
        pytest.skip(f"needs ../shared (FLORES-200 devtest: {path}); the SONAR fixtures hold no FLORES text")
    lines = path.read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def source_text(source) -> str:
    """The text a `sources` entry names: `"text"`, `["flores", code, line]` or `["flores-join", code, start, end]`."""
    if isinstance(source, str):
        return source
    if source[0] == "flores":
        return _flores(source[1])[source[2]]
    if source[0] == "flores-join":
        return " ".join(_flores(source[1])[source[2]:source[3]])
    raise ValueError(f"unknown line source {source!r}")


@lru_cache(maxsize=1)
def _lines() -> tuple[str, ...]:
    record = sonar_record()
    lines = tuple(source_text(source) for source in record["sources"])
    bad = [i for i, (line, digest) in enumerate(zip(lines, record["sha256"]))
           if hashlib.sha256(line.encode("utf-8")).hexdigest() != digest]
    assert not bad, f"../shared's FLORES-200 text differs from the fixtures' at rows {bad[:10]}"
    return lines


def sonar_lines() -> list[str]:
    """Every fixture line (1,044), in the record's order; skips the test when ../shared is absent."""
    return list(_lines())
