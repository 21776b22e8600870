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


@lru_cache(maxsize=1)
def decoder_record() -> dict:
    """tests/fixtures/sonar/decoder.json.gz (make_decoder_fixtures.py: the original's generations)."""
    with gzip.open(FIXTURES / "decoder.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def decoder_state(which: str) -> dict:
    """The random `which` ("small", "full") decoder as make_decoder_fixtures.py built it: fairseq2's names,
    `final_proj.weight` the embedding table itself (tied), the `</s>` row scaled."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sonar_make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    record = decoder_record()
    shapes = [s for s in record[which]["shapes"] if s[0] != "final_proj.weight"]
    state = module.random_sonar_state(shapes, record[which]["seed"])
    state["decoder_frontend.embed.weight"][3] *= record["eos_row_scale"]
    state["final_proj.weight"] = state["decoder_frontend.embed.weight"]
    return state


def write_small_decoder_checkpoint(path: Path) -> Path:
    """The small random decoder as SONAR's `sonar_text_decoder.pt` (`{"model": state dict}`)."""
    import torch

    torch.save({"model": decoder_state("small")}, path)
    return path
