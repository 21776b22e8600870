"""Language codes and names of LASER2 and LASER3 (NLLB), for choosing an encoder by language.

`data/laser_languages.tsv` lists the 206 FLORES-200 codes laser_encoders knows, with their English names, which have
a LASER3 student (147), which of those have their own SentencePiece model (35) and which LASER2 covers (91). A
language can be named by its FLORES-200 code (`wol_Latn`, any case), its ISO 639-3 code (`wol`), its ISO 639-1 code
(`wo`; macrolanguages too: `ar` also names `arb_Arab`, `zh` names `zho_Hans` and `zho_Hant`), or its English name as
laser_encoders spells it (`wolof`, `modern standard arabic`). [`flores_codes`] gives every FLORES code a name may
mean; choosing among them is the caller's (a model set chooses among the students it has). Kurdish (`ku`, `kur`,
`kurdish`) names Central and Northern Kurdish (`ckb_Arab`, `kmr_Latn`), as `zh` names both Chinese scripts.

A student (a model for one language) is recorded under its FLORES-200 code, or, for a language outside FLORES-200
(Breton, Cornish ...), under its ISO 639-3 code and ISO 15924 script (`bre_Latn`) when the preprocessing knows the
language: [`student_code`], [`is_student_code`], [`names_student`].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .preprocessing import (
    KNOWN_CODES,
    LANG_CODE,  # noqa: F401 (re-exported: the pattern of a language code)
    normalize_lang,
)

TABLE = Path(__file__).resolve().parent / "data" / "laser_languages.tsv"


@dataclass(frozen=True)
class LaserLanguage:
    """One row of the table: a FLORES-200 code and what LASER has for it."""

    code: str
    names: tuple[str, ...]
    laser3: bool
    own_spm: bool
    laser2: bool


@lru_cache(maxsize=1)
def laser_languages() -> dict[str, LaserLanguage]:
    """`{FLORES-200 code: LaserLanguage}` from the package's table."""
    languages = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        code, names, laser3, own, laser2 = (line.split("\t") + [""] * 5)[:5]
        languages[code] = LaserLanguage(code, tuple(n for n in names.split("|") if n), laser3 == "laser3",
                                        own == "own", laser2 == "laser2")
    return languages


# macrolanguages whose codes normalize_lang does not bring to their FLORES members (`ar`, `zh` it does)
_MACROLANGUAGES = {"ku": ("ckb_Arab", "kmr_Latn"), "kur": ("ckb_Arab", "kmr_Latn"), "kurdish": ("ckb_Arab", "kmr_Latn")}


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}
    for code, language in laser_languages().items():
        keys = {code.lower(), code[:3], normalize_lang(code), *language.names}
        for key in keys:
            index.setdefault(key, []).append(code)
    for key, codes in _MACROLANGUAGES.items():
        index.setdefault(key, []).extend(c for c in codes if c not in index[key])
    return {k: tuple(sorted(v)) for k, v in index.items()}


def flores_codes(lang: str) -> tuple[str, ...]:
    """The FLORES-200 codes `lang` may name (empty when it names none). Case and surrounding spaces are ignored; a
    code with a region or another script (`en-US`, `sr_Cyrl`) also matches through its language part."""

    key = " ".join(lang.strip().lower().split())
    found = _index().get(key)
    if found:
        return found
    try:
        return _index().get(normalize_lang(key), ())
    except ValueError:
        return ()


def is_flores_code(code: str) -> bool:
    return code in laser_languages()


_SCRIPT_CODE = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")  # ISO 639-3 + ISO 15924, the form of FLORES-200 codes


def is_student_code(code: str) -> bool:
    """A code a student can be recorded under: FLORES-200, or `xxx_Scrp` of a language outside it that the
    preprocessing knows (see the module docstring)."""

    return isinstance(code, str) and (is_flores_code(code) or (
        bool(_SCRIPT_CODE.match(code)) and not flores_codes(code[:3]) and normalize_lang(code) in KNOWN_CODES))


def student_code(lang: str) -> str:
    """The code a student of `lang` is recorded under: its one FLORES-200 code, or `lang` itself when it is a
    code of a language outside FLORES-200 in the `xxx_Scrp` form (`bre_Latn`). ValueError for a name of no
    language or of several (`zh`), and for a code outside FLORES-200 without its script (`br`)."""
    codes = flores_codes(str(lang))
    if len(codes) == 1:
        return codes[0]
    if not codes and is_student_code(str(lang)):
        return str(lang)

    try:
        known = normalize_lang(str(lang)) in KNOWN_CODES
    except ValueError:
        known = False
    if codes:
        raise ValueError(f"{lang!r} names more than one FLORES-200 language: {', '.join(codes)}; give one of these "
                         "codes")
    if known:
        raise ValueError(f"{lang!r} is outside FLORES-200: give its ISO 639-3 code and script, as FLORES codes are "
                         "written (e.g. bre_Latn for Breton)")
    raise ValueError(f"{lang!r} names no FLORES-200 language; give its FLORES-200 code (e.g. wol_Latn)")


def names_student(lang: str, code: str) -> bool:
    """Whether the language name or code `lang` means the student code `code` (a FLORES code through
    [`flores_codes`]; a code outside FLORES-200 by its language: `br`, `bre`, `bre_Latn` all mean `bre_Latn`)."""
    if is_flores_code(code):
        return code in flores_codes(lang)

    try:
        return lang.strip().lower() == code.lower() or normalize_lang(lang) == normalize_lang(code) and (
            not _SCRIPT_CODE.match(lang.strip()) or lang.strip()[4:].lower() == code[4:].lower())
    except ValueError:
        return False


def check_language(lang: str, auto: bool = True) -> str:
    """The one rule for a language argument of the command line and the server: a language code (`fr`, `fra`,
    `en-US`, `eng_Latn`) is returned as it is, a language's English name as LASER lists it (`french`, `wolof`) as its
    FLORES-200 code; anything else (`fr,en`, `123`, `../etc`, `--`) raises ValueError saying what is expected.
    (`"auto"` is the caller's to allow; `auto=False`: the message does not offer it, for a caller that refuses it.)"""
    if not isinstance(lang, str) or not lang.strip():
        raise ValueError(f"{lang!r} is not a language code: give one (en, fr, zh, ...)")
    if LANG_CODE.match(lang):
        return lang
    codes = flores_codes(lang)
    if len(codes) == 1:
        return codes[0]
    raise ValueError(f"{lang!r} is not a language code{' of one language' if codes else ''}: give one ISO 639 code "
                     "(en, fr, zh, ...; en-US and eng_Latn work too), a FLORES-200 code, a language name (french, "
                     "wolof)" + (", or auto to detect the language per sentence" if auto else ""))
