"""The 25 Moses non-breaking-prefix files that LASER installs (their RELEASE-4.0 content; see the
"Non-breaking-prefix files" section of `preprocessing.py`), read on first use.

In the package they are data files, byte for byte the release's (`nonbreaking_prefixes/nonbreaking_prefix.LANG`:
the CRLF line ends of ca/sl, the BOM of hu, trailing blanks all kept). A model directory's remote code is a flat
copy of these modules without that folder (transformers copies `.py` files only), so a saved LASER1 tokenizer also
writes the files' text into the directory as one JSON object ([`BUNDLE_FILE`], [`bundle`]), and `LaserTokenizer`
loaded from the directory registers it ([`use_bundle`]); the package's own files are always preferred.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

__all__ = ["BUNDLE_FILE", "LANGS", "bundle", "prefix_file_bytes", "register_bundle", "registered_bundle", "use_bundle"]

DATA_DIR = Path(__file__).resolve().parent / "nonbreaking_prefixes"
# the languages with a file (a fixed list, so that no directory listing or file name decides what is read)
LANGS = ("ca", "cs", "de", "el", "en", "es", "fi", "fr", "ga", "hu", "is", "it", "lt", "lv", "nl", "pl", "pt", "ro",
         "ru", "sk", "sl", "sv", "ta", "yue", "zh")
BUNDLE_FILE = "nonbreaking_prefixes.json"
MAX_BUNDLE_BYTES = 1 << 20  # the 25 files are 0.1 MB: a larger bundle is not one of ours

_bundle: dict[str, str] | None = None


@functools.lru_cache(maxsize=None)
def _read_data_file(lang: str) -> bytes | None:
    path = DATA_DIR / f"nonbreaking_prefix.{lang}"
    return path.read_bytes() if path.is_file() else None


def prefix_file_bytes(lang: str) -> bytes:
    """The bytes of `nonbreaking_prefix.{lang}` (KeyError for a language without a file)."""
    if lang not in LANGS:
        raise KeyError(lang)
    data = _read_data_file(lang)
    if data is not None:
        return data
    if _bundle is not None:
        return _bundle[lang].encode("utf-8")
    raise FileNotFoundError(f"the Moses non-breaking-prefix file of {lang!r} is missing: neither {DATA_DIR} nor a "
                            f"registered {BUNDLE_FILE} (save the tokenizer with hf_laser installed to write it)")


def bundle() -> dict[str, str]:
    """`{language: the file's text}` for every file: what [`use_bundle`] reads back."""
    return {lang: prefix_file_bytes(lang).decode("utf-8") for lang in LANGS}


def use_bundle(path: str | Path) -> None:
    """Registers a [`BUNDLE_FILE`] (a saved tokenizer's) as the source of the files the package does not have.
    Untrusted: bounded in size, and refused in one line unless it holds exactly the text of every language."""
    path = Path(path)
    if path.stat().st_size > MAX_BUNDLE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_BUNDLE_BYTES} bytes, not a non-breaking-prefix bundle")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path}: not a non-breaking-prefix bundle ({type(err).__name__})") from None
    try:
        register_bundle(data)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def register_bundle(data: dict[str, str]) -> None:
    """Makes `data` ([`bundle`]'s form) the source of the files the package does not have (a process that gets it
    from another: multiprocessing)."""
    global _bundle
    if not isinstance(data, dict) or set(data) != set(LANGS) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"not a non-breaking-prefix bundle (an object of the {len(LANGS)} languages' texts expected)")
    _bundle = data


def registered_bundle() -> dict[str, str] | None:
    """The registered bundle, where the package's data files are missing (remote code); else None."""
    return _bundle if _read_data_file(LANGS[0]) is None else None
