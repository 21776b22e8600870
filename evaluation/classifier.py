"""Training classifier heads on pre-computed LASER embeddings (the fast path: embed once, train many heads).

This is the training loop of LASER's `sent_classif.py` / `nli.py`: Adam, shuffled mini-batches, one evaluation on the
development set after every epoch, and the head with the best development accuracy kept (ties go to the later
epoch). The head is a [`~hf_laser.modeling.modeling_laser.LaserClassificationHead`], so the result drops into
`LaserForSequenceClassification.classifier` ([`save_classifier`]).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from hf_laser.modeling.configuration_laser import LaserConfig
from hf_laser.modeling.modeling_laser import LaserClassificationHead

__all__ = ["HeadTrainingResult", "head_config", "train_head", "predict", "accuracy", "save_classifier"]


@dataclass
class HeadTrainingResult:
    """The selected head and how it was selected.

    Attributes:
        head: the head of the best epoch (eval mode, CPU).
        config: its [`LaserConfig`] (encoder dimensions + classifier fields).
        best_epoch: 1-based epoch of the selected head.
        dev_accuracy: its development accuracy in percent.
        history: one `{"epoch", "loss", "dev_accuracy"}` per epoch.
    """

    head: LaserClassificationHead
    config: LaserConfig
    best_epoch: int
    dev_accuracy: float
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def head_config(encoder_config: LaserConfig, *, num_labels: int, mode: str, hidden_sizes, dropout: float,
                labels: list[str] | None = None, normalize: bool | None = None,
                activation: str = "tanh") -> LaserConfig:
    """A copy of the encoder's config with the classifier fields set (what `LaserForSequenceClassification`
    will be built from)."""
    cfg = LaserConfig.from_dict(encoder_config.to_dict())
    cfg.num_labels = num_labels
    if labels is not None:
        if len(labels) != num_labels:
            raise ValueError(f"{len(labels)} label names for {num_labels} labels")
        cfg.id2label = dict(enumerate(labels))
        cfg.label2id = {name: i for i, name in enumerate(labels)}
    cfg.classifier_mode = mode
    cfg.classifier_hidden_sizes = [int(h) for h in hidden_sizes]
    cfg.classifier_dropout = float(dropout)
    cfg.classifier_activation = activation
    if normalize is not None:
        cfg.classifier_normalize = bool(normalize)
    cfg.problem_type = "single_label_classification"
    return cfg


def _as_tensor(x) -> torch.Tensor:
    arr = np.asarray(x)
    if arr.dtype not in (np.float16, np.float32):
        arr = arr.astype(np.float32)
    return torch.from_numpy(np.array(arr))  # a writable in-memory copy (x may be a read-only memmap)


def _check_labels(y: np.ndarray, num_labels: int, what: str) -> torch.Tensor:
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{what} labels must be a 1-d array, got shape {y.shape}")
    if y.size and (y.min() < 0 or y.max() >= num_labels):
        bad = sorted(set(y[(y < 0) | (y >= num_labels)].tolist()))
        raise ValueError(f"{what} labels {bad[:10]} outside the label set [0, {num_labels})")
    return torch.from_numpy(y.astype(np.int64))


@torch.no_grad()
def predict(head: LaserClassificationHead, x, pair=None, *, batch_size: int = 4096,
            device: str | torch.device = "cpu") -> np.ndarray:
    """Predicted class per row of `x` (`(n, dim)`, + `pair` in pair mode). Accepts memmaps (read in batches)."""
    head = head.to(device).eval()
    n = len(x)
    out = np.empty(n, dtype=np.int64)
    for i in range(0, n, batch_size):
        a = torch.from_numpy(np.array(x[i:i + batch_size], dtype=np.float32)).to(device)
        b = None if pair is None else torch.from_numpy(np.array(pair[i:i + batch_size], dtype=np.float32)).to(device)
        out[i:i + batch_size] = head(a, b).argmax(dim=-1).cpu().numpy()
    return out


def accuracy(pred: np.ndarray, gold) -> float:
    """Accuracy in percent."""
    gold = np.asarray(gold)
    if len(pred) != len(gold):
        raise ValueError(f"{len(pred)} predictions for {len(gold)} labels")
    if len(gold) == 0:
        raise ValueError("accuracy of an empty set")
    return float(100.0 * (np.asarray(pred) == gold).mean())


def train_head(config: LaserConfig, train_x, train_y, dev_x, dev_y, *, train_pair=None, dev_pair=None,
               epochs: int = 100, batch_size: int = 128, lr: float = 1e-3, weight_decay: float = 0.0,
               seed: int = 0, patience: int | None = None, device: str | torch.device = "cpu",
               show_progress: bool = True, log=None) -> HeadTrainingResult:
    """Trains a [`LaserClassificationHead`] with Adam on embeddings, selecting the epoch by dev accuracy.

    Args:
        config: a config from [`head_config`] (mode, hidden sizes, dropout, `num_labels`).
        train_x, dev_x: `(n, dim)` sentence embeddings (numpy, memmaps welcome; float16 is upcast per batch).
        train_y, dev_y: `(n,)` integer labels in `[0, num_labels)`.
        train_pair, dev_pair: pair mode: the second sentences' embeddings.
        epochs, batch_size, lr, weight_decay, seed: as LASER's scripts (`--nepoch --bsize --lr --wdecay --seed`).
        patience: stop after this many epochs without dev improvement (None: run all epochs, as the paper).

    Returns:
        [`HeadTrainingResult`].
    """
    t0 = time.time()
    pair_mode = config.classifier_mode == "pair"
    if pair_mode and (train_pair is None or dev_pair is None):
        raise ValueError("pair mode needs train_pair and dev_pair")
    if not pair_mode and (train_pair is not None or dev_pair is not None):
        raise ValueError("single mode takes no pair embeddings")
    if len(train_x) == 0:
        raise ValueError("empty training set")
    if len(dev_x) == 0:
        raise ValueError("empty development set")
    for name, x, y, p in (("train", train_x, train_y, train_pair), ("dev", dev_x, dev_y, dev_pair)):
        if len(x) != len(y) or (p is not None and len(p) != len(x)):
            raise ValueError(f"{name}: {len(x)} embeddings, {len(y)} labels"
                             + (f", {len(p)} pair embeddings" if p is not None else ""))
    ytr = _check_labels(train_y, config.num_labels, "training")
    ydev = np.asarray(dev_y)
    _check_labels(ydev, config.num_labels, "development")

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    head = LaserClassificationHead(config).to(device)
    xtr = _as_tensor(train_x)
    ptr = _as_tensor(train_pair) if pair_mode else None
    optimizer = torch.optim.Adam(head.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999), eps=1e-8)
    best_acc, best_epoch, best_state, history, stale = -1.0, 0, None, [], 0
    n = len(xtr)
    bar = tqdm(range(1, epochs + 1), desc="train head", unit="epoch", disable=not show_progress, leave=False)
    for epoch in bar:
        head.train()
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            a = xtr[idx].to(device, torch.float32)
            b = ptr[idx].to(device, torch.float32) if pair_mode else None
            loss = torch.nn.functional.cross_entropy(head(a, b), ytr[idx].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        dev_acc = accuracy(predict(head, dev_x, dev_pair, device=device), ydev)
        history.append({"epoch": epoch, "loss": total / n, "dev_accuracy": round(dev_acc, 2)})
        bar.set_postfix(loss=f"{total / n:.4f}", dev=f"{dev_acc:.2f}")
        if dev_acc >= best_acc:
            best_acc, best_epoch, stale = dev_acc, epoch, 0
            best_state = copy.deepcopy(head.state_dict())
        else:
            stale += 1
            if patience is not None and stale >= patience:
                break
    bar.close()
    head.load_state_dict(best_state)
    head = head.cpu().eval()
    if log:
        log(f"  best dev accuracy {best_acc:.2f}% at epoch {best_epoch}/{len(history)} "
            f"({n} training examples, {time.time() - t0:.1f}s)")
    return HeadTrainingResult(head=head, config=config, best_epoch=best_epoch, dev_accuracy=round(best_acc, 2),
                              history=history, seconds=round(time.time() - t0, 2))


def save_classifier(model_path: str | Path, result: HeadTrainingResult, out_dir: str | Path) -> Path:
    """Saves encoder + trained head as a `LaserForSequenceClassification` directory (`from_pretrained`-able), with
    the tokenizer files of `model_path` when it has them."""
    from hf_laser.modeling.modeling_laser import LaserForSequenceClassification

    out_dir = Path(out_dir)
    model = LaserForSequenceClassification.from_pretrained(model_path, config=result.config)
    model.classifier.load_state_dict(result.head.state_dict())
    model.save_pretrained(out_dir)
    try:
        from hf_laser.text.tokenization_laser import LaserTokenizer

        LaserTokenizer.from_pretrained(model_path).save_pretrained(out_dir)
    except (OSError, ValueError, TypeError, ImportError):
        vocab = Path(model_path) / "vocab.json"
        if vocab.is_file():
            (out_dir / "vocab.json").write_bytes(vocab.read_bytes())
    return out_dir
