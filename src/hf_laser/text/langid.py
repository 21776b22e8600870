"""Language identification for `lang="auto"`, and the check behind the default language.

The detector is [py3langid](https://github.com/adbar/py3langid) (a maintained fork of langid.py, naive Bayes over
byte n-grams, 4.5 MB model inside its wheel, numpy only): see `benchmarks/langid_accuracy.py` and docs/languages.md for its
accuracy on Tatoeba's 112 languages and its speed. It is imported (and its model loaded, ~0.5 s) on first use only.

Detected languages are returned as the tokenizer's language codes ([`hf_laser.text.preprocessing.normalize_lang`]):
`zh` (jieba), `ja` (MeCab), `el` (romanised), the Moses languages with their prefix files and rules, and any other
language as its own code (Moses defaults, like every language without special handling).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

from .preprocessing import normalize_lang

__all__ = ["detect", "classify", "majority", "check_default_lang", "detector_version", "is_auto", "AUTO",
           "warn_at_caller", "supported_codes"]

AUTO = "auto"
DETECTOR = "py3langid"
DETECTOR_VERSION = "0.4.0"  # pinned in pyproject.toml; recorded in embedding manifests of lang="auto" runs

# py3langid labels -> tokenizer codes where `normalize_lang` alone is not right.
_LABEL_TO_CODE = {
    "no": "nb",  # Norwegian: Tatoeba and LASER use Bokmål's code
    "grc": "el",  # Ancient Greek script: romanised like Greek
    "hbo": "he",
    "gug": "gn",
    "uzs": "uz",
    "sdh": "ku",
}
# Labels never returned: "zxx" (no linguistic content) and languages that neither LASER nor its preprocessing
# know (they would only turn near-misses of known languages into "unknown language code" warnings).
_EXCLUDED_LABELS = frozenset({"zxx", "bcl", "ext", "gcf", "gcr", "gom", "guw", "pcm"})

# the default-language check: sentences classified with at least this probability count
CHECK_MIN_PROB = 0.5
CHECK_SAMPLE = 100

_lock = threading.Lock()
_identifier = None
_codes: list[str] = []


def is_auto(lang) -> bool:
    """Whether `lang` asks for detection (`"auto"`, any case)."""
    return isinstance(lang, str) and lang.strip().lower() == AUTO


def detector_version() -> str:
    """`"py3langid 0.4.0 + prior 1a2b3c4d5e6f"`: the detector behind `lang="auto"` and the language prior it is
    weighted by (part of an embedding file's identity: other labels, other embeddings)."""
    try:
        name = f"{DETECTOR} {version(DETECTOR)}"
    except Exception:  # noqa: BLE001 - not installed: say what is expected
        name = f"{DETECTOR} {DETECTOR_VERSION}"
    digest = _prior_digest()
    return name + (f" + prior {digest}" if digest else "")


@lru_cache(maxsize=1)
def _prior_digest() -> str | None:
    """The first 12 hex digits of the shipped prior file's sha256 (None without one)."""

    return hashlib.sha256(PRIOR_FILE.read_bytes()).hexdigest()[:12] if PRIOR_FILE.is_file() else None


# How often each language is written in everyday short sentences (training/langid_prior.py: distinct sentences of
# the Tatoeba pairs outside the v1 test set) and the exponent it is applied with: a short sentence gives the detector
# little evidence, and without a prior "Es regnet." was Walloon. Long sentences are unaffected in practice.
PRIOR_FILE = Path(__file__).resolve().parent / "data" / "langid_prior.tsv"
_prior_vector = None


def read_prior(path: Path = PRIOR_FILE) -> tuple[dict[str, float], float]:
    """`({code: probability}, alpha)` from a prior file (see `training/langid_prior.py`)."""
    counts, alpha = {}, 0.0
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# alpha\t"):
            alpha = float(line.split("\t")[1])
        elif line and not line.startswith("#"):
            code, count = line.split("\t")
            counts[code] = int(count)
    return prior_from_counts(counts), alpha


def prior_from_counts(counts: dict[str, int]) -> dict[str, float]:
    """Sentence counts per code → probabilities (add-one smoothed)."""
    total = sum(counts.values()) + len(counts)
    return {code: (n + 1) / total for code, n in counts.items()}


def _weights(prior: dict[str, float], alpha: float):
    """The prior as a vector over the detector's classes, raised to `alpha` (codes it lacks: its smallest value)."""
    # lazy: `import hf_laser` and `hf-laser --help` run without NumPy
    import numpy as np

    floor = min(prior.values())
    return np.array([prior.get(code, floor) for code in _codes], dtype=np.float64) ** alpha


def label_code(label: str) -> str:
    """The tokenizer code of a detector label or language code (`no` → `nb`, `cmn` → `zh`)."""

    try:
        return _LABEL_TO_CODE.get(label, normalize_lang(label))
    except ValueError:
        return label


def _load():
    global _identifier, _codes
    with _lock:
        if _identifier is None:
            try:
                # lazy: needed for lang='auto' only
                from py3langid.langid import MODEL_FILE, LanguageIdentifier
            except ImportError as err:
                raise ImportError(f'language detection (lang="auto") needs py3langid: '
                                  f'pip install "py3langid=={DETECTOR_VERSION}"') from err

            ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            ident.set_languages([label for label in ident.labels if label not in _EXCLUDED_LABELS])
            _codes = [_LABEL_TO_CODE.get(label, normalize_lang(label)) for label in ident.nb_classes]
            _identifier = ident
    return _identifier


def supported_codes() -> frozenset[str]:
    """The tokenizer codes the detector can return."""
    _identifier or _load()
    return frozenset(_codes)


def _has_letters(text: str) -> bool:
    return any(c.isalpha() for c in text)


def classify(text: str, *, prior: dict[str, float] | None = None,
             alpha: float | None = None) -> tuple[str, float] | None:
    """`(tokenizer code, probability)` of the most likely language of `text`, the detector's probabilities weighted
    by the language prior (the shipped one unless `prior` / `alpha` are given; `alpha=0`: none); None for text
    without letters."""
    global _prior_vector
    if not isinstance(text, str):
        raise TypeError(f"text is {type(text).__name__}, expected str")
    if not _has_letters(text):
        return None
    ident = _identifier or _load()
    scores = ident._decide(text)
    if alpha == 0:
        weights = False
    elif prior is not None:
        weights = _weights(prior, 1.0 if alpha is None else alpha)
    else:
        if _prior_vector is None:
            _prior_vector = _weights(*read_prior()) if PRIOR_FILE.is_file() else False
        weights = _prior_vector
    if weights is not False:
        scores = scores * weights
        scores = scores / scores.sum()
    i = int(scores.argmax())
    return _codes[i], float(scores[i])


def detect(texts: Iterable[str], default: str = "en") -> list[str]:
    """The tokenizer language code of every text (`default` for texts without letters: empty lines, numbers)."""
    out = []
    for text in texts:
        r = classify(text)
        out.append(default if r is None else r[0])
    return out


def sample(texts: Sequence[str], k: int = CHECK_SAMPLE) -> list[str]:
    """At most `k` texts spread evenly over `texts` (all of them when there are fewer)."""
    n = len(texts)
    if n <= k:
        return list(texts)
    return [texts[i * n // k] for i in range(k)]


def majority(texts: Sequence[str], min_prob: float = CHECK_MIN_PROB) -> tuple[str, int, int] | None:
    """`(code, count, counted)`: the language of most of `texts` among those classified with probability >=
    `min_prob` (`counted` of them), when it holds more than half of them; None otherwise."""
    votes = Counter()
    for text in texts:
        r = classify(text)
        if r is not None and r[1] >= min_prob:
            votes[r[0]] += 1
    counted = sum(votes.values())
    if not counted:
        return None
    code, count = votes.most_common(1)[0]
    return (code, count, counted) if 2 * count > counted else None


# -------------------------------------------------------------------------------- warnings at the user's line
# hf_laser's root (this file is in its `text/`), or the folder of a directory's remote code (a flat copy)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)) if __name__.startswith("hf_laser.")
                               else os.path.abspath(__file__)) + os.sep


def _internal_dirs() -> tuple[str, ...]:
    tf = sys.modules.get("transformers")
    tf_file = getattr(tf, "__file__", None) if tf is not None else None
    return (_PACKAGE_DIR, os.path.dirname(os.path.abspath(tf_file)) + os.sep) if tf_file else (_PACKAGE_DIR,)


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn` attributed to the first frame outside hf_laser and transformers (the user's call), like
    Python 3.12's `skip_file_prefixes`."""
    internal = _internal_dirs()
    frame, level = sys._getframe(0), 1
    while frame is not None and (frame.f_code.co_filename.startswith(internal)
                                 or frame.f_code.co_filename.startswith("<frozen ")):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def check_default_lang(texts: Sequence[str], used: str, *, what: str = "lang") -> str | None:
    """The check behind `lang=None`: detects the language of (a sample of) `texts` and warns, at the user's line,
    when most of them are confidently in another language than `used`. Returns the detected majority code."""

    texts = sample(texts)
    if not any(isinstance(t, str) and _has_letters(t) for t in texts):
        return None
    try:
        found = majority([t for t in texts if isinstance(t, str)])
    except ImportError:  # no detector installed: nothing to check against
        return None
    if found is None:
        return None
    code, count, counted = found
    if code != normalize_lang(used):
        warn_at_caller(
            f"no {what} given: the text was preprocessed as {used!r} (the default), but it looks like {code!r} "
            f"({count} of {counted} sentences checked); pass {what}={code!r} (or {what}='auto' to detect the "
            f"language of every sentence, or {what}={used!r} to silence this)")
    return code
