"""Every code block of README.md runs (#47: examples that cannot go stale).

The blocks run in a scratch directory holding the repository's `examples/` and what the prose says a user has:
`src.de` / `tgt.en` / `de.txt` to mine and embed, and the original checkpoints under their release names, stood in
for by the reference checkpoints of `../shared/reference` (the originals are not reachable here). Shell lines run as
written, but for `pip install` and the virtual environment (this test runs inside one) and `hf-laser serve`, which
runs as a server process whose port the OpenAI block is pointed at."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import BPE_CODES, BPE_VOCAB, LASER2, TINY_CHECKPOINT, require_shared

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(bash|python)\n(.*?)```", README, re.S)
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    require_shared(TINY_CHECKPOINT, BPE_CODES, BPE_VOCAB, LASER2 / "laser2-ref-tiny.pt")
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "examples", work / "examples")
    shutil.copyfile(REPO / "examples" / "de.txt", work / "src.de")
    shutil.copyfile(REPO / "examples" / "en.txt", work / "tgt.en")
    shutil.copyfile(REPO / "examples" / "de.txt", work / "de.txt")
    # the originals' release names, for the reference checkpoints that stand in for them
    for source, name in ((TINY_CHECKPOINT, "bilstm.93langs.2018-12-26.pt"), (BPE_CODES, "93langs.fcodes"),
                         (BPE_VOCAB, "93langs.fvocab"), (LASER2 / "laser2-ref-tiny.pt", "laser2.pt"),
                         (LASER2 / "laser2-ref.spm", "laser2.spm"), (LASER2 / "laser2-ref.cvocab", "laser2.cvocab")):
        shutil.copyfile(source, work / name)
    return work


def shell_commands(block: str) -> list[str]:
    """The commands of a bash block, continuation lines joined, comments dropped, split at `&&`."""
    text = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            commands += [c.strip() for c in line.split(" && ")]
    return commands


def run_shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    assert args[0] == "hf-laser", f"README runs {args[0]!r}: teach this test what that needs"
    return subprocess.run([sys.executable, "-m", "hf_laser.cli", *args[1:]], cwd=cwd, env=OFFLINE,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_every_block_is_covered():
    assert [kind for kind, _ in BLOCKS].count("python") == 2 and len(BLOCKS) >= 8
    for kind, block in BLOCKS:
        if kind == "bash":
            for command in shell_commands(block):
                assert command.startswith(("hf-laser ", "pip install", "python3.11 -m venv", ". .venv/bin/activate",
                                           "python -m pytest")), command


def test_the_shell_blocks_run_in_order(workdir):
    """In README order: embed, similar, mine, convert (LASER1 and LASER2 release names), embed with the converted
    model; each exits with 0 and leaves what the prose says."""
    ran = []
    for kind, block in BLOCKS:
        if kind != "bash":
            continue
        for command in shell_commands(block):
            if not command.startswith("hf-laser ") or command.startswith("hf-laser serve"):
                continue  # (the environment; the server runs in test_the_serve_blocks)
            result = run_shell(command, workdir)
            assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
            ran.append(command.split()[1])
    assert ran == ["embed", "similar", "mine", "convert", "convert", "embed"], ran
    assert np.load(workdir / "embeddings.npy").shape[0] == 8
    pairs = (workdir / "pairs.tsv").read_text(encoding="utf-8").splitlines()
    assert pairs and all(len(line.split("\t")) == 3 for line in pairs)
    assert (workdir / "laser-93langs" / "config.json").is_file() and (workdir / "laser2" / "config.json").is_file()
    from hf_laser.modeling.plain_config import PlainLaserConfig

    dim = PlainLaserConfig.from_directory(workdir / "laser-93langs").embedding_dim  # (the reference checkpoint's)
    assert np.load(workdir / "de.npy").shape == (8, dim)


def test_the_python_embedding_block(workdir, capsys):
    code = next(block for kind, block in BLOCKS if kind == "python" and "LaserEncoder" in block)
    cwd = os.getcwd()
    try:
        os.chdir(workdir)
        exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    shape, cosine = capsys.readouterr().out.split(") ")
    assert shape == "(2, 1024" and 0.5 < float(cosine) <= 1.0


def test_the_serve_blocks(workdir):
    """`hf-laser serve --port 8080` and the OpenAI client block against it (on a free port instead of 8080)."""
    pytest.importorskip("openai")
    from serve_helpers import ServerProcess, require_serve_extra

    require_serve_extra()
    serve = next(c for kind, b in BLOCKS if kind == "bash" for c in shell_commands(b) if c.startswith("hf-laser serve"))
    args = shlex.split(serve)[2:]
    args = [a for i, a in enumerate(args) if a != "--port" and (i == 0 or args[i - 1] != "--port")]
    code = next(block for kind, block in BLOCKS if kind == "python" and "OpenAI" in block)
    srv = ServerProcess(*args)
    try:
        namespace: dict = {}
        exec(compile(code.replace("127.0.0.1:8080", srv.url.removeprefix("http://")), "README.md", "exec"), namespace)
        assert len(namespace["resp"].data[0].embedding) == 1024
    finally:
        srv.cleanup()


def test_the_main_job_line_installs_what_the_main_job_needs(tmp_path):
    """#71: the main-job line installs torch's CPU build (at the pinned version) and the package without extras, and
    that is enough: in a virtual environment holding only hf_laser's required dependencies (no extra), the main job
    and the first result run offline."""
    import tomllib

    from bare_venv import make_bare_venv
    from packaging.requirements import Requirement

    main_job = next(block for kind, block in BLOCKS if kind == "bash" and "hf-laser embed" in block)
    assert len(main_job.strip().splitlines()) == 1, "the main job is one line"
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    torch_pin = next(r for r in project["dependencies"] if Requirement(r).name == "torch")
    installs = [c for c in shell_commands(main_job) if c.startswith("pip install")]
    assert installs == [f"pip install {torch_pin} --index-url https://download.pytorch.org/whl/cpu",
                        "pip install -e ."], installs

    python = make_bare_venv(tmp_path / "venv", [Requirement(r).name for r in project["dependencies"]])
    work = tmp_path / "work"
    shutil.copytree(REPO / "examples", work / "examples")
    first_result = next(block for kind, block in BLOCKS if kind == "bash" and "hf-laser similar" in block)
    commands = [c for c in shell_commands(main_job) + shell_commands(first_result) if c.startswith("hf-laser ")]
    assert [c.split()[1] for c in commands] == ["embed", "similar"]
    for command in commands:
        result = subprocess.run([str(python), "-m", "hf_laser.cli", *shlex.split(command)[1:]], cwd=work,
                                env={**OFFLINE, "PYTHONPATH": str(REPO / "src")}, capture_output=True, text=True,
                                timeout=600, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
    assert np.load(work / "embeddings.npy").shape == (8, 1024)
    assert "Le train pour Berlin" in result.stdout


def test_the_search_demo_finds_its_answer(tmp_path):
    """#71: the search command of the prose has its answer among the targets: the top hit is the translation, far
    above the rest (a demo whose best hit scores 0.29 looks broken)."""
    command = re.search(r"`(hf-laser similar --lang en --text [^`]+)`", README).group(1)
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    result = run_shell(command + " -k 2", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    hits = [line.split(None, 1) for line in result.stdout.splitlines() if line.startswith("    ")]
    (best, sentence), (second, _) = hits
    assert sentence == "[fr] Où puis-je acheter un billet pour le concert ?" and float(best) > 0.8 > float(second) + 0.5
