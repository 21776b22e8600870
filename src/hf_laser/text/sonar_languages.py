"""SONAR's language tags from the language names hf_laser takes everywhere, and the tokenizer `LaserEncoder` uses
for a SONAR directory.

SONAR needs the source language of every sentence: its ids begin with the tag `__{lang}__` (one of 202 FLORES-200
codes, `tokenization_sonar.SONAR_LANGS`). [`sonar_tag`] maps what a user gives (`fra_Latn`, `fr`, `fra`, `French`,
`de-CH`) to that tag through the same table as every other language argument ([`~languages.flores_codes`]); a
language SONAR does not know, or a code that names several of its tags (`zh`: `yue_Hant`, `zho_Hans`, `zho_Hant`),
is one clear error. `lang="auto"` detects each sentence's language ([`~langid.detect`]); where the detected code
names several tags, the sentence's script decides (Kurdish: `ckb_Arab` or `kmr_Latn`), and where it cannot
(Chinese: `zho_Hans`, `zho_Hant`, `yue_Hant`), `zho_Hans` is used and a warning says so once.
"""

from __future__ import annotations

import functools
import json
import os
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from .langid import check_default_lang, detect, is_auto, warn_at_caller
from .languages import flores_codes
from .text_tokenizer import LaserInputError, check_lang_argument, check_lines_argument
from .sonar_text_tokenizer import DEFAULT_LANG, SONAR_LANGS, VOCAB_FILES_NAMES, SonarTextTokenizer

__all__ = ["SonarLineTokenizer", "is_sonar_directory", "sonar_tag", "sonar_tags"]

# the script of a tag (its suffix) as Unicode names its letters; Hans and Hant are both Han
_SCRIPT_NAMES = {"Latn": "LATIN", "Arab": "ARABIC", "Cyrl": "CYRILLIC", "Deva": "DEVANAGARI", "Beng": "BENGALI",
                 "Tfng": "TIFINAGH", "Hans": "CJK", "Hant": "CJK", "Hebr": "HEBREW", "Grek": "GREEK"}
# where the script cannot decide between the tags a detected code names: the usual one, said in a warning
_AUTO_PREFERRED = {"zh": "zho_Hans"}


@functools.lru_cache(maxsize=4096)
def sonar_tags(lang: str, langs: tuple[str, ...] = SONAR_LANGS) -> tuple[str, ...]:
    """Every tag of `langs` that `lang` names (a tag itself, a FLORES-200 / ISO 639 code, an English name)."""
    if lang in langs:
        return (lang,)
    try:
        codes = flores_codes(lang)
    except ValueError:
        codes = ()
    return tuple(code for code in langs if code in codes)


def sonar_tag(lang: str, langs: tuple[str, ...] = SONAR_LANGS) -> str:
    """The one SONAR tag `lang` names; [`LaserInputError`] (one line) when it names none or several."""
    found = sonar_tags(lang, tuple(langs))
    if len(found) == 1:
        return found[0]
    if not found:
        raise LaserInputError(f"SONAR has no language {lang!r}: its {len(langs)} tags are FLORES-200 codes "
                              "(eng_Latn, fra_Latn, zho_Hans, ...; hf-laser's docs/sonar.md lists them)")
    raise LaserInputError(f"{lang!r} names {len(found)} of SONAR's languages ({', '.join(found)}): give one of "
                          "them")


def is_sonar_directory(path: str | os.PathLike) -> bool:
    """Whether `path` is a local directory whose `config.json` is a SONAR text encoder's."""
    config = Path(str(path)).expanduser() / "config.json"
    if not config.is_file() or config.stat().st_size > 1 << 20:
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "sonar"
    except (OSError, ValueError, AttributeError):
        return False


class SonarLineTokenizer:
    """Lines -> SONAR's ids with each line's language tag: what [`~encoder.LaserEncoder`] asks of a tokenizer
    (`resolve_lang`, `encode_lines`, `get_vocab`, `default_lang`), on [`SonarTextTokenizer`] (sentencepiece only:
    no transformers). `lang`: one language for all lines, one per line, `"auto"`, or None (the directory's
    `src_lang`, after a check that the lines look like it)."""

    identity_name = "SonarTokenizer"
    mode = "sonar"

    def __init__(self, core: SonarTextTokenizer):
        self.core = core
        self._files = {"spm_model_file": Path(core.spm_model_file).read_bytes()}  # part of the outputs' identity
        self._auto_warned: set[str] = set()

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs) -> SonarLineTokenizer:
        """From a SONAR directory (or a Hub id: its files are fetched as transformers would)."""
        directory = Path(str(path)).expanduser()
        if directory.is_dir():
            spm_file = directory / VOCAB_FILES_NAMES["vocab_file"]
            config_file = directory / "tokenizer_config.json"
        else:
            # lazy: the Hub client, needed for Hub calls only
            from huggingface_hub import hf_hub_download

            spm_file = Path(hf_hub_download(str(path), VOCAB_FILES_NAMES["vocab_file"], **kwargs))
            config_file = Path(hf_hub_download(str(path), "tokenizer_config.json", **kwargs))
        config = {}
        if config_file.is_file() and config_file.stat().st_size <= 1 << 20:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        langs = config.get("langs") if isinstance(config, dict) else None
        src_lang = config.get("src_lang", DEFAULT_LANG) if isinstance(config, dict) else DEFAULT_LANG
        return cls(SonarTextTokenizer(spm_file, langs=langs, default_lang=src_lang))

    @property
    def default_lang(self) -> str:
        return self.core.default_lang

    @property
    def langs(self) -> tuple[str, ...]:
        return self.core.langs

    def get_vocab(self) -> dict[str, int]:
        return {self.core.id_to_token(i): i for i in range(self.core.vocab_size)}

    def resolve_lang(self, lang, texts: Sequence[str] = (), *, pretokenized: bool | str = False,
                     n_texts: int | None = None):
        """`lang` checked; None: [`default_lang`], with a warning at the caller's line when (a sample of) `texts`
        look like another language."""
        if lang is not None:
            return check_lang_argument(lang, n_texts)
        if texts:
            check_default_lang(texts, self.default_lang)
        return self.default_lang

    def tag(self, lang: str) -> str:
        return sonar_tag(lang, self.core.langs)

    def _auto_tags(self, lines: list[str]) -> list[str]:
        tags = []
        for line, code in zip(lines, detect(lines)):
            found = sonar_tags(code, self.core.langs)
            if not found:
                raise LaserInputError(f"lang='auto' detected {code!r} in {line[:60]!r}, a language SONAR has no tag "
                                      "for: give lang= explicitly")
            if len(found) > 1:
                script = _script(line)
                by_script = [tag for tag in found if _SCRIPT_NAMES.get(tag[-4:]) == script]
                if len(by_script) == 1:
                    found = by_script
                else:
                    chosen = _AUTO_PREFERRED.get(code, found[0])
                    if code not in self._auto_warned:
                        self._auto_warned.add(code)
                        warn_at_caller(f"lang='auto' detected {code!r}, which names {', '.join(found)} for SONAR: "
                                       f"those sentences are embedded as {chosen} (give lang= to choose)")
                    found = (chosen,)
            tags.append(found[0])
        return tags

    def encode_lines(self, lines: Iterable[str], lang: str | Sequence[str] | None = None, *,
                     pretokenized: bool | str = False, num_proc: int = 1, chunk_size: int = 2000) -> list[list[int]]:
        """Lines -> fairseq2's ids (`[__tag__] pieces [</s>]`, cut to 514 ids as SONAR's pipeline cuts them)."""
        if pretokenized:
            raise LaserInputError("SONAR takes raw text (its SentencePiece model splits it): pretokenized input is "
                                  "for LASER models")
        check_lines_argument(lines)
        lines = list(lines)
        for i, line in enumerate(lines):
            if not isinstance(line, str):
                raise LaserInputError(f"sentence {i} is {type(line).__name__}, expected str")
        if lang is None:
            lang = self.resolve_lang(None, lines)
        if isinstance(lang, str):
            tags = self._auto_tags(lines) if is_auto(lang) else [self.tag(check_lang_argument(lang))] * len(lines)
        else:
            langs = check_lang_argument(lang, len(lines))
            auto = [i for i, code in enumerate(langs) if is_auto(code)]
            detected = dict(zip(auto, self._auto_tags([lines[i] for i in auto]))) if auto else {}
            tags = [detected[i] if i in detected else self.tag(code) for i, code in enumerate(langs)]
        return [self.core.encode(line, tag) for line, tag in zip(lines, tags)]


def _script(text: str) -> str | None:
    """The Unicode script name prefix (`LATIN`, `ARABIC`, `CJK`, ...) of most of `text`'s letters."""
    counts: dict[str, int] = {}
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "").split(" ")[0]
            counts[name] = counts.get(name, 0) + 1
    return max(counts, key=counts.get) if counts else None
