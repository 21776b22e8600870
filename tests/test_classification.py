"""LaserForSequenceClassification / LaserClassificationHead and the fast-path head training of evaluation/."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO))  # the evaluation/ package lives next to src/

from hf_laser import LaserConfig  # noqa: E402
from hf_laser.modeling.modeling_laser import (  # noqa: E402
    LaserClassificationCollator,
    LaserClassificationHead,
    LaserForSequenceClassification,
    LaserModel,
)


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    """Tiny models gain nothing from threads, and oversubscribed OpenMP threads (pytest -n 2 on a shared machine)
    make each small LSTM call up to 100x slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_config(**kw) -> LaserConfig:
    base = dict(vocab_size=40, embed_dim=8, hidden_size=6, num_layers=2, dropout=0.3, num_labels=3)
    base.update(kw)
    return LaserConfig(**base)


def random_ids(n: int, length: int, seed: int, vocab: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (n, length), generator=g)
    ids[:, -1] = 2  # </s>
    return ids


def test_head_architecture_follows_laser_classifier():
    cfg = tiny_config(classifier_mode="pair", classifier_hidden_sizes=[512, 384], classifier_dropout=0.3)
    head = LaserClassificationHead(cfg)
    kinds = [type(m).__name__ for m in head.mlp]
    assert kinds == ["Dropout", "Linear", "Tanh", "Dropout", "Linear", "Tanh", "Dropout", "Linear"]
    assert head.mlp[1].in_features == 4 * cfg.embedding_dim and head.mlp[-1].out_features == 3
    assert head.normalize  # pair mode normalises like LASER's nli.py
    single = LaserClassificationHead(tiny_config(classifier_hidden_sizes=[10], num_labels=4))
    assert [m.out_features for m in single.mlp if isinstance(m, torch.nn.Linear)] == [10, 4]
    assert not single.normalize
    relu = LaserClassificationHead(tiny_config(classifier_hidden_sizes=[5], classifier_activation="relu"))
    assert isinstance(relu.mlp[2], torch.nn.ReLU)
    with pytest.raises(ValueError, match="classifier_activation"):
        LaserClassificationHead(tiny_config(classifier_activation="gelu"))


def test_pair_features_are_p_h_product_absdiff():
    cfg = tiny_config(classifier_mode="pair")
    head = LaserClassificationHead(cfg)
    p, h = torch.randn(5, 12), torch.randn(5, 12)
    f = head.features(p, h)
    pn, hn = torch.nn.functional.normalize(p, dim=-1), torch.nn.functional.normalize(h, dim=-1)
    torch.testing.assert_close(f, torch.cat([pn, hn, pn * hn, (pn - hn).abs()], dim=-1))
    with pytest.raises(ValueError, match="second sentence"):
        head.features(p)
    with pytest.raises(ValueError, match="shape"):
        head.features(p, h[:3])
    with pytest.raises(ValueError, match=r"\(batch, 12\)"):
        head.features(torch.randn(5, 7), h)


def test_frozen_encoder_gets_no_gradient_and_stays_in_eval_mode():
    torch.manual_seed(0)
    model = LaserForSequenceClassification(tiny_config(classifier_mode="single"))
    model.train()
    assert model.training and not model.laser.training  # no encoder dropout while the head trains
    ids = random_ids(4, 6, 0)
    out = model(input_ids=ids, labels=torch.tensor([0, 1, 2, 1]))
    out.loss.backward()
    assert all(p.grad is None for p in model.laser.parameters())
    assert all(p.grad is not None for p in model.classifier.parameters())
    # frozen + eval encoder: the embedding is deterministic even in train mode
    e1, e2 = model.embed(ids), model.embed(ids)
    torch.testing.assert_close(e1, e2)

    model.zero_grad()
    model.set_encoder_frozen(False)
    model.train()
    assert model.laser.training and model.config.freeze_encoder is False
    model(input_ids=ids, labels=torch.tensor([0, 1, 2, 1])).loss.backward()
    assert model.laser.embed_tokens.weight.grad is not None


def test_token_path_equals_embedding_fast_path():
    torch.manual_seed(1)
    model = LaserForSequenceClassification(tiny_config(classifier_mode="pair")).eval()
    prem, hyp = random_ids(3, 7, 1), random_ids(3, 4, 2)
    # left padding on the premises: any padding side works
    prem_mask = torch.ones_like(prem)
    prem[0, :2], prem_mask[0, :2] = 1, 0
    logits = model(input_ids=prem, attention_mask=prem_mask, pair_input_ids=hyp).logits
    p = model.laser(prem, attention_mask=prem_mask).pooler_output
    h = model.laser(hyp).pooler_output
    fast = model(sentence_embeddings=p, pair_embeddings=h).logits
    torch.testing.assert_close(logits, fast)
    assert logits.shape == (3, 3)
    # tuple output convention
    loss, tuple_logits = model(sentence_embeddings=p, pair_embeddings=h, labels=torch.tensor([0, 1, 2]),
                               return_dict=False)
    torch.testing.assert_close(tuple_logits, fast)
    assert loss.ndim == 0


def test_bad_inputs_raise_clear_errors():
    model = LaserForSequenceClassification(tiny_config(classifier_mode="pair")).eval()
    e = torch.randn(2, 12)
    with pytest.raises(ValueError, match="input_ids or sentence_embeddings"):
        model(pair_embeddings=e)
    with pytest.raises(ValueError, match="not both"):
        model(input_ids=random_ids(2, 3, 0), sentence_embeddings=e, pair_embeddings=e)
    with pytest.raises(ValueError, match="pair"):
        model(sentence_embeddings=e)
    with pytest.raises(ValueError, match=r"labels \[3\] outside the label set \[0, 3\)"):
        model(sentence_embeddings=e, pair_embeddings=e, labels=torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="2 labels for a batch of"):
        model(sentence_embeddings=torch.randn(3, 12), pair_embeddings=torch.randn(3, 12), labels=torch.tensor([0, 1]))
    # -100 is ignored, as everywhere in transformers
    out = model(sentence_embeddings=e, pair_embeddings=e, labels=torch.tensor([1, -100]))
    assert torch.isfinite(out.loss)


def test_save_load_and_auto_class(tmp_path):
    from transformers import AutoModelForSequenceClassification

    # the registration hf_laser/__init__.py performs (repeated here: idempotent)
    AutoModelForSequenceClassification.register(LaserConfig, LaserForSequenceClassification, exist_ok=True)
    torch.manual_seed(2)
    cfg = tiny_config(classifier_mode="pair", classifier_hidden_sizes=[16], id2label={0: "e", 1: "n", 2: "c"},
                      label2id={"e": 0, "n": 1, "c": 2})
    model = LaserForSequenceClassification(cfg).eval()
    model.save_pretrained(tmp_path / "m")
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m")
    assert type(loaded) is LaserForSequenceClassification
    assert loaded.config.classifier_mode == "pair" and loaded.config.id2label[2] == "c"
    ids = random_ids(2, 5, 3)
    torch.testing.assert_close(loaded(input_ids=ids, pair_input_ids=ids.flip(0)).logits,
                               model(input_ids=ids, pair_input_ids=ids.flip(0)).logits)
    assert all(not p.requires_grad for p in loaded.laser.parameters())


def test_from_converted_encoder_keeps_encoder_weights(tiny_dictionary_dir):
    base = LaserModel.from_pretrained(tiny_dictionary_dir)
    model = LaserForSequenceClassification.from_pretrained(
        tiny_dictionary_dir, num_labels=4, classifier_hidden_sizes=[10], classifier_mode="single")
    for name, tensor in base.state_dict().items():
        assert torch.equal(model.laser.state_dict()[name], tensor), name
    w = model.classifier.mlp[1].weight
    bound = 1 / w.shape[1] ** 0.5  # PyTorch's default nn.Linear init, as LASER's classifier
    assert w.abs().max() <= bound and w.std() > bound / 4


def _separable(n, dim, num_labels, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_labels, dim)) * 3
    y = rng.integers(0, num_labels, n)
    x = centers[y] + rng.normal(size=(n, dim))
    return x.astype(np.float32), y


def test_trainer_on_precomputed_embeddings(tmp_path):
    datasets = pytest.importorskip("datasets")
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(3)
    x, y = _separable(192, 12, 3, 0)
    model = LaserForSequenceClassification(tiny_config(classifier_mode="single", classifier_hidden_sizes=[16],
                                                       classifier_dropout=0.0))
    train = datasets.Dataset.from_dict({"sentence_embeddings": x.tolist(), "labels": y.tolist()})
    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=8, per_device_train_batch_size=16,
                             learning_rate=1e-2, report_to=[], save_strategy="no", logging_strategy="no",
                             use_cpu=True, disable_tqdm=True)
    before = [p.detach().clone() for p in model.laser.parameters()]
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=train)
    trainer.train()
    pred = trainer.predict(train)
    acc = (pred.predictions.argmax(-1) == y).mean()
    assert acc > 0.9, acc
    assert pred.metrics["test_loss"] < 0.5
    assert all(torch.equal(a, b) for a, b in zip(before, model.laser.parameters()))


def test_collator_pads_pairs_on_either_side():
    feats = [{"input_ids": [5, 6, 2], "pair_input_ids": [7, 2], "label": 1, "extra": "dropped"},
             {"input_ids": [8, 2], "pair_input_ids": [9, 10, 11, 2], "label": 0, "extra": "dropped"}]
    b = LaserClassificationCollator()(feats)
    assert set(b) == {"input_ids", "attention_mask", "pair_input_ids", "pair_attention_mask", "labels"}
    assert b["input_ids"].tolist() == [[5, 6, 2], [8, 2, 1]] and b["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert b["pair_input_ids"].tolist() == [[7, 2, 1, 1], [9, 10, 11, 2]] and b["labels"].tolist() == [1, 0]
    left = LaserClassificationCollator(left_pad=True)(feats)
    assert left["input_ids"].tolist() == [[5, 6, 2], [1, 8, 2]]
    model = LaserForSequenceClassification(tiny_config(classifier_mode="pair")).eval()
    torch.testing.assert_close(model(**b).logits, model(**left).logits)  # padding side does not matter
    with pytest.raises(ValueError, match="example 0 has no token"):
        LaserClassificationCollator()([{"input_ids": []}])


def test_trainer_on_token_ids_pair_mode(tmp_path):
    datasets = pytest.importorskip("datasets")
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(5)
    g = torch.Generator().manual_seed(7)
    rows = {"input_ids": [], "pair_input_ids": [], "labels": []}
    for i in range(64):
        prem = torch.randint(4, 40, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist() + [2]
        other = torch.randint(4, 40, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist() + [2]
        rows["input_ids"].append(prem)
        rows["pair_input_ids"].append(prem if i % 2 else other)  # label 1: hypothesis == premise
        rows["labels"].append(i % 2)
    train = datasets.Dataset.from_dict(rows)
    model = LaserForSequenceClassification(tiny_config(init_range=1.0, classifier_mode="pair", num_labels=2,
                                                       classifier_hidden_sizes=[32], classifier_dropout=0.0))
    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=10, per_device_train_batch_size=16,
                             learning_rate=1e-2, report_to=[], save_strategy="no", logging_strategy="no",
                             use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=LaserClassificationCollator())
    trainer.train()
    pred = trainer.predict(train)
    assert (pred.predictions.argmax(-1) == np.array(rows["labels"])).mean() > 0.9


def test_plain_loop_on_token_ids_pair_mode():
    torch.manual_seed(4)
    # init_range=1: a random tiny encoder with the default U(-0.1, 0.1) maps every sentence to almost the same vector
    model = LaserForSequenceClassification(tiny_config(init_range=1.0, classifier_mode="pair", num_labels=2,
                                                       classifier_hidden_sizes=[32], classifier_dropout=0.0))
    prem = random_ids(32, 6, 5)
    other = random_ids(32, 6, 6)
    labels = torch.arange(32) % 2
    hyp = torch.where(labels[:, None].bool(), prem, other)  # label 1: hypothesis == premise
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    losses = []
    for _ in range(40):
        loss = model(input_ids=prem, pair_input_ids=hyp, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    model.eval()
    assert (model(input_ids=prem, pair_input_ids=hyp).logits.argmax(-1) == labels).all()


def test_train_head_fast_path_selects_best_dev_epoch_and_loads_into_model(tmp_path, tiny_dictionary_dir):
    from evaluation.classifier import head_config, predict, save_classifier, train_head

    base = LaserModel.from_pretrained(tiny_dictionary_dir)
    dim = base.config.embedding_dim
    x, y = _separable(300, dim, 4, 1)
    dx, dy = _separable(80, dim, 4, 1)  # same centres (same seed), fresh noise below
    dx = dx + np.random.default_rng(9).normal(size=dx.shape).astype(np.float32) * 0.1
    cfg = head_config(base.config, num_labels=4, mode="single", hidden_sizes=[10], dropout=0.2,
                      labels=["CCAT", "ECAT", "GCAT", "MCAT"])
    res = train_head(cfg, x, y, dx, dy, epochs=6, batch_size=12, lr=1e-3, seed=1, show_progress=False)
    assert len(res.history) == 6
    best = max(h["dev_accuracy"] for h in res.history)
    assert res.dev_accuracy == best and res.history[res.best_epoch - 1]["dev_accuracy"] == best
    assert all(h["dev_accuracy"] < best for h in res.history[res.best_epoch:])  # ties go to the later epoch
    assert best > 90
    pred = predict(res.head, dx)
    assert round(100 * (pred == dy).mean(), 2) == res.dev_accuracy

    with pytest.raises(ValueError, match=r"training labels \[7\] outside the label set \[0, 4\)"):
        train_head(cfg, x, np.where(y == 0, 7, y), dx, dy, epochs=1, show_progress=False)
    with pytest.raises(ValueError, match="empty training set"):
        train_head(cfg, x[:0], y[:0], dx, dy, epochs=1, show_progress=False)

    out = save_classifier(tiny_dictionary_dir, res, tmp_path / "clf")
    model = LaserForSequenceClassification.from_pretrained(out).eval()
    assert model.config.id2label[1] == "ECAT" and model.config.classifier_hidden_sizes == [10]
    logits = model(sentence_embeddings=torch.from_numpy(dx)).logits
    assert (logits.argmax(-1).numpy() == pred).all()
    assert (out / "vocab.json").is_file()
