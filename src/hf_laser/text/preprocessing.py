r"""LASER text preprocessing, reproduced bit-exactly in Python.

This module rebuilds what LASER's ``Token()`` (``source/lib/text_processing.py``) runs
before BPE, i.e. the pipe

1. ``remove-non-printing-char.perl``            (Moses, tag RELEASE-4.0)
2. ``normalize-punctuation.perl -l L``          (Moses, tag RELEASE-4.0)
3. ``tokenizer.perl -q -no-escape -l L``        (Moses, tag RELEASE-4.0)
4. ``python -m jieba -d``                        (only ``L == zh``)
5. ``mecab -O wakati -b 50000``                  (only ``L == ja``)
6. ``romanize_lc.py``: Greek transliteration (only ``L == el``), then ``str.lower()``

and, for ``mode="laser2"``, what LASER's ``SPMApply()`` runs before SentencePiece:
steps 1, 2 and ``str.lower()`` (no tokenizer, no jieba/MeCab, no transliteration).

Every rule is ported from the Perl scripts as they are at the Moses tag RELEASE-4.0 (the
version LASER's installer pins), checked line for line against outputs of the original
tools (``shared/reference``).  Things that matter and are easy to get wrong:

* Perl 5.36 uses Unicode 14.0; so does Python 3.11's :mod:`unicodedata`.  Step 1 replaces
  every character of general category C (Cc Cf Cs Co Cn) by one space.  The tokenizer's
  ``\p{IsAlnum}`` / ``\p{IsAlpha}`` / ``\p{IsLower}`` are Perl's *derived* properties
  (Alphabetic = letters + Nl + Other_Alphabetic, Lowercase = Ll + Other_Lowercase), not
  Python's ``str.isalpha``; the Other_* tables are embedded below (dumped from perl 5.36).
* ``normalize-punctuation.perl`` works on raw bytes: ``\d``, ``[a-z]``, ``\s`` are
  ASCII-only there, and ``$_`` still holds the trailing newline when its rules run (so
  ``(\.+)\"(\s*[^<])`` also fires on a final ``."``).
* ``tokenizer.perl`` passes a line that is empty or whitespace-only (Perl's Unicode
  ``\s``, which includes U+00A0) through unchanged.
* The Moses tokenizer of RELEASE-4.0 has no Finnish/Swedish colon rule (``tv:n`` ->
  ``tv : n`` for every language; the rule came with mosesdecoder PR #191 in February 2018),
  no Catalan middle-dot rule, no "split the last word" rule, no ``so``/``tdt`` apostrophe
  rule, and ``ca`` uses the generic apostrophe rule.  Its only language-specific rules are
  the apostrophe rules (``en``; ``fr``/``it``/``ga``; all others) and the choice of the
  non-breaking-prefix file.

Why not :mod:`sacremoses`
-------------------------
sacremoses was evaluated as the implementation base.  It departs from the RELEASE-4.0 Perl
in ways that change the output on the reference data (its tokenizer gets 518 and its
normaliser, even with ``perl_parity=True``, 57 of the 21 900 non-zh/ja/el reference lines
wrong), so the rules are re-implemented here and sacremoses is not imported at all:

* its ``IsAlnum``/``IsAlpha``/``IsLower``/``IsN`` tables come from an older Unicode version
  (Perl 5.36 = Unicode 14), and it adds Indic viramas/nuktas and (for zh/ja/ko) CJK ranges;
* normaliser: ``‘`` and ``‚`` become ``'`` (RELEASE-4.0: ``"``); the French-quote rules lack
  their spaces unless ``perl_parity``; the ``,"`` / ``."`` quote rules only run for de/es/fr
  (Perl: every language except en and cs/cz); ``\d`` and ``\s`` are Unicode instead of
  bytes; the trailing newline is not there for the ``."`` rule; the result is stripped;
* tokenizer: non-breaking prefixes are stripped when loaded (Perl keeps trailing blanks and
  ``\r``, which disables such entries); words are split with ``str.split()`` (Perl's
  ``split(/\s/)`` keeps empty fields, which matters for the "next word is lower-case"
  test); no ``ga`` apostrophe rule; whitespace-only lines are not passed through;
  whitespace is collapsed with Python's ``\s`` (includes U+001C-U+001F);
  the multi-dot handling is rewritten (differs on a literal ``DOTMULTI`` in the text); the
  shipped prefix files are newer than RELEASE-4.0 (``ta``, ``sv``, ``en``, ``ca``, ...);
* the installed sacremoses (0.2.0) is not the pinned one (0.1.1): a moving target.

Non-breaking-prefix files
-------------------------
``nonbreaking_prefixes.py`` holds the 25 files LASER installs, at their RELEASE-4.0
(2017-09) content as far as it could be reconstructed: Tamil is the old letter list (the
reference output needs it; replaced in Moses in 2019), English has no ``Rs`` (added after
July 2019), Swedish is the pre-2020 list, Lithuanian includes the January 2017 additions.
Catalan and Slovenian keep their CRLF line ends and Hungarian its BOM (byte-exact copies:
with Perl's ``chomp`` the ``\r`` makes every Catalan entry, and every Slovenian entry except
the ``#NUMERIC_ONLY#`` ones, ineffective), French has ``a`` as a prefix.  These last four
could not be dated against the reference (no Tatoeba line is affected either way).

Known, documented limits
------------------------
* MeCab's ``-b 50000`` input buffer: ``mecab`` reads a longer line in pieces of 49 999 bytes and
  segments each piece on its own, writing one output line per piece (which shifts the line count of
  the original's output).  Here the MeCab input is cut the same way, into pieces of at most
  :data:`MECAB_PIECE_BYTES` bytes (cut before the character that would cross the limit where the
  original would cut inside it), each piece is segmented on its own and the pieces' outputs are
  joined into the one output line.  Lines up to 49 999 bytes are one piece, as in the original.
  This also keeps MeCab working: on a line of some 100 000+ tokens it returns no result at all.
* Invalid UTF-8 makes the original step 1 die (LASER1 then silently truncates the file).
  Python strings cannot hold invalid UTF-8; lone surrogates (``errors="surrogateescape"``)
  are category Cs and become spaces, like every other non-printing character.
* ``"\n"`` inside a text would have been a line break for the original; here one trailing
  ``"\n"`` is removed (Perl ``chomp``) and any other line-break control character is
  category C and becomes a space, so one input text always gives one output line.  U+2028
  and U+2029 are *not* category C: in LASER1 mode the tokenizer turns them into spaces
  (except on whitespace-only lines, which it passes through); in LASER2 mode they are kept
  (SentencePiece's normaliser maps them to spaces later), exactly like the original.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import threading
import unicodedata
import warnings
from typing import Callable, Iterable

from .nonbreaking_prefixes import prefix_file_bytes, register_bundle, registered_bundle

__all__ = [
    "normalize_lang",
    "LaserPreprocessor",
    "preprocess",
    "remove_non_printing_chars",
    "normalize_punctuation",
    "moses_tokenize",
    "NONBREAKING_PREFIX_LANGS",
]

# --------------------------------------------------------------------------------------
# Language codes
# --------------------------------------------------------------------------------------

#: Languages whose non-breaking-prefix file LASER installs (Moses RELEASE-4.0 content,
#: embedded in ``hf_laser/text/nonbreaking_prefixes.py``).  Any other language makes
#: ``tokenizer.perl`` fall back to the English file.
NONBREAKING_PREFIX_LANGS = frozenset(
    "ca cs de el en es fi fr ga hu is it lt lv nl pl pt ro ru sk sl sv ta yue zh".split()
)

#: ISO 639-1 codes (plus the deprecated ``bh``).
_ISO639_1 = frozenset(
    """aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu
    cv cy da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho
    hr ht hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv
    kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr
    nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq
    sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh
    yi yo za zh zu""".split()
)

# ISO 639-3 / 639-2 (T and B) -> the code the reference used.  The 639-1 equivalents, plus
# the individual languages the reference mapped to their macrolanguage's 639-1 code
# (shared/reference/tatoeba_langs.tsv and bpe/training_files.tsv), plus LASER's own
# cmn/wuu/yue -> zh and jpn -> ja.  Codes without an entry stay as they are.
_ISO3_PAIRS = """
aar aa abk ab ave ae afr af aka ak amh am arg an ara ar asm as ava av aym ay aze az bak ba
bel be bul bg bih bh bis bi bam bm ben bn bod bo tib bo bre br bos bs cat ca che ce cha ch
cos co cre cr ces cs cze cs chu cu chv cv cym cy wel cy dan da deu de ger de div dv dzo dz
ewe ee ell el gre el eng en epo eo spa es est et eus eu baq eu fas fa per fa ful ff fin fi
fij fj fao fo fra fr fre fr fry fy gle ga gla gd glg gl grn gn guj gu glv gv hau ha heb he
hin hi hmo ho hrv hr hat ht hun hu hye hy arm hy her hz ina ia ind id ile ie ibo ig iii ii
ipk ik ido io isl is ice is ita it iku iu jpn ja jav jv kat ka geo ka kon kg kik ki kua kj
kaz kk kal kl khm km kan kn kor ko kau kr kas ks kur ku kom kv cor kw kir ky lat la ltz lb
lug lg lim li lin ln lao lo lit lt lub lu lav lv mlg mg mah mh mri mi mao mi mkd mk mac mk
mal ml mon mn mar mr msa ms may ms mlt mt mya my bur my nau na nob nb nde nd nep ne ndo ng
nld nl dut nl nno nn nor no nbl nr nav nv nya ny oci oc oji oj orm om ori or oss os pan pa
pli pi pol pl pus ps por pt que qu roh rm run rn ron ro rum ro rus ru kin rw san sa srd sc
snd sd sme se sag sg sin si slk sk slo sk slv sl smo sm sna sn som so sqi sq alb sq srp sr
ssw ss sot st sun su swe sv swa sw tam ta tel te tgk tg tha th tir ti tuk tk tgl tl tsn tn
ton to tur tr tso ts tat tt twi tw tah ty uig ug ukr uk urd ur uzb uz ven ve vie vi vol vo
wln wa wol wo xho xh yid yi yor yo zha za zho zh chi zh zul zu
cmn zh wuu zh yue zh lvs lv pes fa swh sw zsm ms arb ar azj az khk mn gaz om plt mg uzn uz
quy qu ayr ay knc kr als sq pbt ps ydd yi npi ne ekk et
iw he in id ji yi jw jv mo ro
"""
_LANG_ALIASES: dict[str, str] = dict(
    zip(_ISO3_PAIRS.split()[0::2], _ISO3_PAIRS.split()[1::2])
)

# Three-letter codes that stay as they are (no 639-1 code) and that the reference
# (Tatoeba, FLORES-200, NTREX-128) used: known, so they never trigger the warning.
_KNOWN_ISO3 = frozenset(
    """ace acm acq aeb ajp ang apc arq ars ary arz ast awa azb ban bem ber bho bjn bug cbk
    ceb cjk ckb crh csb dik dsb dtp dyu fil fon fuc fur fuv gsw hmn hne hsb ilo kab kac kam
    kbp kea kmb kmr kzj lfn lij lmo ltg lua luo lus mag mai max mey mhr min mni mos nds nov
    nso nus orv ory pag pam pap pms prs sat scn shi shn swg szl taq tpi tum tzl tzm umb vec
    war yue""".split()
)
# "cz" is not ISO, but normalize-punctuation.perl treats it like "cs".
KNOWN_CODES = _ISO639_1 | _KNOWN_ISO3 | frozenset(_LANG_ALIASES) | {"cz"}

_LANG_SPLIT = re.compile(r"[-_]")
# a language code: ISO 639-1/3 with optional script / region parts (fr, fra, en-US, eng_Latn, zh_Hans)
LANG_CODE = re.compile(r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*$")


def normalize_lang(code: str) -> str:
    """Return the tokenizer language code the LASER reference uses for ``code``.

    ISO 639-1 codes are returned as they are; ISO 639-3/639-2 codes map to their 639-1
    code where one exists (``fra`` -> ``fr``, ``cmn``/``wuu``/``yue`` -> ``zh``,
    ``jpn`` -> ``ja``, ``lvs`` -> ``lv``, ``pes`` -> ``fa``, ``swh`` -> ``sw``,
    ``zsm`` -> ``ms``); codes without one stay as they are (``ast``, ``kab``, ...).
    Script/region suffixes are dropped (``zh_Hans``, ``sr_Cyrl``, ``es_419``, ``en-US``,
    ``eng_Latn``).  Case-insensitive.

    Raises:
        TypeError: ``code`` is not a string.
        ValueError: ``code`` is empty.
    """
    if not isinstance(code, str):
        raise TypeError(f"language code must be a str, got {type(code).__name__}")
    c = code.strip().lower()
    c = _LANG_SPLIT.split(c, 1)[0].strip() if c else c
    if not c:
        raise ValueError(f"empty language code: {code!r}")
    return _LANG_ALIASES.get(c, c)


warned_codes: set[str] = set()
_warn_lock = threading.Lock()
_MAX_WARNED_CODES = 4096  # (a server meets codes clients make up: the set is emptied when full, not grown)


def _warn_unknown(code: str) -> None:
    with _warn_lock:
        if code in warned_codes:
            return
        if len(warned_codes) >= _MAX_WARNED_CODES:
            warned_codes.clear()
        warned_codes.add(code)
    warnings.warn(
        f"unknown language code {code!r}: using the Moses defaults (English non-breaking "
        "prefixes, generic apostrophe rule, generic punctuation rules)",
        UserWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------------------
# Perl 5.36 / Unicode 14 character classes
# --------------------------------------------------------------------------------------

# Characters Perl counts as Alphabetic but that are not Lu/Ll/Lt/Lm/Lo/Nl
# (Other_Alphabetic, Unicode 14; dumped from perl 5.36 "\p{IsAlpha}").
_OTHER_ALPHABETIC = (
    "345-345,5B0-5BD,5BF-5BF,5C1-5C2,5C4-5C5,5C7-5C7,610-61A,64B-657,659-65F,670-670,"
    "6D6-6DC,6E1-6E4,6E7-6E8,6ED-6ED,711-711,730-73F,7A6-7B0,816-817,81B-823,825-827,"
    "829-82C,8D4-8DF,8E3-8E9,8F0-903,93A-93B,93E-94C,94E-94F,955-957,962-963,981-983,"
    "9BE-9C4,9C7-9C8,9CB-9CC,9D7-9D7,9E2-9E3,A01-A03,A3E-A42,A47-A48,A4B-A4C,A51-A51,"
    "A70-A71,A75-A75,A81-A83,ABE-AC5,AC7-AC9,ACB-ACC,AE2-AE3,AFA-AFC,B01-B03,B3E-B44,"
    "B47-B48,B4B-B4C,B56-B57,B62-B63,B82-B82,BBE-BC2,BC6-BC8,BCA-BCC,BD7-BD7,C00-C03,"
    "C3E-C44,C46-C48,C4A-C4C,C55-C56,C62-C63,C81-C83,CBE-CC4,CC6-CC8,CCA-CCC,CD5-CD6,"
    "CE2-CE3,D00-D03,D3E-D44,D46-D48,D4A-D4C,D57-D57,D62-D63,D81-D83,DCF-DD4,DD6-DD6,"
    "DD8-DDF,DF2-DF3,E31-E31,E34-E3A,E4D-E4D,EB1-EB1,EB4-EB9,EBB-EBC,ECD-ECD,F71-F81,"
    "F8D-F97,F99-FBC,102B-1036,1038-1038,103B-103E,1056-1059,105E-1060,1062-1064,"
    "1067-106D,1071-1074,1082-108D,108F-108F,109A-109D,1712-1713,1732-1733,1752-1753,"
    "1772-1773,17B6-17C8,1885-1886,18A9-18A9,1920-192B,1930-1938,1A17-1A1B,1A55-1A5E,"
    "1A61-1A74,1ABF-1AC0,1ACC-1ACE,1B00-1B04,1B35-1B43,1B80-1B82,1BA1-1BA9,1BAC-1BAD,"
    "1BE7-1BF1,1C24-1C36,1DE7-1DF4,24B6-24E9,2DE0-2DFF,A674-A67B,A69E-A69F,A802-A802,"
    "A80B-A80B,A823-A827,A880-A881,A8B4-A8C3,A8C5-A8C5,A8FF-A8FF,A926-A92A,A947-A952,"
    "A980-A983,A9B4-A9BF,A9E5-A9E5,AA29-AA36,AA43-AA43,AA4C-AA4D,AA7B-AA7D,AAB0-AAB0,"
    "AAB2-AAB4,AAB7-AAB8,AABE-AABE,AAEB-AAEF,AAF5-AAF5,ABE3-ABEA,FB1E-FB1E,10376-1037A,"
    "10A01-10A03,10A05-10A06,10A0C-10A0F,10D24-10D27,10EAB-10EAC,11000-11002,11038-11045,"
    "11073-11074,11082-11082,110B0-110B8,110C2-110C2,11100-11102,11127-11132,11145-11146,"
    "11180-11182,111B3-111BF,111CE-111CF,1122C-11234,11237-11237,1123E-1123E,112DF-112E8,"
    "11300-11303,1133E-11344,11347-11348,1134B-1134C,11357-11357,11362-11363,11435-11441,"
    "11443-11445,114B0-114C1,115AF-115B5,115B8-115BE,115DC-115DD,11630-1163E,11640-11640,"
    "116AB-116B5,1171D-1172A,1182C-11838,11930-11935,11937-11938,1193B-1193C,11940-11940,"
    "11942-11942,119D1-119D7,119DA-119DF,119E4-119E4,11A01-11A0A,11A35-11A39,11A3B-11A3E,"
    "11A51-11A5B,11A8A-11A97,11C2F-11C36,11C38-11C3E,11C92-11CA7,11CA9-11CB6,11D31-11D36,"
    "11D3A-11D3A,11D3C-11D3D,11D3F-11D41,11D43-11D43,11D47-11D47,11D8A-11D8E,11D90-11D91,"
    "11D93-11D96,11EF3-11EF6,16F4F-16F4F,16F51-16F87,16F8F-16F92,16FF0-16FF1,1BC9E-1BC9E,"
    "1E000-1E006,1E008-1E018,1E01B-1E021,1E023-1E024,1E026-1E02A,1E947-1E947,1F130-1F149,"
    "1F150-1F169,1F170-1F189"
)
# Characters Perl counts as Lowercase but that are not Ll (Other_Lowercase, Unicode 14).
_OTHER_LOWERCASE = (
    "AA-AA,BA-BA,2B0-2B8,2C0-2C1,2E0-2E4,345-345,37A-37A,1D2C-1D6A,1D78-1D78,1D9B-1DBF,"
    "2071-2071,207F-207F,2090-209C,2170-217F,24D0-24E9,2C7C-2C7D,A69C-A69D,A770-A770,"
    "A7F8-A7F9,AB5C-AB5F,10780-10780,10783-10785,10787-107B0,107B2-107BA"
)

#: Perl's Unicode ``\s`` (``\p{XPosixSpace}``).
_PERL_WS = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_PERL_WS_CLASS = "".join("\\u%04x" % ord(c) for c in _PERL_WS)


def _parse_ranges(spec: str) -> list[tuple[int, int]]:
    out = []
    for item in spec.split(","):
        a, b = item.split("-")
        out.append((int(a, 16), int(b, 16)))
    return out


def _esc(cp: int) -> str:
    return "\\U%08x" % cp if cp > 0xFFFF else "\\u%04x" % cp


def _class_body(mask: bytearray, offset: int = 0) -> str:
    """Regex character-class body (no brackets) for the code points set in ``mask``
    (``mask[i]`` is code point ``offset + i``)."""
    parts = []
    for m in re.finditer(b"\x01+", mask):
        a, b = offset + m.start(), offset + m.end() - 1
        parts.append(_esc(a) if a == b else f"{_esc(a)}-{_esc(b)}")
    return "".join(parts)


_CLASS_NAMES = ("C", "N", "Ll", "Alpha", "Alnum", "Lower")
_BMP_END = 0x10000


@functools.lru_cache(maxsize=None)
def _uniclass_bodies(lo: int, hi: int) -> dict[str, str]:
    """Character classes as perl 5.36 (Unicode 14) sees them, restricted to the code points ``lo .. hi - 1``, as
    regex class bodies.

    Built from :mod:`unicodedata` (Unicode 14 in Python 3.11) and the embedded Other_Alphabetic / Other_Lowercase
    tables: C, N (IsN), Ll, Alpha (IsAlpha), Alnum (IsAlnum = Alphabetic + Nd), Lower (IsLower).  The BMP part
    (6 % of the code points) is all that text without astral characters needs; the astral part is built on the
    first line that has one (0.5 s of a process's start-up otherwise).
    """
    if unicodedata.unidata_version != "14.0.0":  # pragma: no cover - pinned Python 3.11
        warnings.warn(
            f"Python's Unicode database is {unicodedata.unidata_version}, the original "
            "pipeline used Unicode 14.0.0 (perl 5.36): outputs may differ for characters "
            "assigned or re-categorised since",
            RuntimeWarning,
            stacklevel=2,
        )
    masks = {k: bytearray(hi - lo) for k in _CLASS_NAMES}
    start = 0
    for key, grp in itertools.groupby(map(unicodedata.category, map(chr, range(lo, hi)))):
        end = start + sum(1 for _ in grp)
        ones = b"\x01" * (end - start)
        first = key[0]
        if first == "C":
            masks["C"][start:end] = ones
        elif first == "N":
            masks["N"][start:end] = ones
            if key == "Nd":
                masks["Alnum"][start:end] = ones
            elif key == "Nl":
                masks["Alpha"][start:end] = ones
                masks["Alnum"][start:end] = ones
        elif first == "L":
            masks["Alpha"][start:end] = ones
            masks["Alnum"][start:end] = ones
            if key == "Ll":
                masks["Ll"][start:end] = ones
                masks["Lower"][start:end] = ones
        start = end
    for table, names in ((_OTHER_ALPHABETIC, ("Alpha", "Alnum")), (_OTHER_LOWERCASE, ("Lower",))):
        for a, b in _parse_ranges(table):
            a, b = max(a, lo) - lo, min(b, hi - 1) - lo  # the part inside lo .. hi - 1
            for name in names:
                if a <= b:
                    masks[name][a : b + 1] = b"\x01" * (b - a + 1)
    return {name: _class_body(masks[name], lo) for name in _CLASS_NAMES}


def _uniclasses() -> dict[str, str]:
    """All of :func:`_uniclass_bodies`: ``name`` (every code point), ``name + "_bmp"`` and ``name + "_astral"``."""
    bmp, astral = _uniclass_bodies(0, _BMP_END), _uniclass_bodies(_BMP_END, 0x110000)
    out = {}
    for name in _CLASS_NAMES:
        out.update({name: bmp[name] + astral[name], name + "_bmp": bmp[name], name + "_astral": astral[name]})
    return out


_ASTRAL_RANGE = "\U00010000-\U0010ffff"


class _Classes:
    """Regex fragments for the Perl classes, in two flavours with identical matches.

    ``bmp``: plain classes of the BMP part -- only valid on text without astral characters
    (the common case, fastest).  ``full``: ``[BMP part]`` or ``astral char checked by a
    look-behind`` -- valid on any text and still fast on BMP characters.
    """

    def __init__(self, full: bool):
        self.full = full
        # The BMP part always (the two flavours share it, so their BMP matches are the same); the astral part only
        # for the full flavour
        self.bmp = _uniclass_bodies(0, _BMP_END)
        self.astral = _uniclass_bodies(_BMP_END, 0x110000) if full else None

    def pos(self, names: str, extra: str = "") -> str:
        """``[\\p{A}\\p{B}extra]`` for ``names="A B"`` (``extra``: BMP class items)."""
        names_ = names.split()
        bmp = "".join(self.bmp[n] for n in names_) + extra
        if not self.full:
            return f"[{bmp}]"
        astral = "".join(self.astral[n] for n in names_)
        if not astral:
            return f"[{bmp}]"
        return f"(?:[{bmp}]|[{_ASTRAL_RANGE}](?<=[{astral}]))"

    def neg(self, names: str, extra: str = "") -> str:
        """``[^\\p{A}\\p{B}extra]``."""
        names_ = names.split()
        bmp = "".join(self.bmp[n] for n in names_) + extra
        if not self.full:
            return f"[^{bmp}]"
        astral = "".join(self.astral[n] for n in names_)
        if not astral:
            return f"[^{bmp}]"
        return f"(?:[^{bmp}{_ASTRAL_RANGE}]|[{_ASTRAL_RANGE}](?<![{astral}]))"


# --------------------------------------------------------------------------------------
# Step 1: remove-non-printing-char.perl
# --------------------------------------------------------------------------------------


_ASTRAL = re.compile(f"[{_ASTRAL_RANGE}]")


@functools.lru_cache(maxsize=None)
def _non_printing_re(full: bool) -> re.Pattern:
    """The pattern for text without astral characters (``full=False``), or for any text."""
    return re.compile(_Classes(full).pos("C"))


def remove_non_printing_chars(text: str) -> str:
    """``remove-non-printing-char.perl``: every category-C character -> one space."""
    # Fast path: str.isprintable() is False for every category C character (and for
    # Z* other than U+0020), so a printable line has nothing to replace.
    if text.isprintable():
        return text
    return _non_printing_re(not text.isascii() and _ASTRAL.search(text) is not None).sub(" ", text)


# --------------------------------------------------------------------------------------
# Step 2: normalize-punctuation.perl (RELEASE-4.0), byte semantics
# --------------------------------------------------------------------------------------

_NB = "\u00a0"  # the script's "pseudo-space" rules target U+00A0 (bytes C2 A0)
_SPACES = re.compile(" {2,}")  # s/ +/ /g  (same result, fewer no-op replacements)


def _lit(old: str, new: str) -> Callable[[str], str]:
    def f(s: str) -> str:
        return s.replace(old, new) if old in s else s

    return f


def _sub(pattern: str, repl, guard: str | None = None) -> Callable[[str], str]:
    # ``repl`` is a literal str or a function of the match.  (A str template with group
    # references would go through ``re._subx`` on every call, which costs more than the
    # substitution itself on short lines.)
    rx = re.compile(pattern)
    if guard is None:
        return lambda s: rx.sub(repl, s)
    return lambda s: rx.sub(repl, s) if guard in s else s


# Rules of normalize-punctuation.perl in script order, in blocks.  Byte semantics: \d is
# [0-9], [a-z]/i is [A-Za-z], \s is [\t\n\x0b\x0c\r ] (no Unicode digits, spaces or case
# folding); the literal multi-byte patterns are complete UTF-8 sequences, so matching them
# on code points is equivalent.  Each block has a trigger regex that matches whenever any
# rule of the block could fire; a line without a match skips the block unchanged.

# "remove extra spaces"
_NORM_BLOCK_SPACES = (
    re.compile(r"[\r()]|  | [%:;]"),
    (
        _lit("\r", ""),
        _lit("(", " ("),
        _lit(")", ") "),
        _sub(" {2,}", " ", "  "),
        _sub(r"\) ([.!:?;,])", lambda m: ")" + m[1], ") "),
        _lit("( ", "("),
        _lit(" )", ")"),
        _sub(r"([0-9]) %", lambda m: m[1] + "%", " %"),
        _lit(" :", ":"),
        _lit(" ;", ";"),
    ),
)
# "normalize unicode punctuation", "French quotes", "handle pseudo-spaces"
_NORM_BLOCK_UNICODE = (
    re.compile("[`„“”–—´‘’‚…«»" + _NB + "]|''|  "),
    (
        # -penn is off: ` -> ' and '' -> " (with spaces)
        _lit("`", "'"),
        _lit("''", ' " '),
        _lit("„", '"'),
        _lit("“", '"'),
        _lit("”", '"'),
        _lit("–", "-"),
        _lit("—", " - "),
        _sub(" {2,}", " ", "  "),
        _lit("´", "'"),
        _sub("([A-Za-z])‘([A-Za-z])", lambda m: m[1] + "'" + m[2], "‘"),
        _sub("([A-Za-z])’([A-Za-z])", lambda m: m[1] + "'" + m[2], "’"),
        # RELEASE-4.0 turns the remaining single curly/low quotes into DOUBLE quotes
        _lit("‘", '"'),
        _lit("‚", '"'),
        _lit("’", '"'),
        _lit("''", '"'),
        _lit("´´", '"'),
        _lit("…", "..."),
        # French quotes
        _lit(_NB + "«" + _NB, ' "'),
        _lit("«" + _NB, '"'),
        _lit("«", '"'),
        _lit(_NB + "»" + _NB, '" '),
        _lit(_NB + "»", '"'),
        _lit("»", '"'),
        # handle pseudo-spaces
        _lit(_NB + "%", "%"),
        _lit("nº" + _NB, "nº "),
        _lit(_NB + ":", ":"),
        _lit(_NB + "ºC", " ºC"),
        _lit(_NB + "cm", " cm"),
        _lit(_NB + "?", "?"),
        _lit(_NB + "!", "!"),
        _lit(_NB + ";", ";"),
        _lit("," + _NB, ", "),
        _sub(" {2,}", " ", "  "),
    ),
)


@functools.lru_cache(maxsize=None)
def _normalizer_blocks(lang: str) -> tuple:
    if lang == "en":
        # English "quotation," followed by comma, style
        quotes: tuple = (_sub(r'"([,.]+)', lambda m: m[1] + '"', '"'),)
    elif lang in ("cs", "cz"):
        quotes = ()  # Czech is confused
    else:
        # German/Spanish/French "quotation", followed by comma, style (all other codes)
        quotes = (
            _lit(',"', '",'),
            # "don't fix period at end of sentence" -- also fires at the end of the line,
            # because the line still ends with "\n" while the rules run
            _sub(r'(\.+)"([\t\n\x0b\x0c\r ]*[^<])', lambda m: '"' + m[1] + m[2], '."'),
        )
    sep = "," if lang in ("de", "es", "cz", "cs", "fr") else "."
    digits = _sub("([0-9])" + _NB + "([0-9])", lambda m: m[1] + sep + m[2], _NB)
    return (
        _NORM_BLOCK_SPACES,
        _NORM_BLOCK_UNICODE,
        (None, quotes + (digits,)),
    )


def _normalize(blocks: tuple, text: str) -> str:
    s = text + "\n"  # Perl's $_ still holds the line's newline while the rules run
    for trigger, ops in blocks:
        if trigger is None or trigger.search(s) is not None:
            for op in ops:
                s = op(s)
    return s[:-1] if s[-1:] == "\n" else s


def normalize_punctuation(text: str, lang: str = "en") -> str:
    """``normalize-punctuation.perl -l lang`` (RELEASE-4.0) on one line (no ``"\\n"``).

    ``lang`` is used as given (only ``en``, ``cs``/``cz`` and ``de``/``es``/``fr`` change
    the result).
    """
    return _normalize(_normalizer_blocks(lang if lang in _NORMALIZER_LANGS else _OTHER_LANG), text)


# the languages whose Moses rules differ from every other code's (normalize-punctuation.perl; tokenizer.perl, with
# the nonbreaking-prefix files): any other code gets the rules of _OTHER_LANG, so the caches below hold one entry per
# rule set, not one per code a client makes up (a server would keep them all)
_NORMALIZER_LANGS = frozenset({"en", "cs", "cz", "de", "es", "fr"})
_OTHER_LANG = "und"  # (ISO 639 "undetermined": in none of the sets)


# --------------------------------------------------------------------------------------
# Step 3: tokenizer.perl -no-escape (RELEASE-4.0)
# --------------------------------------------------------------------------------------


def _load_prefixes(lang: str) -> dict[str, int]:
    """Perl ``load_prefixes``: value 1 = always non-breaking, 2 = only before digits.

    Reproduces the Perl loader exactly: lines are only ``chomp``-ed (trailing blanks and
    ``\\r`` stay part of the entry, which then never matches), lines that are empty, ``"0"``
    or start with ``#`` are skipped, later entries overwrite earlier ones.
    """
    name = lang if lang in NONBREAKING_PREFIX_LANGS else "en"
    raw = prefix_file_bytes(name)
    text = raw.decode("utf-8", errors="replace")
    numeric = re.compile(r"(.*)[" + _PERL_WS_CLASS + r"]+(#NUMERIC_ONLY#)")
    out: dict[str, int] = {}
    for item in text.split("\n"):
        if item and item != "0" and item[0] != "#":
            m = numeric.search(item)
            if m:
                out[m.group(1)] = 2
            else:
                out[item] = 1
    return out


# Replacement functions (see _sub): faster than "\\1"-style templates in Python 3.11.
def _PAD(m: re.Match) -> str:  # " $1 "
    return " " + m[1] + " "


def _SPLIT_APOS(m: re.Match) -> str:  # "$1 ' $2"
    return m[1] + " ' " + m[2]


def _APOS_RIGHT(m: re.Match) -> str:  # "$1 '$2"  (en: split contractions right)
    return m[1] + " '" + m[2]


def _APOS_LEFT(m: re.Match) -> str:  # "$1' $2"  (fr/it/ga: split contractions left)
    return m[1] + "' " + m[2]


class _TokenizerRules:
    """The compiled regexes of tokenizer.perl for one language and one class flavour."""

    def __init__(self, lang: str, full: bool):
        c = _Classes(full)
        ws = _PERL_WS_CLASS
        # s/([^\p{IsAlnum}\s\.\'\`\,\-])/ $1 /g -- the same for every language in
        # RELEASE-4.0: the fi/sv rule that keeps word-internal colons ("USA:n", "tv:n")
        # came with mosesdecoder PR #191 (merged 2018-02-16), after the tag (2017-09-26).
        self.pad = re.compile("(" + c.neg("Alnum", ws + ".'`,\\-") + ")")
        self.comma1 = re.compile(f"({c.neg('N')})[,]")
        self.comma2 = re.compile(f"[,]({c.neg('N')})")
        self.comma3 = re.compile(f"({c.pos('N')})[,]$")
        alpha, not_alpha = c.pos("Alpha"), c.neg("Alpha")
        self.apos: tuple | None
        if lang == "en":
            # split contractions right; special case for "1990's"
            self.apos = (
                (re.compile(f"({not_alpha})[']({not_alpha})"), _SPLIT_APOS),
                (re.compile(f"({c.neg('Alpha N')})[']({alpha})"), _SPLIT_APOS),
                (re.compile(f"({alpha})[']({not_alpha})"), _SPLIT_APOS),
                (re.compile(f"({alpha})[']({alpha})"), _APOS_RIGHT),
                (re.compile(f"({c.pos('N')})[']([s])"), _APOS_RIGHT),
            )
        elif lang in ("fr", "it", "ga"):
            # split contractions left
            self.apos = (
                (re.compile(f"({not_alpha})[']({not_alpha})"), _SPLIT_APOS),
                (re.compile(f"({not_alpha})[']({alpha})"), _SPLIT_APOS),
                (re.compile(f"({alpha})[']({not_alpha})"), _SPLIT_APOS),
                (re.compile(f"({alpha})[']({alpha})"), _APOS_LEFT),
            )
        else:
            self.apos = None  # s/\'/ \' /g
        self.has_alpha = re.compile(alpha)
        self.lower_first = re.compile(c.pos("Lower"))


_WS_RUN = re.compile(f"[{_PERL_WS_CLASS}]+")
_WS_ONLY = re.compile(f"[{_PERL_WS_CLASS}]*")
_CTRL = re.compile("[\x00-\x1f]")
_DOTS1 = re.compile(r"\.([.]+)")
_DOTS2 = re.compile(r"DOTMULTI\.([^.])")
_TRAIL_APOS = re.compile(r"\.' ?$")
_DIGIT_FIRST = re.compile("[0-9]")


class _MosesTokenizer:
    """``tokenizer.perl -q -no-escape -l lang`` of Moses RELEASE-4.0, one line at a time.

    Only the RELEASE-4.0 ``tokenize`` path LASER uses is ported: no ``-a`` (aggressive
    hyphen splitting), no ``-x``, no protected patterns, no ``-penn``, no escaping.
    """

    def __init__(self, lang: str):
        self.lang = lang
        self.prefixes = _load_prefixes(lang)
        self._bmp = _TokenizerRules(lang, full=False)
        self._full: _TokenizerRules | None = None  # built on the first line with an astral character

    def _full_rules(self) -> _TokenizerRules:
        if self._full is None:
            self._full = _TokenizerRules(self.lang, full=True)
        return self._full

    def __call__(self, line: str) -> str:
        # /^\s*$/: an empty or whitespace-only line is printed unchanged
        if _WS_ONLY.fullmatch(line) is not None:
            return line
        r = self._bmp if line.isascii() or _ASTRAL.search(line) is None else self._full_rules()

        # $text = " $text "; remove ASCII junk; collapse and trim spaces
        text = _WS_RUN.sub(" ", " " + line + " ")
        text = _CTRL.sub("", text)
        text = _SPACES.sub(" ", text)
        if text[:1] == " ":
            text = text[1:]
        if text[-1:] == " ":
            text = text[:-1]

        # separate out all "other" special characters
        text = r.pad.sub(_PAD, text)

        # multi-dots stay together
        if ".." in text:
            text = _DOTS1.sub(lambda m: " DOTMULTI" + m[1], text)
        while "DOTMULTI." in text:  # (also runs on a literal "DOTMULTI." in the input)
            text = _DOTS2.sub(lambda m: "DOTDOTMULTI " + m[1], text)
            text = text.replace("DOTMULTI.", "DOTDOTMULTI")

        # separate out "," except if within numbers (5,300); "," after a number at the end
        if "," in text:
            text = r.comma1.sub(lambda m: m[1] + " , ", text)
            text = r.comma2.sub(lambda m: " , " + m[1], text)
            text = r.comma3.sub(lambda m: m[1] + " ,", text)

        # apostrophes
        if "'" in text:
            if r.apos is None:
                text = text.replace("'", " ' ")
            else:
                for rx, repl in r.apos:
                    text = rx.sub(repl, text)

        # word token method: non-breaking prefixes
        text = self._split_periods(text, r) if "." in text else text + " "

        # clean up extraneous spaces
        text = _SPACES.sub(" ", text)
        if text[:1] == " ":
            text = text[1:]
        if text[-1:] == " ":
            text = text[:-1]

        # .' at end of sentence is missed
        if ".'" in text:
            text = _TRAIL_APOS.sub(" . ' ", text, count=1)

        # restore multi-dots
        if "DOTMULTI" in text:
            while "DOTDOTMULTI" in text:
                text = text.replace("DOTDOTMULTI", "DOTMULTI.")
            text = text.replace("DOTMULTI", ".")
        return text

    def _split_periods(self, text: str, r: _TokenizerRules) -> str:
        # Perl: split(/\s/, $text) -- every single space separates, leading empty fields
        # are kept, trailing empty fields are dropped; then "$word " is appended per word.
        words = text.split(" ")
        while words and words[-1] == "":
            words.pop()
        last = len(words) - 1
        prefixes = self.prefixes
        for i, word in enumerate(words):
            if len(word) < 2 or word[-1] != ".":
                continue
            pre = word[:-1]  # /^(\S+)\.$/
            kind = prefixes.get(pre)
            if (
                ("." in pre and r.has_alpha.search(pre) is not None)
                or kind == 1
                or (i < last and r.lower_first.match(words[i + 1]) is not None)
            ):
                continue  # no change
            if kind == 2 and i < last and _DIGIT_FIRST.match(words[i + 1]) is not None:
                continue  # no change (#NUMERIC_ONLY# prefix before /^[0-9]+/)
            words[i] = pre + " ."
        return " ".join(words) + " "


@functools.lru_cache(maxsize=None)
def _tokenizer(lang: str) -> _MosesTokenizer:
    return _MosesTokenizer(lang)


def moses_tokenize(text: str, lang: str = "en") -> str:
    """``tokenizer.perl -q -no-escape -l lang`` (RELEASE-4.0) on one line.

    ``lang`` is used as given (Perl semantics: a language without a shipped prefix file
    uses the English one).
    """
    return _tokenizer(_tokenizer_rules_lang(lang))(text)


def _tokenizer_rules_lang(lang: str) -> str:
    """The code whose tokenizer rules `lang` gets: itself where it has a prefix file or its own apostrophe rules,
    otherwise _OTHER_LANG (the English prefixes and the generic rules, as every such code)."""
    return lang if lang in NONBREAKING_PREFIX_LANGS or lang in ("en", "fr", "it", "ga") else _OTHER_LANG


# --------------------------------------------------------------------------------------
# Steps 4-6: jieba, MeCab, Greek transliteration
# --------------------------------------------------------------------------------------

_lazy_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _jieba_cut() -> Callable[[str], Iterable[str]]:
    try:
        # lazy: an optional language tool (the zh extra)
        import jieba
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            'Chinese (zh) preprocessing needs jieba: pip install "hf-laser[zh]"'
        ) from e
    # jieba logs "Building prefix dict ..." at DEBUG level on first use
    jieba.setLogLevel(logging.WARNING)
    with _lazy_lock:
        jieba.initialize()
    cut = jieba.cut

    # ``python -m jieba -d``: delimiter " ", cut_all=False, HMM=True
    return lambda line: cut(line, False, True)


#: Bytes of UTF-8 that MeCab segments at a time: ``mecab -b 50000`` (LASER's call) reads lines
#: with ``istream::getline(buf, 50000)``, i.e. in pieces of at most 49 999 bytes.
MECAB_PIECE_BYTES = 49_999


def mecab_pieces(line: str, max_bytes: int = MECAB_PIECE_BYTES) -> list[str]:
    """``line`` cut into consecutive pieces of at most ``max_bytes`` UTF-8 bytes, as ``mecab -b``
    reads a long line, but never inside a character (the original cuts at the byte count).
    ``"".join(pieces) == line``; a line that fits is one piece."""
    data = line.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return [line]
    pieces, start = [], 0
    while start < len(data):
        end = min(start + max_bytes, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # a UTF-8 continuation byte: back off
            end -= 1
        pieces.append(data[start:end].decode("utf-8", "surrogatepass"))
        start = end
    return pieces


class _MeCabWakati:
    def __init__(self) -> None:
        try:
            # lazy: an optional language tool (the ja extra)
            import MeCab
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                'Japanese (ja) preprocessing needs MeCab and the IPA dictionary: '
                'pip install "hf-laser[ja]"'
            ) from e
        try:
            # lazy: an optional language tool (the ja extra)
            import ipadic
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                'Japanese (ja) preprocessing needs the IPA dictionary (the reference used '
                'mecab-ipadic 2.7.0): pip install "hf-laser[ja]"'
            ) from e
        self._tagger = MeCab.Tagger(ipadic.MECAB_ARGS + " -Owakati")
        self._lock = threading.Lock()  # a MeCab tagger is not re-entrant

    def __call__(self, line: str) -> str:
        # ``mecab -O wakati``: every token followed by " ", then "\n".  Lines made of ASCII
        # spaces give an empty line.  A line over ``-b 50000`` is segmented piece by piece
        # (see the module docstring); the pieces' outputs, without their "\n", make one line.
        out = []
        with self._lock:
            for piece in mecab_pieces(line):
                result = self._tagger.parse(piece)
                if result is None:  # not seen for pieces of this size; say what failed if it happens
                    raise RuntimeError(f"MeCab could not segment a piece of {len(piece.encode())} bytes "
                                       f"starting {piece[:40]!r}: {self._tagger.what()}")
                out.append(result[:-1] if result.endswith("\n") else result)
        return "".join(out)


@functools.lru_cache(maxsize=None)
def _mecab() -> _MeCabWakati:
    return _MeCabWakati()


@functools.lru_cache(maxsize=None)
def _greek_translit() -> Callable[[str], str]:
    try:
        # lazy: needed for Greek romanisation only
        from transliterate import get_translit_function
    except ImportError as e:  # pragma: no cover - core dependency
        raise ImportError("Greek (el) preprocessing needs: pip install transliterate") from e
    fn = get_translit_function("el")  # same as transliterate.translit(line, "el", ...)
    return lambda line: fn(line, reversed=True)


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------

_MODES = ("laser1", "laser2")


class LaserPreprocessor:
    """The LASER text pipeline for one language, up to the ``.tok`` stage.

    ``mode="laser1"`` (default): remove non-printing characters, Moses punctuation
    normalisation, Moses tokenizer (RELEASE-4.0, ``-no-escape``), jieba for ``zh``,
    MeCab wakati for ``ja``, Greek transliteration for ``el``, ``str.lower()``.

    ``mode="laser2"``: remove non-printing characters, punctuation normalisation,
    ``str.lower()`` -- the text LASER2 hands to SentencePiece.

    Example::

        >>> LaserPreprocessor("fra")("L'homme a dit « bonjour » !")
        'l\\' homme a dit " bonjour " !'
    """

    def __init__(self, lang: str = "en", *, mode: str = "laser1"):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        self.lang: str = normalize_lang(lang)
        self.mode: str = mode
        if self.lang not in KNOWN_CODES:
            _warn_unknown(self.lang)
        self._norm_blocks = _normalizer_blocks(self.lang if self.lang in _NORMALIZER_LANGS else _OTHER_LANG)
        self._tok: _MosesTokenizer | None = None
        self._post: list[Callable[[str], str]] = []
        if mode == "laser1":
            self._tok = _tokenizer(_tokenizer_rules_lang(self.lang))
            if self.lang == "zh":
                cut = _jieba_cut()
                self._post.append(lambda s: " ".join(cut(s)))
            elif self.lang == "ja":
                self._post.append(_mecab())
            elif self.lang == "el":
                self._post.append(_greek_translit())

    def __repr__(self) -> str:
        return f"LaserPreprocessor(lang={self.lang!r}, mode={self.mode!r})"

    def __reduce__(self):
        # picklable (e.g. for multiprocessing): rebuilt from (lang, mode) in the new process, with the prefix files
        # a directory's remote code registered (a flat copy has no data folder: the child must get them too)
        return (_rebuild_preprocessor, (self.lang, self.mode, registered_bundle()))

    def _process(self, text: str) -> str:
        if text[-1:] == "\n":  # chomp
            text = text[:-1]
        # 1. remove-non-printing-char.perl
        if not text.isprintable():
            text = remove_non_printing_chars(text)
        # 2. normalize-punctuation.perl -l L
        text = _normalize(self._norm_blocks, text)
        # 3. tokenizer.perl -q -no-escape -l L
        if self._tok is not None:
            text = self._tok(text)
        # 4./5./6. jieba | MeCab | transliteration
        for step in self._post:
            text = step(text)
        # 6. romanize_lc.py: str.lower()
        return text.lower()

    def __call__(self, text: str) -> str:
        """Preprocess one line; returns the ``.tok`` line without its newline."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._process(text)

    def batch(self, texts: Iterable[str]) -> list[str]:
        """Preprocess many lines (one output line per input text)."""
        if isinstance(texts, str):
            raise TypeError("batch() expects an iterable of str, not a single str")
        process = self._process
        out: list[str] = []
        append = out.append
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(
                    f"texts[{i}] must be a str, got {type(text).__name__}"
                )
            append(process(text))
        return out


def _rebuild_preprocessor(lang: str, mode: str, prefix_bundle: dict | None = None) -> LaserPreprocessor:
    if prefix_bundle is not None:
        register_bundle(prefix_bundle)
    return LaserPreprocessor(lang, mode=mode)


@functools.lru_cache(maxsize=256)
def _cached_preprocessor(lang: str, mode: str) -> LaserPreprocessor:
    return LaserPreprocessor(lang, mode=mode)


def preprocess(texts: Iterable[str] | str, lang: str = "en", mode: str = "laser1") -> list[str]:
    """Preprocess ``texts`` (an iterable of lines, or one str) with a cached
    :class:`LaserPreprocessor` for ``(lang, mode)``."""
    pre = _cached_preprocessor(normalize_lang(lang), mode)
    if isinstance(texts, str):
        return [pre(texts)]
    return pre.batch(texts)
