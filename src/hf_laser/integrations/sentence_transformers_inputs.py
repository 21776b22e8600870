"""What the sentence-transformers modules of LASER and SONAR directories share: sentences given with their
language (`{"text": ..., "lang": ...}` items), and warnings attributed to the caller's line. Copied into every
directory beside the module that imports it (remote code), so it imports nothing of hf_laser."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import sentence_transformers
import torch

__all__ = ["PER_SENTENCE", "caller_stacklevel", "split_items"]

PER_SENTENCE = ("one language per sentence goes with the sentence: encode([{'text': sentence, 'lang': code}, ...]) "
                "(sentence-transformers reorders and batches the inputs, so a list would not stay aligned)")
# frames of these files are skipped when a warning is attributed to the caller's line
_INTERNAL = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                  for path in (__file__, torch.__file__, sentence_transformers.__file__))


def caller_stacklevel() -> int:
    """`stacklevel` for a warning issued by the caller of this function: the first frame outside these modules,
    sentence-transformers and torch."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level


def split_items(inputs: Sequence, model: str) -> tuple[list[str], list[str | None]]:
    """`(texts, langs)` of a batch of sentences (str) or `{"text": ..., "lang": ...}` items (lang None: not given)."""
    texts, langs = [], []
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            texts.append(item)
            langs.append(None)
        elif isinstance(item, dict) and "text" in item and set(item) <= {"text", "lang"}:
            if not isinstance(item["text"], str):
                raise TypeError(f"input {i}: 'text' is {type(item['text']).__name__}, expected str")
            texts.append(item["text"])
            langs.append(item.get("lang"))
        else:
            raise TypeError(f"input {i} is {type(item).__name__} {item!r:.60}: {model} takes a sentence (str) or "
                            "{'text': sentence, 'lang': code}")
    return texts, langs
