"""Bare virtual environments for remote-code tests, built offline.

`make_bare_venv(path, ["transformers", "torch", "safetensors"])` creates a venv (no pip, no system site-packages)
whose site-packages holds symlinks to exactly those distributions and their required dependencies (extras left
out), taken from the running environment. hf_laser, sentence-transformers, jieba, transliterate, py3langid ... are
not importable there unless listed: what a user who never installed hf_laser has.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_closure(names: list[str]) -> list[metadata.Distribution]:
    """The installed distributions `names` and everything they require (markers evaluated, no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = _canonical(todo.pop())
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        for spec in dist.requires or ():
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _top_level_entries(dist: metadata.Distribution) -> set[str]:
    entries = set()
    for file in dist.files or ():
        parts = Path(str(file)).parts
        if parts and parts[0] != ".." and not parts[0].endswith(".pth") and parts[0] != "__pycache__":
            entries.add(parts[0])
    return entries


def make_bare_venv(path: Path, distributions: list[str]) -> Path:
    """Creates the venv at `path` and returns its python executable."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    for dist in dependency_closure(distributions):
        root = Path(dist.locate_file(""))
        for entry in _top_level_entries(dist):
            source = root / entry
            if source.exists() and not (site / entry).exists():
                (site / entry).symlink_to(source)
    return python
