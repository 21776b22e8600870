"""Small LASER3 students against the ORIGINAL code's output: fairseq's other activations (gelu_accurate, gelu_fast,
tanh, relu_squared, linear, gelu), a checkpoint trained with quant noise (`quant_noise_pq > 0`, so a
`quant_noise.weight`), and sinusoidal positions on lines far longer than max_source_positions.

The embeddings in tests/fixtures/laser3/tiny-*.npy were written by `make_fixtures.py --small-only` there, with fairseq
(`fairseq-fixed`) building each student and laser_encoders' `SentenceEncoder` embedding it (see the README there).
The checkpoints themselves (1 MB each, nearly all embedding table) are not kept: each is rebuilt here, in LASER3's
file format and without fairseq, from its configuration, its names and shapes and its seed, and its state's SHA-256
is checked against the one the reference embedded. Each is converted with `hf-laser convert`. The six activation
students share their weights, so their fixtures show that the tolerance tells the activations apart.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pytest
import torch

from hf_laser import LaserEncoder
from hf_laser.cli import main as cli_main

from laser3_helpers import CVOCAB, FIXTURE_SPEC, FIXTURES, SPM, require_shared, tatoeba_lines

INDEX = json.loads((FIXTURES / "tiny-students.json").read_text())


def small_student(path, variant):
    """The small student `variant` in LASER3's file format, the same bits as the one the reference embedded."""
    cfg = argparse.Namespace(**json.loads((FIXTURES / f"{variant}.cfg.json").read_text()))
    shapes = json.loads((FIXTURES / f"{variant}.keys.json").read_text())
    seed = FIXTURE_SPEC.SMALL_VARIANTS[variant]["seed"]
    assert seed == INDEX[variant]["seed"]
    state = FIXTURE_SPEC.small_student_state(shapes, seed)
    assert FIXTURE_SPEC.state_sha256(state) == INDEX[variant]["state_sha256"]
    torch.save({"cfg": {"model": cfg}, "model": state}, path)
    return path


def converted(tmp_path, variant):
    ckpt = small_student(tmp_path / f"{variant}.pt", variant)
    out = tmp_path / variant
    assert cli_main(["convert", str(ckpt), str(out), "--spm-model", str(SPM), "--spm-vocab", str(CVOCAB)]) == 0
    return out


def reference_sentences(variant):
    return FIXTURE_SPEC.small_sentences(variant, tatoeba_lines)


def test_the_small_students_are_the_scripts():
    assert set(INDEX) == set(FIXTURE_SPEC.SMALL_VARIANTS)
    for variant in INDEX:
        assert np.load(FIXTURES / f"{variant}.npy").dtype == np.float32


def test_the_activation_fixtures_tell_the_activations_apart():
    """Same weights, another activation: the original's embeddings differ by far more than the 1e-5 compared (gelu
    from gelu_accurate by ~3e-4), except gelu_fast, which fairseq 0.12 maps to gelu_accurate."""
    fns = FIXTURE_SPEC.ACTIVATION_FNS
    assert len({INDEX[f"tiny-{fn}"]["state_sha256"] for fn in fns}) == 1
    emb = {fn: np.load(FIXTURES / f"tiny-{fn}.npy") for fn in fns}
    for i, a in enumerate(fns):
        for b in fns[i + 1:]:
            gap = float(np.abs(emb[a] - emb[b]).max())
            assert gap == 0 if {a, b} == {"gelu_fast", "gelu_accurate"} else gap > 1e-4, (a, b, gap)


@pytest.mark.parametrize("activation", ["gelu_accurate", "gelu_fast", "tanh", "relu_squared", "linear", "gelu"])
def test_fairseqs_activations_embed_as_the_original(tmp_path, activation):
    require_shared()
    variant = f"tiny-{activation}"
    out = converted(tmp_path, variant)
    config = json.loads((out / "config.json").read_text())
    assert (config["activation_function"], config["pooling"], config["prepend_bos"]) == (activation, "cls", True)
    emb = LaserEncoder.from_pretrained(out).encode(reference_sentences(variant), lang="en")
    reference = np.load(FIXTURES / f"{variant}.npy")
    assert emb.shape == reference.shape == (48, 32)
    assert float(np.abs(emb - reference).max()) <= 1e-5


def test_a_quant_noise_checkpoint_embeds_as_the_original(tmp_path):
    require_shared()
    variant = "tiny-quant-noise"
    keys = [k for k, _ in json.loads((FIXTURES / f"{variant}.keys.json").read_text())]
    assert "quant_noise.weight" in keys  # fairseq's TransformerEncoder made it: quant_noise_pq 0.1, block size 16
    out = converted(tmp_path, variant)
    encoder = LaserEncoder.from_pretrained(out)
    assert encoder.model.quant_noise is not None
    emb = encoder.encode(reference_sentences(variant), lang="en")
    reference = np.load(FIXTURES / f"{variant}.npy")
    assert emb.shape == reference.shape == (48, 64)
    assert float(np.abs(emb - reference).max()) <= 1e-5


def test_sinusoidal_positions_past_max_source_positions_embed_as_the_original(tmp_path):
    """max_source_positions 16, lines of up to 741 tokens: fairseq grows its sinusoidal table and laser_encoders
    cuts nothing; with max_sentence_tokens=None hf_laser cuts nothing either."""
    require_shared()
    variant = "tiny-long-sinusoidal"
    out = converted(tmp_path, variant)
    config = json.loads((out / "config.json").read_text())
    assert (config["position_embedding_type"], config["max_positions"]) == ("sinusoidal", 16)
    encoder = LaserEncoder.from_pretrained(out)
    sentences = reference_sentences(variant)
    lengths = [len(ids) for ids in encoder.token_ids(sentences, lang="en")]
    assert max(lengths) == INDEX[variant]["max_tokens"] and sum(n > 16 for n in lengths) >= 18
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing cut, nothing warned
        emb = encoder.encode(sentences, lang="en", max_sentence_tokens=None)
    reference = np.load(FIXTURES / f"{variant}.npy")
    assert emb.shape == reference.shape == (66, 32)
    assert float(np.abs(emb - reference).max()) <= 1e-5
