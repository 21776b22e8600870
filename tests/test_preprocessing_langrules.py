"""Language-specific rules of the RELEASE-4.0 Moses scripts that the 100-line reference
files (``shared/reference/tatoeba``, ``edge``) do not exercise.

Every expected value below was derived from the text of the Moses RELEASE-4.0 scripts
(``remove-non-printing-char.perl | normalize-punctuation.perl -l L |
tokenizer.perl -q -no-escape -l L``, run with perl 5.36 on the shipped prefix files),
followed by LASER's ``str.lower()``.

Language-specific rules of that pipeline and where they are tested:

* normalize-punctuation.perl, quote/punctuation order: ``en`` (rule A: reference),
  ``cs``/``cz`` (no rule: here), every other code (rule B: reference);
* normalize-punctuation.perl, no-break space between digits: ``,`` for
  ``de es cz cs fr`` (de/fr: edge reference; es/cs/cz: here), ``.`` otherwise;
* tokenizer.perl, apostrophes: ``en``; ``fr``/``it``/``ga``; generic (all: reference);
* tokenizer.perl, non-breaking-prefix file (25 files, English fallback otherwise): the
  reference exercises cs de el en fr pt ru ta zh and the fallback; the other 16 files
  (ca es fi ga hu is it lt lv nl pl ro sk sl sv yue) are tested here, including their
  ``#NUMERIC_ONLY#`` entries and the entries that Perl's loader makes ineffective
  (trailing blank, CRLF line end);
* there is **no** Finnish/Swedish colon rule in RELEASE-4.0 (it came with mosesdecoder
  PR #191, merged 2018-02-16; the tag is from 2017-09-26): ``tv:n`` -> ``tv : n``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_laser.text import preprocessing as P
from hf_laser.text.preprocessing import LaserPreprocessor

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TATOEBA = SHARED / "data" / "tatoeba" / "v1"
BPE_DIR = SHARED / "reference" / "bpe"
NB = "\u00a0"

# ----------------------------------------------------------------------------------------
# fi/sv: word-internal colons are split like any other "special character"
# ----------------------------------------------------------------------------------------

# (file, 0-based line, raw text, .tok, .bpe) -- the Tatoeba v1 lines that a port with the
# later Moses fi/sv colon rule gets wrong.  In the .bpe the words "tv", ":" and "n" are
# whole vocabulary entries (as in the reference .bpe files); the other words are unchanged.
COLON_TATOEBA = [
    ("tatoeba.swe-eng.swe", 295, "Sätt på tv:n.",
     "sätt på tv : n .", "sä@@ tt på tv : n ."),
    ("tatoeba.swe-eng.swe", 296, "Går det bra om jag sätter på tv:n?",
     "går det bra om jag sätter på tv : n ?", "går det bra om jag sä@@ tter på tv : n ?"),
    ("tatoeba.swe-eng.swe", 297, "Går det bra att jag sätter på tv:n?",
     "går det bra att jag sätter på tv : n ?", "går det bra att jag sä@@ tter på tv : n ?"),
    ("tatoeba.swe-eng.swe", 298, "Stör det dig om jag sätter på tv:n?",
     "stör det dig om jag sätter på tv : n ?", "st@@ ör det dig om jag sä@@ tter på tv : n ?"),
    ("tatoeba.swe-eng.swe", 503, "Tom stängde av tv:n.",
     "tom stängde av tv : n .", "tom stä@@ ng@@ de av tv : n ."),
    ("tatoeba.fin-eng.fin", 263, "Nukuin TV:n edessä.",
     "nukuin tv : n edessä .", "n@@ uku@@ in tv : n ed@@ essä ."),
]


def _lang_of(name: str) -> str:
    return {"swe": "sv", "fin": "fi"}[name.rsplit(".", 1)[1]]


@pytest.mark.parametrize("name, idx, raw, tok, bpe", COLON_TATOEBA)
def test_fi_sv_colon_tatoeba_lines(name, idx, raw, tok, bpe):
    assert LaserPreprocessor(_lang_of(name))(raw) == tok
    path = TATOEBA / name
    if path.is_file():  # the raw text is really that line of the data set
        lines = path.read_bytes().decode("utf-8").split("\n")
        assert lines[idx] == raw


@pytest.mark.parametrize("name, idx, raw, tok, bpe", COLON_TATOEBA)
def test_fi_sv_colon_tatoeba_lines_bpe(name, idx, raw, tok, bpe):
    codes, vocab = BPE_DIR / "laser-ref.fcodes", BPE_DIR / "laser-ref.fvocab"
    if not (codes.is_file() and vocab.is_file()):
        pytest.skip(f"reference BPE codes not found at {BPE_DIR}")
    from hf_laser.text.bpe import FastBPE

    assert FastBPE(codes, vocab).apply(LaserPreprocessor(_lang_of(name))(raw)) == bpe


@pytest.mark.parametrize(
    "lang, text, expected",
    [
        ("fi", "USA:n, 20:een, EU:ssa ja S:t Eriks klo 10:30: Hei!",
         "usa : n , 20 : een , eu : ssa ja s : t eriks klo 10 : 30 : hei !"),
        ("sv", "USA:s president, S:t Eriksgatan, kl. 10:30 : Hej:Du",
         "usa : s president , s : t eriksgatan , kl. 10 : 30 : hej : du"),
        ("fi", "Hän asui USA:ssa.", "hän asui usa : ssa ."),
        # the same as any other language
        ("en", "Turn on the TV:n and USA:s.", "turn on the tv : n and usa : s ."),
    ],
)
def test_fi_sv_no_colon_rule(lang, text, expected):
    assert LaserPreprocessor(lang)(text) == expected


def test_fi_sv_tokenizer_is_the_generic_one():
    text = "USA:n EU:ssa S:t TV:n 10:30 a:b A:B"
    generic = P.moses_tokenize(text, "da")
    assert P.moses_tokenize(text, "fi") == P.moses_tokenize(text, "sv") == generic
    assert generic == "USA : n EU : ssa S : t TV : n 10 : 30 a : b A : B"


# ----------------------------------------------------------------------------------------
# normalize-punctuation.perl
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "lang, text, expected",
    [
        # cs/cz: no quote rule ("Czech is confused")
        ("cs", 'Řekl "ahoj", a pak "dobře". Konec.', 'řekl " ahoj " , a pak " dobře " . konec .'),
        ("cz", 'Řekl "ahoj", a pak "dobře". Konec.', 'řekl " ahoj " , a pak " dobře " . konec .'),
        # en: quote moves after , and .
        ("en", 'He said "hi", then "fine". End.', 'he said " hi , " then " fine . " end .'),
        # every other code: , and . move after the quote (already there: unchanged)
        ("sk", 'Povedal "ahoj", a potom "dobre". Koniec.',
         'povedal " ahoj " , a potom " dobre " . koniec .'),
        # no-break space between digits: "," for de es cz cs fr, "." otherwise
        ("es", f"Tiene 10{NB}000 habitantes.", "tiene 10,000 habitantes ."),
        ("cs", f"Má 10{NB}000 obyvatel.", "má 10,000 obyvatel ."),
        ("cz", f"Má 10{NB}000 obyvatel.", "má 10,000 obyvatel ."),
        ("fr", f"Il a 10{NB}000 habitants.", "il a 10,000 habitants ."),
        ("it", f"Ha 10{NB}000 abitanti.", "ha 10.000 abitanti ."),
        ("sv", f"Den har 10{NB}000 invånare.", "den har 10.000 invånare ."),
    ],
)
def test_normalizer_language_rules(lang, text, expected):
    assert LaserPreprocessor(lang)(text) == expected


def test_normalizer_cs_differs_from_other_languages():
    text = 'a "b", c "d". e'
    assert P.normalize_punctuation(text, "cs") == P.normalize_punctuation(text, "cz") == text
    assert P.normalize_punctuation(text, "en") == 'a "b," c "d." e'
    assert P.normalize_punctuation(text, "sk") == text  # ,"/." already after the quote
    assert P.normalize_punctuation('a "b," c "d." e', "sk") == 'a "b", c "d". e'


# ----------------------------------------------------------------------------------------
# tokenizer.perl: the non-breaking-prefix files the reference does not exercise
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "lang, text, expected",
    [
        # every RELEASE-4.0 Catalan entry ends in "\r" (CRLF file): none is effective
        ("ca", "El Dr. Puig i la Sra. Vila. Pàg. 5 i S.A. Nova",
         "el dr . puig i la sra . vila . pàg . 5 i s.a. nova"),
        # "Fil " has a trailing blank in the file: not a prefix
        ("es", "El Dr. García vive en EE.UU. Fil. Ana llegó. Prof. Ruiz",
         "el dr. garcía vive en ee.uu. fil . ana llegó . prof. ruiz"),
        # prefixes are case-sensitive: "esim" yes, "Prof"/"Dipl" no
        ("fi", "Prof. Virtanen ja esim. Matti. Hän tuli. Dipl. Insinööri",
         "prof . virtanen ja esim. matti . hän tuli . dipl . insinööri"),
        # "uimh" #NUMERIC_ONLY#: kept only before a digit
        ("ga", "Uimh. 5 agus uimh. 5 agus uimh. A. Dr. Ó Sé agus Uacht. Higgins",
         "uimh . 5 agus uimh. 5 agus uimh . a. dr. ó sé agus uacht. higgins"),
        ("hu", "Dr. Nagy jan. 5 és jan. Kovács. Prof. Kiss",
         "dr. nagy jan. 5 és jan . kovács . prof. kiss"),
        ("is", "nr. 5 og nr. A. Hann kom. Dr. Jón", "nr. 5 og nr . a. hann kom . dr . jón"),
        # "No #NUMERIC_ONLY# " (trailing blank) still is a NUMERIC_ONLY entry; "Amn " is not
        ("it", "Art. 5 e Art. B; No. 5 e No. C; Avv. Rossi, Amn. Bianchi, Ing. Verdi",
         "art. 5 e art . b ; no. 5 e no . c ; avv. rossi , amn . bianchi , ing. verdi"),
        ("lt", "Pr. Jonaitis, No. 5 ir No. A. Dr. Petras",
         "pr. jonaitis , no. 5 ir no . a. dr. petras"),
        ("lv", "Dr. Bērziņš, Nr. 5 un Nr. A. Prof. Ozols",
         "dr. bērziņš , nr. 5 un nr . a. prof. ozols"),
        ("nl", "Dr. Jansen en nr. 5, nr. B. ir. De Vries",
         "dr . jansen en nr. 5 , nr . b. ir. de vries"),
        ("pl", "Al. Jerozolimskie, nr. 5 i nr. A. Dr. Nowak, pkt. 3",
         "al. jerozolimskie , nr. 5 i nr . a. dr. nowak , pkt. 3"),
        ("ro", "Dl. Popescu, dvs. Ion. Etc. Apoi", "dl. popescu , dvs. ion . etc . apoi"),
        ("sk", "Ing. Novák, Dr. Kováč, č. 5 a Č. A. Prof. Hraško",
         "ing. novák , dr. kováč , č. 5 a č. a. prof . hraško"),
        # Slovenian CRLF file: plain entries ineffective, "št #NUMERIC_ONLY#\r" effective
        ("sl", "Dr. Novak, jan. Ana, št. 5 in št. B. Konec",
         "dr . novak , jan . ana , št. 5 in št . b . konec"),
        ("sv", "Se AB. Volvo, dvs. Anna. Kl. 5 kom G. Svensson",
         "se ab. volvo , dvs. anna . kl . 5 kom g. svensson"),
        # "cz": Czech punctuation rules, but no prefix file -> English prefixes
        ("cz", "Dr. Novák a Mr. Smith. Konec", "dr. novák a mr. smith . konec"),
    ],
)
def test_prefix_files_not_in_reference(lang, text, expected):
    assert LaserPreprocessor(lang)(text) == expected


def test_yue_prefix_file():
    # LASER maps yue -> zh, so the yue file is only reachable through moses_tokenize
    assert LaserPreprocessor("yue").lang == "zh"
    assert (P.moses_tokenize("A. B. Chan, No. 5 and No. C. Z. Wong", "yue")
            == "A. B. Chan , No. 5 and No . C. Z. Wong")
