"""Training objectives (training/objectives.py): the ranking loss, the paired encoder call, and train.py with
`training.objective: ranking` end to end on the synthetic cipher."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import REPO
from safetensors.torch import load_file
from test_training import metrics, run_train, write_cipher_corpus

from hf_laser import LaserConfig
from hf_laser.modeling.modeling_laser import LaserForPreTraining

sys.path.insert(0, str(REPO))
from training.objectives import distillation_loss, ranking_loss, training_loss, uses_decoder  # noqa: E402
from training.train import load_config  # noqa: E402


def tiny(objective: str = "translation") -> LaserForPreTraining:
    torch.manual_seed(0)
    return LaserForPreTraining(LaserConfig(
        vocab_size=40, embed_dim=8, hidden_size=6, num_layers=1, decoder_embed_dim=8, decoder_hidden_size=12,
        lang_embed_dim=4, target_languages=["en"], decoder_num_layers=1 if uses_decoder(objective) else 0))


BATCH = {"input_ids": torch.tensor([[5, 6, 7, 2], [8, 9, 2, 1], [10, 2, 1, 1]]),
         "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]),
         "labels": torch.tensor([[11, 2, -100, -100, -100], [12, 13, 14, 15, 2], [16, 17, 2, -100, -100]]),
         "target_lang_ids": torch.zeros(3, dtype=torch.long)}


def test_ranking_loss_values():
    a = torch.nn.functional.normalize(torch.randn(16, 8, generator=torch.Generator().manual_seed(0)), dim=-1)
    # identical sides: every true pair has cosine 1, the rest less; a low temperature makes the loss ~0
    assert float(ranking_loss(a, a, temperature=0.01)) < 1e-3
    # unrelated sides: about log(batch)
    b = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    assert abs(float(ranking_loss(a, b, temperature=1000.0)) - math.log(16)) < 1e-3
    # symmetric in the two sides; scale-invariant (cosine); a margin makes the true pairs harder
    torch.testing.assert_close(ranking_loss(a, b), ranking_loss(b, a))
    torch.testing.assert_close(ranking_loss(a, b), ranking_loss(3 * a, b))
    assert float(ranking_loss(a, a, margin=0.3)) > float(ranking_loss(a, a))
    # the exact formula: mean of the row and column cross-entropies of cos / temperature
    s = torch.nn.functional.normalize(b, dim=-1) @ a.T / 0.05
    t = torch.arange(16)
    expected = (torch.nn.functional.cross_entropy(s, t) + torch.nn.functional.cross_entropy(s.T, t)) / 2
    torch.testing.assert_close(ranking_loss(b, a), expected)
    with pytest.raises(ValueError, match="batch, dim"):
        ranking_loss(a, b[:4])


def test_paired_call_equals_separate_calls():
    """Both sides in one encoder call give exactly the embeddings of two separate calls."""
    model = tiny().eval()
    labels = BATCH["labels"]
    mask = labels.ne(-100)
    out = model(input_ids=BATCH["input_ids"], attention_mask=BATCH["attention_mask"],
                paired_input_ids=labels.masked_fill(~mask, 1), paired_attention_mask=mask.long())
    assert out.logits is None and out.loss is None
    alone_src = model.laser(BATCH["input_ids"], attention_mask=BATCH["attention_mask"]).pooler_output
    alone_tgt = model.laser(labels.masked_fill(~mask, 1), attention_mask=mask.long()).pooler_output
    torch.testing.assert_close(out.sentence_embedding, alone_src, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.paired_sentence_embedding, alone_tgt, rtol=0, atol=1e-6)


@pytest.mark.parametrize("objective", ["translation", "ranking", "translation+ranking"])
def test_training_loss_per_objective(objective):
    model = tiny(objective).eval()  # no dropout: the two computations below must see the same network
    assert (model.decoder is None) == (objective == "ranking")
    loss, parts = training_loss(model, BATCH, objective, temperature=0.1, translation_weight=0.5, ranking_weight=2.0)
    assert set(parts) == set(objective.split("+"))
    if objective == "translation":
        # the same number as the model's own decoder loss
        reference = model(input_ids=BATCH["input_ids"], attention_mask=BATCH["attention_mask"],
                          labels=BATCH["labels"], target_lang_ids=BATCH["target_lang_ids"]).loss
        torch.testing.assert_close(loss, reference)
    if objective == "translation+ranking":
        torch.testing.assert_close(loss.detach(), 0.5 * parts["translation"] + 2.0 * parts["ranking"])
    loss.backward()
    assert model.laser.lstm.weight_ih_l0.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="objective"):
        training_loss(model, BATCH, "contrastive")


def test_distillation_loss_with_the_teacher_on_both_sides():
    """`distillation.target_weight`: the student's embedding of the target sentence (its own tokens of it) is pulled
    to the teacher's embedding of it too, a term of that weight; 0 is LASER3's source side only."""
    model = tiny("distillation").eval()
    teacher = torch.randn(3, 12, generator=torch.Generator().manual_seed(2))  # (2 x hidden_size 6)
    batch = {**BATCH, "teacher_embedding": teacher}
    mask = BATCH["labels"].ne(-100)
    source = model.laser(BATCH["input_ids"], attention_mask=BATCH["attention_mask"]).pooler_output
    target = model.laser(BATCH["labels"].masked_fill(~mask, 1), attention_mask=mask.long()).pooler_output
    loss, parts = training_loss(model, batch, "distillation")
    assert set(parts) == {"distillation"}
    torch.testing.assert_close(loss, distillation_loss(source, teacher))
    loss, parts = training_loss(model, batch, "distillation", target_weight=0.5)
    assert set(parts) == {"distillation", "distillation_target"}
    torch.testing.assert_close(parts["distillation_target"], distillation_loss(target, teacher))
    torch.testing.assert_close(loss, distillation_loss(source, teacher) + 0.5 * distillation_loss(target, teacher))
    loss.backward()
    assert model.laser.lstm.weight_ih_l0.grad.abs().sum() > 0


def test_no_decoder_model_refuses_labels():
    with pytest.raises(ValueError, match="no decoder"):
        tiny("ranking")(input_ids=BATCH["input_ids"], labels=BATCH["labels"])


def test_config_rejects_unknown_objective(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"corpora": ["x"]}, "training": {"max_steps": 1}}))
    assert load_config(config, ["training.objective=ranking"])["training"]["objective"] == "ranking"
    with pytest.raises(ValueError, match="training.objective"):
        load_config(config, ["training.objective=decoder"])
    # the teacher-on-both-sides term belongs to distillation, and is a weight
    with pytest.raises(ValueError, match="target_weight is a term of training.objective: distillation"):
        load_config(config, ["training.objective=ranking", "distillation.target_weight=1.0"])
    with pytest.raises(ValueError, match="target_weight must be >= 0"):
        load_config(config, ["training.objective=distillation", "distillation.teacher=t", "distillation.target_weight=-1"])


@pytest.mark.slow
def test_ranking_run_learns_snapshots_and_curve(tmp_path):
    """train.py with the ranking objective: no decoder, retrieval learned, snapshots with minutes, report --curve."""
    write_cipher_corpus(tmp_path / "train", 2000, seed=0)
    write_cipher_corpus(tmp_path / "valid", 200, seed=1)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "seed": 3,
        "data": {"corpora": [str(tmp_path / "train")], "target_languages": ["en"], "max_length": 40,
                 "cache_dir": str(tmp_path / "cache")},
        "tokenizer": {"bpe_merges": 300},
        "model": {"embed_dim": 32, "hidden_size": 32, "num_layers": 1},
        "batching": {"max_tokens": 400, "num_workers": 0},
        "training": {"objective": "ranking", "max_steps": 200, "learning_rate": 0.01, "log_every": 10,
                     "eval_every": 100, "save_every": 100, "report_to": None, "snapshot_encoders": True},
        "validation": {"path": str(tmp_path / "valid")},
    }))
    out = tmp_path / "out"
    log = run_train(config, out)
    rows = metrics(out)
    valid = [r for r in rows if "valid_error" in r]
    assert valid[0]["step"] == 0 and valid[0]["valid_error_xx"] > 80
    assert valid[-1]["valid_error_xx"] < 10, valid
    assert "valid_loss" not in valid[-1]  # no decoder, no decoder loss
    assert all(r["minutes"] >= 0 for r in rows) and rows[-1]["minutes"] >= rows[0]["minutes"]
    weights = load_file(out / "checkpoints" / "step-00000200" / "model.safetensors")
    assert weights and not any(k.startswith("decoder.") for k in weights)
    assert "objective `ranking`" in (out / "final" / "README.md").read_text()
    snapshots = sorted(p.name for p in (out / "encoders").iterdir())
    assert snapshots == ["step-00000000", "step-00000100", "step-00000200"], log[-2000:]
    state = json.loads((out / "encoders" / "step-00000100" / "training_state.json").read_text())
    assert state["step"] == 100 and state["minutes"] > 0
    report = subprocess.run([sys.executable, str(REPO / "training" / "report.py"), "--run", str(out), "--curve",
                             "--tatoeba-dir", "none"], capture_output=True, text=True, cwd=REPO)
    assert report.returncode == 0, report.stderr[-3000:]
    curve = json.loads((out / "report.json").read_text())["curve"]
    assert [p["step"] for p in curve] == [0, 100, 200]
    assert curve[-1]["flores"] < curve[0]["flores"]
