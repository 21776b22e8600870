"""XNLI zero-shot transfer (Artetxe & Schwenk 2019, Table 2; Table 8 for the cross-lingual matrix).

A pair classifier (features `[p, h, p*h, |p-h|]` of the L2-normalised LASER embeddings of premise and hypothesis,
MLP 512-384, Adam) is trained on the English MultiNLI training set, the epoch is selected on the **English** XNLI
development set only, and the selected head is applied unchanged to the XNLI test set of the 15 languages.

Data (through `datasets`):
- local, original distributions: `XNLI-1.0/xnli.{dev,test}.tsv` (or `.jsonl`; columns `language`, `gold_label`,
  `sentence1`, `sentence2`, `pairID`, ...) and MultiNLI `multinli_1.0_train.txt` (TSV) or `multinli_1.0_train.jsonl`
  (`gold_label`, `sentence1`, `sentence2`). MultiNLI pairs whose `gold_label` is `-` (no annotator consensus) are
  dropped and counted, as every MultiNLI user does; any other unknown label is an error.
- Hub: `facebook/xnli` (one config per language; `premise`, `hypothesis`, `label`) and `nyu-mll/multi_nli`
  (`label == -1` dropped and counted).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hf_laser.encoder import read_lines

from .classifier import accuracy, head_config, predict, train_head

__all__ = [
    "XNLI_LANGS",
    "LABELS",
    "XNLI_HUB",
    "MNLI_HUB",
    "read_nli_file",
    "load_xnli_local",
    "load_mnli_local",
    "load_xnli_hub",
    "load_mnli_hub",
    "evaluate_xnli",
    "PAPER_DEFAULTS",
]

XNLI_LANGS = ("en", "fr", "es", "de", "el", "bg", "ru", "tr", "ar", "vi", "th", "zh", "hi", "sw", "ur")
LABELS = ("entailment", "neutral", "contradiction")
XNLI_HUB = "facebook/xnli"
MNLI_HUB = "nyu-mll/multi_nli"
# LASER's tasks/xnli/xnli.sh
PAPER_DEFAULTS = {"hidden_sizes": (512, 384), "dropout": 0.3, "epochs": 200, "batch_size": 128, "lr": 1e-3,
                  "seed": 159753}


def _dataset(rows: dict):
    import datasets

    return datasets.Dataset.from_dict(rows)


def read_nli_file(path: str | Path, *, language_column: bool, allow_no_gold: bool = False) -> tuple[dict, int]:
    """Parses an XNLI-1.0 (`language` column) or MultiNLI file, TSV with a header or JSON lines.

    Fields are split on tabs only (the files contain unbalanced quotes: no CSV quoting). Every row must have as many
    fields as the header and a label in [`LABELS`]; with `allow_no_gold`, `-` (no consensus) rows are skipped.

    Returns:
        `({lang: {"premise", "hypothesis", "label", "pair_id"}}, skipped)`; without a language column everything
        is under `"en"`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"NLI file not found: {path}")
    label_id = {name: i for i, name in enumerate(LABELS)}
    out: dict[str, dict[str, list]] = {}
    skipped = 0

    def add(lineno, lang, gold, prem, hyp, pair_id):
        nonlocal skipped
        if gold == "-" and allow_no_gold:
            skipped += 1
            return
        if gold not in label_id:
            raise ValueError(f"{path}:{lineno}: gold_label {gold!r} is not one of {list(LABELS)}")
        if prem is None or hyp is None:
            raise ValueError(f"{path}:{lineno}: missing sentence1/sentence2")
        d = out.setdefault(lang, {"premise": [], "hypothesis": [], "label": [], "pair_id": []})
        d["premise"].append(prem)
        d["hypothesis"].append(hyp)
        d["label"].append(label_id[gold])
        d["pair_id"].append("" if pair_id is None else str(pair_id))

    if path.suffix == ".jsonl":
        for lineno, line in enumerate(read_lines(path), 1):
            if not line.strip():
                raise ValueError(f"{path}:{lineno}: empty line (expected a JSON object)")
            try:
                row = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{path}:{lineno}: not a JSON object ({err})") from None
            lang = row.get("language", "en") if language_column else "en"
            if language_column and "language" not in row:
                raise ValueError(f"{path}:{lineno}: no 'language' field")
            add(lineno, lang, row.get("gold_label"), row.get("sentence1"), row.get("sentence2"), row.get("pairID"))
    else:
        lines = read_lines(path)
        header = next(lines, None)
        if header is None:
            raise ValueError(f"{path} is empty (no header)")
        cols = header.split("\t")
        need = ["gold_label", "sentence1", "sentence2"] + (["language"] if language_column else [])
        missing = [c for c in need if c not in cols]
        if missing:
            raise ValueError(f"{path}: header lacks column(s) {missing} (header: {cols})")
        ix = {c: cols.index(c) for c in cols}
        for lineno, line in enumerate(lines, 2):
            if not line.strip():
                raise ValueError(f"{path}:{lineno}: empty line (expected {len(cols)} tab-separated fields)")
            f = line.split("\t")
            if len(f) != len(cols):
                raise ValueError(f"{path}:{lineno}: {len(f)} tab-separated fields, the header has {len(cols)}")
            lang = f[ix["language"]] if language_column else "en"
            add(lineno, lang, f[ix["gold_label"]], f[ix["sentence1"]], f[ix["sentence2"]],
                f[ix["pairID"]] if "pairID" in ix else None)
    if not out:
        raise ValueError(f"{path}: no examples" + (f" ({skipped} without gold label skipped)" if skipped else ""))
    return out, skipped


def _nli_file(folder: Path, split: str) -> Path:
    for name in (f"xnli.{split}.tsv", f"xnli.{split}.jsonl"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"XNLI {split} split not found: {folder / f'xnli.{split}.tsv'} (or .jsonl)")


def load_xnli_local(folder: str | Path, split: str, langs: Sequence[str] | None = None) -> dict:
    """XNLI-1.0 split (`dev`/`test`) per language: `{lang: Dataset(premise, hypothesis, label, pair_id)}`."""
    path = _nli_file(Path(folder), split)
    per_lang, _ = read_nli_file(path, language_column=True)
    langs = list(langs) if langs is not None else [lang for lang in XNLI_LANGS if lang in per_lang]
    missing = [lang for lang in langs if lang not in per_lang]
    if missing:
        raise ValueError(f"{path}: no {split} examples for language(s) {missing} (present: {sorted(per_lang)})")
    return {lang: _dataset(per_lang[lang]) for lang in langs}


def load_mnli_local(path: str | Path) -> tuple[object, int]:
    """MultiNLI training set (`multinli_1.0_train.txt` or `.jsonl`, or the folder holding it):
    `(Dataset(premise, hypothesis, label, pair_id), dropped)` with `dropped` the no-consensus (`-`) pairs."""
    path = Path(path)
    if path.is_dir():
        for name in ("multinli_1.0_train.txt", "multinli_1.0_train.jsonl"):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise FileNotFoundError(f"MultiNLI training file not found in {path} (multinli_1.0_train.txt / .jsonl)")
    per_lang, skipped = read_nli_file(path, language_column=False, allow_no_gold=True)
    return _dataset(per_lang["en"]), skipped


def _hub_nli(ds, name: str, drop_no_gold: bool):
    for col in ("premise", "hypothesis", "label"):
        if col not in ds.column_names:
            raise ValueError(f"{name}: no column {col!r} (columns: {ds.column_names})")
    labels = np.asarray(ds["label"])
    dropped = int((labels == -1).sum()) if drop_no_gold else 0
    if dropped:
        ds = ds.select(np.flatnonzero(labels != -1))
        labels = labels[labels != -1]
    bad = labels[(labels < 0) | (labels >= len(LABELS))]
    if bad.size:
        raise ValueError(f"{name}: labels {sorted(set(bad.tolist()))} outside [0, {len(LABELS)})")
    if len(ds) == 0:
        raise ValueError(f"{name}: empty split")
    return ds, dropped


def load_xnli_hub(split: str, langs: Sequence[str], repo_id: str = XNLI_HUB, revision: str | None = None) -> dict:
    """XNLI from the Hub (`facebook/xnli`, config = language; splits `validation` / `test`)."""
    import datasets

    hub_split = {"dev": "validation"}.get(split, split)
    out = {}
    for lang in langs:
        ds = datasets.load_dataset(repo_id, lang, split=hub_split, revision=revision)
        out[lang], _ = _hub_nli(ds, f"{repo_id} [{lang}/{hub_split}]", drop_no_gold=False)
    return out


def load_mnli_hub(repo_id: str = MNLI_HUB, split: str = "train", revision: str | None = None):
    """MultiNLI from the Hub (`nyu-mll/multi_nli`): `(Dataset, dropped)`, `label == -1` dropped."""
    import datasets

    ds = datasets.load_dataset(repo_id, split=split, revision=revision)
    return _hub_nli(ds, f"{repo_id} [{split}]", drop_no_gold=True)


def _embed_pairs(cache, ds, lang: str, name: str, pretokenized: bool):
    p = cache.embed_texts(ds["premise"], lang, pretokenized=pretokenized, name=f"{name}.premise")
    h = cache.embed_texts(ds["hypothesis"], lang, pretokenized=pretokenized, name=f"{name}.hypothesis")
    return p, h


def evaluate_xnli(cache, *, xnli_dir: str | Path | None = None, mnli: str | Path | None = None,
                  xnli_hub: str | None = None, mnli_hub: str | None = None, langs: Sequence[str] | None = None,
                  cross_lingual: bool = False, hidden_sizes=PAPER_DEFAULTS["hidden_sizes"],
                  dropout: float = PAPER_DEFAULTS["dropout"], epochs: int = PAPER_DEFAULTS["epochs"],
                  batch_size: int = PAPER_DEFAULTS["batch_size"], lr: float = PAPER_DEFAULTS["lr"],
                  seed: int = PAPER_DEFAULTS["seed"], patience: int | None = None, max_train: int | None = None,
                  pretokenized: bool = False, device: str = "cpu", show_progress: bool = True,
                  log=print) -> dict:
    """Trains on English MultiNLI, selects on English XNLI dev, tests every language.

    Args:
        cache: an [`~evaluation.cache.EmbeddingCache`].
        xnli_dir / xnli_hub: XNLI-1.0 folder, or Hub repo (default id [`XNLI_HUB`] when `xnli_dir` is None).
        mnli / mnli_hub: MultiNLI training file or folder, or Hub repo ([`MNLI_HUB`] when `mnli` is None).
        langs: test languages (default the 15); English is always used for training and selection.
        cross_lingual: also the premise-language × hypothesis-language matrix (Table 8).
        max_train: use only the first N training pairs (quick runs; recorded in the output).
        hidden_sizes, dropout, epochs, batch_size, lr, seed, patience: the head and its training
            ([`PAPER_DEFAULTS`] are LASER's).

    Returns:
        `{"results": {lang: {"accuracy", "n"}, ..., "average": {...}}, "cross_lingual": {prem: {hyp: acc}} | None,
        "info": {...}, "head": HeadTrainingResult}`; accuracies in percent. `results["en"]` also has
        `dev_accuracy` (the English dev accuracy of the selected head).
    """
    t0 = time.time()
    langs = list(langs) if langs is not None else list(XNLI_LANGS)
    unknown = [lang for lang in langs if lang not in XNLI_LANGS]
    if unknown:
        raise ValueError(f"not XNLI languages: {unknown} (XNLI has {list(XNLI_LANGS)})")
    test_langs = list(dict.fromkeys(langs))
    if xnli_dir is not None:
        dev = load_xnli_local(xnli_dir, "dev", ["en"])["en"]
        test = load_xnli_local(xnli_dir, "test", test_langs)
    else:
        dev = load_xnli_hub("dev", ["en"], xnli_hub or XNLI_HUB)["en"]
        test = load_xnli_hub("test", test_langs, xnli_hub or XNLI_HUB)
    if mnli is not None:
        train, dropped = load_mnli_local(mnli)
    else:
        train, dropped = load_mnli_hub(mnli_hub or MNLI_HUB)
    n_train_full = len(train)
    if max_train is not None and max_train < len(train):
        train = train.select(range(max_train))
    log(f"xnli: {len(train)} training pairs (MultiNLI; {dropped} without gold label dropped"
        + (f", first {max_train} of {n_train_full} used" if len(train) < n_train_full else "")
        + f"), {len(dev)} English dev pairs, test: " + ", ".join(f"{k} {len(v)}" for k, v in test.items()))

    tr_p, tr_h = _embed_pairs(cache, train, "en", "multinli.train", pretokenized)
    dev_p, dev_h = _embed_pairs(cache, dev, "en", "xnli.dev.en", pretokenized)
    cfg = head_config(cache.encoder.model.config, num_labels=len(LABELS), mode="pair", hidden_sizes=hidden_sizes,
                      dropout=dropout, labels=list(LABELS))
    result = train_head(cfg, tr_p, np.asarray(train["label"]), dev_p, np.asarray(dev["label"]), train_pair=tr_h,
                        dev_pair=dev_h, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, patience=patience,
                        device=device, show_progress=show_progress, log=log)

    emb = {lang: _embed_pairs(cache, ds, lang, f"xnli.test.{lang}", pretokenized) for lang, ds in test.items()}
    results = {}
    for lang, ds in test.items():
        acc = accuracy(predict(result.head, emb[lang][0], emb[lang][1], device=device), ds["label"])
        results[lang] = {"accuracy": round(acc, 2), "n": len(ds)}
        log(f"xnli {lang}: {acc:.2f}% (n={len(ds)})")
    if "en" in results:
        results["en"]["dev_accuracy"] = result.dev_accuracy
    results["average"] = {"accuracy": round(float(np.mean([r["accuracy"] for r in results.values()])), 2),
                          "n": int(sum(r["n"] for r in results.values())), "languages": len(results)}

    matrix = None
    if cross_lingual:
        matrix = {}
        for lp in test:
            matrix[lp] = {}
            for lh in test:
                a, b = test[lp], test[lh]
                if len(a) != len(b):
                    raise ValueError(f"xnli test sets of {lp} ({len(a)}) and {lh} ({len(b)}) are not aligned")
                if all(a["pair_id"]) and all(b["pair_id"]) and a["pair_id"] != b["pair_id"]:
                    raise ValueError(f"xnli test sets of {lp} and {lh} are not in the same pairID order")
                if a["label"] != b["label"]:
                    raise ValueError(f"xnli test labels of {lp} and {lh} differ: the sets are not aligned")
                pred = predict(result.head, emb[lp][0], emb[lh][1], device=device)
                matrix[lp][lh] = round(accuracy(pred, b["label"]), 2)
    info = {"train_pairs": len(train), "train_pairs_available": n_train_full, "dropped_no_gold_label": dropped,
            "dev_pairs": len(dev), "dev_accuracy": result.dev_accuracy, "best_epoch": result.best_epoch,
            "epochs_run": len(result.history), "settings": {"hidden_sizes": list(hidden_sizes), "dropout": dropout,
            "epochs": epochs, "batch_size": batch_size, "lr": lr, "seed": seed, "patience": patience,
            "max_train": max_train}, "seconds": round(time.time() - t0, 2)}
    return {"results": results, "cross_lingual": matrix, "info": info, "head": result}
