"""hf_laser inside OpusFilter (3.x): `LaserScoreFilter`, a filter that OpusFilter loads from its YAML configuration
through its `module:` key, and that scores each pair as `hf-laser score` does (the margin over the corpus's own
sentences, or the cosine; any LASER model or model set, each side by the member of its language):

    steps:
      - type: filter
        parameters:
          inputs: [corpus.de, corpus.en]
          outputs: [clean.de, clean.en]
          filters:
            - LaserScoreFilter:
                languages: [de, en]
                model: laser-mini            # a model directory, model set or Hub id (default: laser-mini)
                method: margin               # or cosine
                margin: ratio                # or distance
                threshold: 1.06              # kept: score >= threshold (1.06, NLLB's, is the ratio margin's default)
              module: hf_laser.integrations.opusfilter

What the margin's corpus is: in a `filter` step, the whole input (the pairs go to two temporary files, are embedded
and searched there, and the kept ones are read back: memory holds no text); in a `score` step (and in
`filterfalse`), each chunk OpusFilter hands over (`common: chunksize`, default 100,000 pairs; a chunk of fewer than
`k` pairs is scored with `k` = its size, with a warning). The scores agree with
`hf-laser score` on the same pairs (`tests/test_score_integrations.py`).

OpusFilter is imported when the class is first asked for (`pip install opusfilter`, not a dependency of hf-laser).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..encoder import LaserEncoder
from ..errors import UsageError
from ..mining.scoring import check_method, default_threshold, score_files

__all__ = ["LaserScoreFilter", "laser_score_filter_class"]

logger = logging.getLogger(__name__)

_CLASS = None


def __getattr__(name: str):
    # OpusFilter's `module:` mechanism does `getattr(import_module(module), class_name)`: the class (a subclass of
    # opusfilter.FilterABC) is made when first asked for, so that importing this module needs no OpusFilter
    if name == "LaserScoreFilter":
        return laser_score_filter_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def laser_score_filter_class():
    """The `LaserScoreFilter` class (made once; OpusFilter imported here)."""
    global _CLASS
    if _CLASS is None:
        try:
            # lazy: OpusFilter is optional (pip install opusfilter)
            import opusfilter
        except ImportError:
            raise ImportError("hf_laser.integrations.opusfilter.LaserScoreFilter needs OpusFilter: "
                              "pip install opusfilter") from None
        _CLASS = type("LaserScoreFilter", (LaserScoreMixin, opusfilter.FilterABC),
                      {"__module__": __name__, "__doc__": LaserScoreMixin.__doc__,
                       "score_direction": opusfilter.CLEAN_HIGH})
    return _CLASS


class LaserScoreMixin:
    """OpusFilter filter: the LASER score of each pair with hf_laser (see the module docstring).

    Args (the YAML's keys):
        languages: the two languages, ``[src, tgt]`` (required).
        model: model directory, model set or Hub id (default: the shipped laser-mini).
        method: ``margin`` (default) or ``cosine``.
        margin: ``ratio`` (default) or ``distance``.
        k: neighbourhood size of the margin (default 4).
        threshold: a pair is accepted when its score, rounded to 6 decimals as `hf-laser score` writes it, is
            ``>= threshold``; default 1.06 for the ratio margin (NLLB's), required otherwise.
    """

    accept_threshold = None
    reject_threshold = None

    def __init__(self, languages=None, model=None, method="margin", margin="ratio", k=4, threshold=None,
                 **kwargs):
        # lazy: OpusFilter's configuration error, imported with the class that uses it
        from opusfilter import ConfigurationError

        if not isinstance(languages, (list, tuple)) or len(languages) != 2:
            raise ConfigurationError("LaserScoreFilter needs languages: [src, tgt] (two language codes)")
        try:
            check_method(method, margin)
        except ValueError as err:
            raise ConfigurationError(f"LaserScoreFilter: {err}") from None
        self.languages, self.method, self.margin, self.k = list(languages), method, margin, int(k)
        self.threshold = default_threshold(method, margin) if threshold is None else float(threshold)
        if self.threshold is None:
            raise ConfigurationError(f"LaserScoreFilter: method {method} (margin {margin}) needs a threshold")
        super().__init__(**kwargs)
        try:
            # PyTorch, as `hf-laser score` computes: the same scores, to the last bit
            self.encoder = LaserEncoder.from_pretrained(model, engine="torch")
        except (OSError, ValueError, UsageError) as err:
            raise ConfigurationError(f"LaserScoreFilter: cannot load the model {model}: {err}") from None

    def scores_of_files(self, src: Path, tgt: Path, work: Path, n: int):
        k = self.k
        if self.method == "margin" and n < k:  # a last chunk of a score step can be this small
            logger.warning("LaserScoreFilter: a chunk of %d pairs: margin over k=%d neighbours instead of %d", n, n, k)
            k = n
        return score_files(self.encoder, src, tgt, work, src_lang=self.languages[0], tgt_lang=self.languages[1],
                           encode_kwargs={"show_progress_bar": False}, method=self.method, margin=self.margin,
                           k=k, show_progress=False)

    def score(self, pairs: Iterable) -> Iterator[float]:
        with tempfile.TemporaryDirectory(prefix="hf_laser_opusfilter_") as tmp:
            src, tgt, n = write_pairs(pairs, Path(tmp))
            if n == 0:
                return
            yield from (float(s) for s in self.scores_of_files(src, tgt, Path(tmp) / "work", n))

    def accept(self, score) -> bool:
        return float(f"{float(score):.6f}") >= self.threshold

    def _split(self, pairs: Iterable, keep: bool) -> Iterator[tuple]:
        with tempfile.TemporaryDirectory(prefix="hf_laser_opusfilter_") as tmp:
            src, tgt, n = write_pairs(pairs, Path(tmp))
            if n == 0:
                return
            scores = self.scores_of_files(src, tgt, Path(tmp) / "work", n)
            with open(src, encoding="utf-8", errors="surrogateescape", newline="\n") as fs, \
                    open(tgt, encoding="utf-8", errors="surrogateescape", newline="\n") as ft:
                for score, s, t in zip(scores, fs, ft):
                    if self.accept(score) == keep:
                        yield s[:-1], t[:-1]

    def filter(self, pairs: Iterable) -> Iterator[tuple]:
        """The accepted pairs, the margin over all of `pairs`."""
        return self._split(pairs, True)

    def filterfalse(self, pairs: Iterable) -> Iterator[tuple]:
        """The rejected pairs, the margin over all of `pairs`."""
        return self._split(pairs, False)


def write_pairs(pairs: Iterable, directory: Path) -> tuple[Path, Path, int]:
    """The pairs' two sides as two files in `directory` (a segment's own newlines become spaces: one line per
    sentence); `(src, tgt, number of pairs)`."""
    src, tgt, n = directory / "src.txt", directory / "tgt.txt", 0
    with open(src, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as fs, \
            open(tgt, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as ft:
        for pair in pairs:
            if len(pair) != 2:
                raise ValueError(f"LaserScoreFilter scores pairs: got {len(pair)} segments")
            fs.write(pair[0].replace("\n", " ") + "\n")
            ft.write(pair[1].replace("\n", " ") + "\n")
            n += 1
    return src, tgt, n
