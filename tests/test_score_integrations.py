"""hf_laser's corpus filter inside OpusFilter and OpusCleaner (#70): `opusfilter` itself runs a YAML configuration
that loads `hf_laser.integrations.opusfilter.LaserScoreFilter` through its `module:` key, and OpusCleaner's
pipeline runner (`opuscleaner-clean`) runs the filter definition `hf-laser score --opuscleaner-filter` prints, on a
real parallel sample from ../shared; both agree with `hf-laser score`.

OpusFilter is in the `dev` extra. OpusCleaner 0.7.1 cannot share hf-laser's environment (it pins fastapi 0.78,
starlette 0.19, uvicorn 0.20 and pydantic 1, which the `serve` extra and mteb exclude): install it in an environment
of its own and give its runner as `HF_LASER_OPUSCLEANER_CLEAN=/path/to/bin/opuscleaner-clean` (or have it on
PATH); the test is skipped, saying so, otherwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED, require_shared

pytest.importorskip("faiss")

FLORES = SHARED / "data" / "parallel" / "valid" / "flores200-devtest"
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def environment():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])  # hf-laser and opusfilter of this environment
    return env


def sample(directory: Path, n=100):
    """FLORES de-en, every fourth target replaced by another sentence's, a German sentence left untranslated."""
    require_shared(FLORES / "de.txt", FLORES / "en.txt")
    de = (FLORES / "de.txt").read_text(encoding="utf-8").split("\n")[:n]
    en = (FLORES / "en.txt").read_text(encoding="utf-8").split("\n")[: 2 * n]
    tgt = [en[i] if i % 4 else en[n + i] for i in range(n)]
    tgt[7] = de[7]
    (directory / "c.de").write_text("".join(s + "\n" for s in de), encoding="utf-8")
    (directory / "c.en").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
    (directory / "c.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(de, tgt)), encoding="utf-8")


def hf_laser_score(directory: Path, *args) -> tuple[list[str], list[str]]:
    """`hf-laser score` of the sample: (scores as written, kept pairs)."""
    r = subprocess.run([sys.executable, "-m", "hf_laser.cli", "score", "c.de", "c.en", "--src-lang", "de",
                        "--tgt-lang", "en", "-o", "cli.scores", "--keep", "cli.kept.tsv", "--no-progress", *args],
                       cwd=directory, env=environment(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return ((directory / "cli.scores").read_text().splitlines(),
            (directory / "cli.kept.tsv").read_text(encoding="utf-8").splitlines())


OPUSFILTER_CONFIG = """\
common:
  output_directory: out
steps:
  - type: score
    parameters:
      inputs: [c.de, c.en]
      output: scores.jsonl
      filters:
        - LaserScoreFilter: {parameters}
          module: hf_laser.integrations.opusfilter
  - type: filter
    parameters:
      inputs: [c.de, c.en]
      outputs: [kept.de, kept.en]
      filters:
        - LaserScoreFilter: {parameters}
          module: hf_laser.integrations.opusfilter
"""


@pytest.mark.parametrize("parameters, cli_args", [
    ({"languages": ["de", "en"]}, []),
    ({"languages": ["de", "en"], "model": "laser-mini-set", "method": "cosine", "threshold": 0.5},
     ["--model", "laser-mini-set", "--method", "cosine", "--threshold", "0.5"]),
], ids=["margin-laser-mini", "cosine-laser-mini-set"])
def test_opusfilter_runs_the_filter_and_agrees_with_hf_laser_score(tmp_path, parameters, cli_args):
    pytest.importorskip("opusfilter", reason="OpusFilter is not installed (pip install opusfilter; in the dev extra)")
    sample(tmp_path)
    (tmp_path / "out").mkdir()
    for name in ("c.de", "c.en"):  # opusfilter reads inputs in its output directory
        shutil.copy(tmp_path / name, tmp_path / "out" / name)
    (tmp_path / "cfg.yaml").write_text(OPUSFILTER_CONFIG.format(parameters=json.dumps(parameters)))
    r = subprocess.run([str(BIN / "opusfilter"), "cfg.yaml"], cwd=tmp_path, env=environment(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    scores = [json.loads(line)["LaserScoreFilter"] for line in (tmp_path / "out" / "scores.jsonl").open()]
    kept = [f"{s}\t{t}" for s, t in zip((tmp_path / "out" / "kept.de").read_text(encoding="utf-8").splitlines(),
                                        (tmp_path / "out" / "kept.en").read_text(encoding="utf-8").splitlines())]
    cli_scores, cli_kept = hf_laser_score(tmp_path, *cli_args)
    assert [f"{s:.6f}" for s in scores] == cli_scores
    assert kept == cli_kept
    assert 50 < len(kept) < 100  # the misaligned quarter goes (most of it)


def test_opusfilter_configuration_errors():
    opusfilter = pytest.importorskip("opusfilter", reason="OpusFilter is not installed")
    from hf_laser.integrations import opusfilter as integration

    cls = integration.LaserScoreFilter
    assert issubclass(cls, opusfilter.FilterABC) and cls.score_direction == opusfilter.CLEAN_HIGH
    with pytest.raises(opusfilter.ConfigurationError, match="languages"):
        cls(languages=["de"])
    with pytest.raises(opusfilter.ConfigurationError, match="needs a threshold"):
        cls(languages=["de", "en"], method="cosine")
    with pytest.raises(opusfilter.ConfigurationError, match="unknown margin"):
        cls(languages=["de", "en"], margin="absolute")


def test_opusfilter_chunk_smaller_than_k_and_empty(caplog):
    pytest.importorskip("opusfilter", reason="OpusFilter is not installed")
    from hf_laser.integrations.opusfilter import LaserScoreFilter

    filt = LaserScoreFilter(languages=["de", "en"])
    de = (REPO / "examples" / "de.txt").read_text(encoding="utf-8").splitlines()
    en = (REPO / "examples" / "en.txt").read_text(encoding="utf-8").splitlines()
    with caplog.at_level("WARNING"):
        scores = list(filt.score(list(zip(de[:3], en[:3]))))
    assert len(scores) == 3 and all(np.isfinite(scores)) and "margin over k=3 neighbours instead of 4" in caplog.text
    assert list(filt.score([])) == [] and list(filt.filter(iter([]))) == []
    # filter() scores the whole input at once: it keeps exactly the pairs score() accepts over the same input
    scores = list(filt.score(list(zip(de, en))))
    assert list(filt.filter(zip(de, en))) == [p for p, s in zip(zip(de, en), scores) if filt.accept(s)]
    assert list(filt.filterfalse(zip(de, en))) == [p for p, s in zip(zip(de, en), scores) if not filt.accept(s)]


def opuscleaner_clean() -> str:
    runner = os.environ.get("HF_LASER_OPUSCLEANER_CLEAN") or shutil.which("opuscleaner-clean")
    if not runner:
        pytest.skip("OpusCleaner's runner is not available: install opuscleaner in an environment of its own (it "
                    "cannot share hf-laser's) and set HF_LASER_OPUSCLEANER_CLEAN to its bin/opuscleaner-clean")
    return runner


def test_opuscleaner_runs_the_filter_definition_and_agrees_with_hf_laser_score(tmp_path):
    runner = opuscleaner_clean()
    sample(tmp_path)
    filters = tmp_path / "filters"
    filters.mkdir()
    r = subprocess.run([sys.executable, "-m", "hf_laser.cli", "score", "--opuscleaner-filter"], env=environment(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (filters / "hf_laser_score.json").write_text(r.stdout)
    pipeline = {"version": 1, "files": ["c.de.gz", "c.en.gz"], "filters": [
        {"filter": "hf_laser_score", "language": None,
         "parameters": {"SRCLANG": "de", "TGTLANG": "en", "THRESHOLD": 1.06, "METHOD": "margin", "MARGIN": "ratio",
                        "MODEL": "", "CHECK_LANG": True}}]}
    (tmp_path / "p.filters.json").write_text(json.dumps(pipeline))
    r = subprocess.run([runner, "--filters", str(filters / "*.json"), "-i", "c.tsv", "p.filters.json", "de", "en"],
                       cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Could not parse" not in r.stderr  # OpusCleaner read the definition
    _, cli_kept = hf_laser_score(tmp_path, "--check-lang")
    assert r.stdout.splitlines() == cli_kept
    assert 50 < len(cli_kept) < 100
    untranslated = (tmp_path / "c.tsv").read_text(encoding="utf-8").splitlines()[7]
    assert untranslated not in cli_kept  # German on the English side: removed by the language check


def test_filter_definition_is_opuscleaners_format():
    from hf_laser.integrations.opuscleaner import opuscleaner_filter

    definition = opuscleaner_filter()
    assert definition["type"] == "bilingual" and definition["command"].startswith("hf-laser score --tsv - --keep -")
    for name, parameter in definition["parameters"].items():
        assert name.isidentifier() and name.upper() == name
        assert parameter["type"] in {"str", "float", "bool"}
        assert f"${name}" in definition["command"] or f"${{{name}:" in definition["command"]
    assert np.isclose(definition["parameters"]["THRESHOLD"]["default"], 1.06)


def test_written_filter_definition_is_the_printed_one(tmp_path):
    from hf_laser.integrations.opuscleaner import (
        opuscleaner_filter,
        write_opuscleaner_filter,
    )

    path = write_opuscleaner_filter(tmp_path)
    assert path.name == "hf_laser_score.json" and json.loads(path.read_text()) == opuscleaner_filter()
