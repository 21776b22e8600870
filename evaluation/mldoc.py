"""MLDoc zero-shot document classification (Artetxe & Schwenk 2019, Table 3; Schwenk & Li 2018).

A classifier (MLP with one hidden layer of 10 units, Adam) is trained on English documents (1k, 2k, 5k or 10k
training sets), the epoch is selected on the English development set, and the selected head is applied to the test
set of the 8 languages. A document's vector is the mean of the LASER embeddings of its sentences (split after every
`.` token, as LASER's `SplitLines`/`JoinEmbed`).

Data:
- local, the files MLDoc's `generate_documents.py` writes: `{language}.train.{1000,2000,5000,10000}`,
  `{language}.dev`, `{language}.test` (`english`, `german`, `french`, `spanish`, `italian`, `japanese`, `russian`,
  `chinese`), one document per line, `LABEL<TAB>TEXT`, LABEL in CCAT/ECAT/GCAT/MCAT. Texts written as a Python
  bytes literal (`b'...'`, what that script produces under Python 3) are decoded.
- Hub (through `datasets`): any dataset with one config per language code and `text`/`label` columns
  ([`load_mldoc_hub`]).
"""

from __future__ import annotations

import ast
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hf_laser.encoder import read_lines

from .classifier import accuracy, head_config, predict, train_head

__all__ = ["MLDOC_LANGS", "LABELS", "TRAIN_SIZES", "PAPER_DEFAULTS", "read_mldoc_file", "mldoc_path",
           "load_mldoc_local", "load_mldoc_hub", "evaluate_mldoc", "size_key"]

MLDOC_LANGS = {"en": "english", "de": "german", "es": "spanish", "fr": "french", "it": "italian", "ja": "japanese",
               "ru": "russian", "zh": "chinese"}
LABELS = ("CCAT", "ECAT", "GCAT", "MCAT")
TRAIN_SIZES = (1000, 2000, 5000, 10000)
# LASER's tasks/mldoc/mldoc.sh, with the paper's single hidden layer of 10 units
PAPER_DEFAULTS = {"hidden_sizes": (10,), "dropout": 0.2, "epochs": 500, "batch_size": 12, "lr": 1e-3, "seed": 1}


def size_key(size: int) -> str:
    """`1000` → `"1k"` (the metric suffix in results.json)."""
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def _decode_text(text: str) -> str:
    if len(text) >= 3 and text[0] == "b" and text[1] in "'\"" and text[-1] == text[1]:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
    return text


def read_mldoc_file(path: str | Path):
    """One MLDoc file → `datasets.Dataset(text, label)`; errors name the file and line."""
    import datasets

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"MLDoc file not found: {path}")
    label_id = {name: i for i, name in enumerate(LABELS)}
    texts, labels = [], []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            raise ValueError(f"{path}:{lineno}: empty line (expected LABEL<TAB>TEXT)")
        label, sep, text = line.partition("\t")
        if not sep:
            raise ValueError(f"{path}:{lineno}: no tab (expected LABEL<TAB>TEXT)")
        if label not in label_id:
            raise ValueError(f"{path}:{lineno}: label {label!r} is not one of {list(LABELS)}")
        texts.append(_decode_text(text))
        labels.append(label_id[label])
    if not texts:
        raise ValueError(f"{path}: empty split (no documents)")
    return datasets.Dataset.from_dict({"text": texts, "label": labels})


def mldoc_path(folder: str | Path, lang: str, split: str) -> Path:
    """`folder/{language}.{split}` (`split`: `train.1000`, ..., `dev`, `test`)."""
    if lang not in MLDOC_LANGS:
        raise ValueError(f"not an MLDoc language: {lang!r} (MLDoc has {list(MLDOC_LANGS)})")
    return Path(folder) / f"{MLDOC_LANGS[lang]}.{split}"


def load_mldoc_local(folder: str | Path, lang: str, split: str):
    return read_mldoc_file(mldoc_path(folder, lang, split))


def load_mldoc_hub(repo_id: str, lang: str, split: str, *, config: str = "{lang}", text_column: str = "text",
                   label_column: str = "label", revision: str | None = None):
    """MLDoc from a Hub dataset (config per language code; `train.1000` → split `train_1000` unless the dataset has
    `train.1000`); string labels are mapped to [`LABELS`], integer labels must lie in `[0, 4)`."""
    import datasets

    name = config.format(lang=lang)
    splits = datasets.get_dataset_split_names(repo_id, name, revision=revision)
    hub_split = split if split in splits else split.replace(".", "_")
    if hub_split not in splits:
        raise ValueError(f"{repo_id} [{name}] has no split {split!r} (splits: {splits})")
    ds = datasets.load_dataset(repo_id, name, split=hub_split, revision=revision)
    for col in (text_column, label_column):
        if col not in ds.column_names:
            raise ValueError(f"{repo_id} [{name}/{hub_split}] has no column {col!r} (columns: {ds.column_names})")
    raw = ds[label_column]
    feature = ds.features[label_column]
    if hasattr(feature, "names"):
        raw = [feature.names[i] for i in raw]
    labels = []
    for i, v in enumerate(raw):
        if isinstance(v, str):
            if v not in LABELS:
                raise ValueError(f"{repo_id} [{name}/{hub_split}] row {i}: label {v!r} not in {list(LABELS)}")
            labels.append(LABELS.index(v))
        else:
            if not 0 <= int(v) < len(LABELS):
                raise ValueError(f"{repo_id} [{name}/{hub_split}] row {i}: label {v!r} outside [0, {len(LABELS)})")
            labels.append(int(v))
    if not labels:
        raise ValueError(f"{repo_id} [{name}/{hub_split}] is empty")
    return datasets.Dataset.from_dict({"text": ds[text_column], "label": labels})


def evaluate_mldoc(cache, *, folder: str | Path | None = None, hub_repo: str | None = None,
                   hub_kwargs: dict | None = None, langs: Sequence[str] | None = None,
                   train_sizes: Sequence[int] | None = None, hidden_sizes=PAPER_DEFAULTS["hidden_sizes"],
                   dropout: float = PAPER_DEFAULTS["dropout"], epochs: int = PAPER_DEFAULTS["epochs"],
                   batch_size: int = PAPER_DEFAULTS["batch_size"], lr: float = PAPER_DEFAULTS["lr"],
                   seed: int = PAPER_DEFAULTS["seed"], patience: int | None = None, pretokenized: bool = False,
                   device: str = "cpu", show_progress: bool = True, log=print) -> dict:
    """Trains one head per English training size, selects on English dev, tests every language.

    Args:
        train_sizes: default: every size whose `english.train.N` file exists locally (all four on the Hub);
            an explicitly requested size that is missing is an error.

    Returns:
        `{"results": {lang: {"accuracy_1k": %, ..., "n": test documents}, ..., "average": {...}}, "info": {...},
        "heads": {size: HeadTrainingResult}}`; `results["en"]` also has `dev_accuracy_1k`, ...
    """
    t0 = time.time()
    if (folder is None) == (hub_repo is None):
        raise ValueError("give exactly one of folder= or hub_repo=")
    langs = list(dict.fromkeys(langs)) if langs is not None else list(MLDOC_LANGS)
    for lang in langs:
        mldoc_path(".", lang, "test")  # validates the code

    def load(lang, split):
        if folder is not None:
            return load_mldoc_local(folder, lang, split)
        return load_mldoc_hub(hub_repo, lang, split, **(hub_kwargs or {}))

    if train_sizes is None:
        if folder is not None:
            train_sizes = [s for s in TRAIN_SIZES if mldoc_path(folder, "en", f"train.{s}").is_file()]
            if not train_sizes:
                raise FileNotFoundError(f"no English MLDoc training file in {folder} "
                                        f"(expected {mldoc_path(folder, 'en', 'train.1000')} ...)")
        else:
            train_sizes = list(TRAIN_SIZES)
    dev = load("en", "dev")
    test = {lang: load(lang, "test") for lang in langs}

    def embed(ds, lang, name):
        return cache.embed_documents(ds["text"], lang, pretokenized=pretokenized, name=name)

    dev_x = embed(dev, "en", "mldoc.english.dev")
    test_x = {lang: embed(ds, lang, f"mldoc.{MLDOC_LANGS[lang]}.test") for lang, ds in test.items()}
    results = {lang: {} for lang in test}
    heads, counts = {}, {"dev": len(dev), "test": {k: len(v) for k, v in test.items()}, "train": {}}
    for size in train_sizes:
        train = load("en", f"train.{size}")
        counts["train"][size] = len(train)
        log(f"mldoc: training on english.train.{size} ({len(train)} documents), dev {len(dev)}")
        train_x = embed(train, "en", f"mldoc.english.train.{size}")
        cfg = head_config(cache.encoder.model.config, num_labels=len(LABELS), mode="single",
                          hidden_sizes=hidden_sizes, dropout=dropout, labels=list(LABELS))
        res = train_head(cfg, train_x, np.asarray(train["label"]), dev_x, np.asarray(dev["label"]), epochs=epochs,
                         batch_size=batch_size, lr=lr, seed=seed, patience=patience, device=device,
                         show_progress=show_progress, log=log)
        heads[size] = res
        sk = size_key(size)
        for lang, ds in test.items():
            acc = accuracy(predict(res.head, test_x[lang], device=device), ds["label"])
            results[lang][f"accuracy_{sk}"] = round(acc, 2)
            results[lang]["n"] = len(ds)
        log("mldoc " + sk + ": " + "  ".join(f"{lang} {results[lang][f'accuracy_{sk}']:.2f}%" for lang in test))
        if "en" in results:
            results["en"][f"dev_accuracy_{sk}"] = res.dev_accuracy
    avg = {}
    for size in train_sizes:
        k = f"accuracy_{size_key(size)}"
        avg[k] = round(float(np.mean([results[lang][k] for lang in test])), 2)
    avg["n"] = int(sum(r["n"] for r in results.values()))
    avg["languages"] = len(results)
    results["average"] = avg
    info = {"documents": counts, "train_sizes": list(train_sizes),
            "best_epochs": {size: h.best_epoch for size, h in heads.items()},
            "settings": {"hidden_sizes": list(hidden_sizes), "dropout": dropout, "epochs": epochs,
                         "batch_size": batch_size, "lr": lr, "seed": seed, "patience": patience},
            "seconds": round(time.time() - t0, 2)}
    return {"results": results, "info": info, "heads": heads}
