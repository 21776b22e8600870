"""Shared by the LASER3 tests: the fixtures of tests/fixtures/laser3 and students built from them without fairseq."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "laser3"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SPM = SHARED / "reference" / "laser2" / "laser2-ref.spm"
CVOCAB = SHARED / "reference" / "laser2" / "laser2-ref.cvocab"
TATOEBA = SHARED / "data" / "tatoeba" / "v1"


def _module(name):
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXTURE_SPEC = _module("make_fixtures")
RANDOM_STUDENT = _module("random_student")


def require_shared():
    if not (SPM.is_file() and TATOEBA.is_dir()):
        pytest.skip(f"needs ../shared (LASER2 reference SentencePiece model and Tatoeba v1): {SHARED} is absent")


def tatoeba_lines(name: str, limit: int | None = None) -> list[str]:
    return FIXTURE_SPEC.read_lines(TATOEBA / name, limit)


def fixture_sentences(per_lang: int) -> list[str]:
    return [line for lang in FIXTURE_SPEC.LANGS for line in tatoeba_lines(f"tatoeba.{lang}-eng.{lang}", per_lang)]


def full_size_checkpoint(path: Path, variant: str) -> Path:
    """The full-size random student `variant` in LASER3's file format, the same bits as the reference's."""
    cfg = argparse.Namespace(**json.loads((FIXTURES / f"{variant}.cfg.json").read_text()))
    shapes = json.loads((FIXTURES / f"{variant}.keys.json").read_text())
    state = RANDOM_STUDENT.random_student_state(shapes, FIXTURE_SPEC.VARIANTS[variant]["seed"])
    torch.save({"cfg": {"model": cfg}, "model": state}, path)
    return path


def tiny_namespace_checkpoint(path: Path, width: int = 32, **model_overrides) -> Path:
    """A two-layer transformer student of width `width` (four heads) in LASER3's file format, with the names of the
    full-size `cls` variant; `model_overrides` change its configuration."""
    cfg = argparse.Namespace(**{**json.loads((FIXTURES / "cls.cfg.json").read_text()), **model_overrides})
    shapes = [(k, s) for k, s in json.loads((FIXTURES / "cls.keys.json").read_text())]
    small = {"encoder_embed_dim": width, "encoder_ffn_embed_dim": 48, "encoder_layers": 2, "encoder_attention_heads": 4}
    vars(cfg).update({k: v for k, v in small.items() if k not in model_overrides})
    resized = []
    for name, shape in shapes:
        if name.startswith("layers.") and int(name.split(".")[1]) >= 2:
            continue
        resized.append((name, [{1024: width, 2048: 48}.get(d, d) for d in shape]))
    torch.save({"cfg": {"model": cfg}, "model": RANDOM_STUDENT.random_student_state(resized, 1)}, path)
    return path
