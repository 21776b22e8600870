"""Every code block of the documentation site (docs/*.md) runs (#47: examples that cannot go stale).

Each page's blocks run in order in a scratch directory of their own holding what the pages say a user has: the
repository's `examples/`, `src.de` / `tgt.en` / `de.txt` / `fr.txt` / `wo.txt` to embed and mine, `laser-93langs`
(the reference checkpoint of `../shared/reference` converted, standing in for the original LASER1, which is not
reachable here) and the release files under their names (LASER's, and SONAR's: the SONAR fixtures' small encoder
and stand-in SentencePiece model). Bash blocks run with bash (`set -e`) and this environment's
`hf-laser` / `python`; `pip install` lines are left out (this test runs inside the environment). Python blocks run in
a fresh interpreter. A block that needs what a test machine cannot have says so on the line before its fence:
`<!-- example: skip (needs a GPU) -->`, and is skipped with that reason. Blocks that talk to
`http://127.0.0.1:8080` run against a real `hf-laser serve` on a free port."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BPE_CODES, BPE_VOCAB, LASER2, REPO, SHARED, TINY_CHECKPOINT, require_shared
from sonar_helpers import write_small_decoder_checkpoint

DOCS = REPO / "docs"
SKIP = re.compile(r"<!-- example: skip \((.+?)\) -->\s*$")


def page_blocks(page: Path) -> list[tuple[str, str, str | None]]:
    """`(kind, code, skip reason)` of every fenced block of `page`, in order."""
    lines, blocks, i = page.read_text(encoding="utf-8").splitlines(), [], 0
    while i < len(lines):
        m = re.match(r"^```(\w+)\s*$", lines[i])
        if m:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            skip = SKIP.match(before)
            blocks.append((m.group(1), "\n".join(lines[i + 1:end]) + "\n", skip.group(1) if skip else None))
            i = end
        i += 1
    return blocks


PAGES = sorted(p for p in DOCS.glob("*.md") if page_blocks(p))


@pytest.fixture(scope="module")
def common(tmp_path_factory) -> Path:
    require_shared(TINY_CHECKPOINT, BPE_CODES, BPE_VOCAB, LASER2 / "laser2-ref-tiny.pt")
    from hf_laser.checkpoints.convert import convert

    work = tmp_path_factory.mktemp("docs-common")
    shutil.copytree(REPO / "examples", work / "examples")
    for name, source in (("src.de", "de"), ("tgt.en", "en"), ("de.txt", "de"), ("fr.txt", "fr"), ("en.txt", "en")):
        shutil.copyfile(REPO / "examples" / f"{source}.txt", work / name)
    (work / "wo.txt").write_text("Naka nga def?\nJërëjëf.\n", encoding="utf-8")
    for source, name in ((TINY_CHECKPOINT, "bilstm.93langs.2018-12-26.pt"), (BPE_CODES, "93langs.fcodes"),
                         (BPE_VOCAB, "93langs.fvocab"), (LASER2 / "laser2-ref-tiny.pt", "laser2.pt"),
                         (LASER2 / "laser2-ref.spm", "laser2.spm"), (LASER2 / "laser2-ref.cvocab", "laser2.cvocab")):
        shutil.copyfile(source, work / name)
    convert(TINY_CHECKPOINT, work / "laser-93langs", bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB)
    # SONAR's release files, under their names: the small random encoder of the SONAR fixtures and its stand-in
    # SentencePiece model (the real ones are not reachable here)
    sonar = REPO / "tests" / "fixtures" / "sonar"
    shutil.copyfile(sonar / "small.pt", work / "sonar_text_encoder.pt")
    shutil.copyfile(sonar / "stand-in.spm.model", work / "sentencepiece.source.256000.model")
    write_small_decoder_checkpoint(work / "sonar_text_decoder.pt")  # its small random decoder, likewise
    return work


def environment() -> dict:
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), *(p for p in sys.path if p)])}


def check_serve_lines(code: str, cwd: Path) -> None:
    """Each `hf-laser serve ...` line of a block starts a server that answers (on a free port instead of its own)."""
    import shlex

    from serve_helpers import ServerProcess, require_serve_extra

    require_serve_extra()
    for line in code.splitlines():
        if line.startswith("hf-laser serve"):
            args = shlex.split(line.split(" #", 1)[0])[2:]
            args = [a for i, a in enumerate(args) if a != "--port" and (i == 0 or args[i - 1] != "--port")]
            ServerProcess(*args, cwd=cwd).cleanup()  # (it started and answered /health)


ENVIRONMENT = ("python3.11 -m venv", ". .venv/bin/activate", "pip install", "python -m pytest")


def runnable(kind: str, code: str) -> list[str]:
    """The command that runs a block; for bash, without what makes the environment this test runs in (a virtual
    environment, `pip install`) and without the test suite itself."""
    if kind == "bash":
        lines = []
        for line in code.splitlines():
            kept = [part for part in line.split(" && ") if not part.strip().startswith(ENVIRONMENT)]
            lines.append(" && ".join(kept))
        return ["bash", "-e", "-o", "pipefail", "-c", "\n".join(lines)]
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_page_s_examples_run(page, common, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(common, work, symlinks=True)
    (tmp_path / "shared").symlink_to(SHARED)  # the pages' ../shared
    blocks = page_blocks(page)
    server = None
    try:
        for n, (kind, code, skip) in enumerate(blocks, 1):
            if kind not in ("bash", "python") or skip:
                continue
            if "127.0.0.1:8080" in code:
                if server is None:
                    from serve_helpers import ServerProcess, require_serve_extra

                    require_serve_extra()
                    server = ServerProcess(cwd=work)
                code = code.replace("127.0.0.1:8080", server.url.removeprefix("http://"))
            if kind == "bash" and re.search(r"^hf-laser serve\b", code, re.M):
                check_serve_lines(code, work)
                code = "\n".join(line for line in code.splitlines() if not line.startswith("hf-laser serve"))
            result = subprocess.run(runnable(kind, code), cwd=work, env=environment(), capture_output=True, text=True,
                                    timeout=900, stdin=subprocess.DEVNULL)
            assert result.returncode == 0, (f"{page.name}, block {n} ({kind}):\n{code}\n--- stdout\n"
                                            f"{result.stdout[-2000:]}\n--- stderr\n{result.stderr[-4000:]}")
    finally:
        if server is not None:
            server.cleanup()


def test_skipped_blocks_say_why_and_are_few():
    reasons = [(p.name, skip) for p in PAGES for _, _, skip in page_blocks(p) if skip]
    for name, reason in reasons:
        assert re.match(r"needs (a GPU|the Hub|the original|network)|runs ", reason), (name, reason)
    assert len(reasons) <= 12, reasons
