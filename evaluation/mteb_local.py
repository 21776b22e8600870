"""MTEB's Tatoeba and BUCC tasks on local copies of their datasets (no download), and the check that MTEB's Tatoeba
numbers equal `evaluation/tatoeba.py`'s.

The local copies have the layout of MTEB's Hub datasets, so MTEB's own loading, evaluators and metrics run on them:

* [`tatoeba_dataset`]: LASER's Tatoeba v1 files (`tatoeba.xxx-eng.{xxx,eng}`) as `mteb/tatoeba-bitext-mining` is
  stored: one `default` configuration, split `test`, columns `sentence1` (xx), `sentence2` (English), `lang`
  (`"fra-eng"`);
* [`bucc_v2_dataset`]: BUCC-format folders (`{xx}-en/{xx}-en.{split}.{xx,en,gold}`) as `mteb/bucc-bitext-mining`
  (task `BUCC.v2`): the gold pairs, same columns, `lang` `"de-en"`;
* [`bucc_dataset`]: the same folders as `mteb/BUCC` (task `BUCC`): one configuration per pair, one row holding
  all source sentences (`sentence1`), all English sentences (`sentence2`) and the 1-based gold index pairs (`gold`);
* [`write_dataset`] writes `{config: {split: Dataset}}` as parquet files plus a README declaring the
  configurations, and [`local_task`] returns an MTEB task that reads such a folder.

Tasks that name these datasets run unchanged online; the local copies only stand in for the download.

Command line (what docs/mteb.md shows)::

    python -m evaluation.mteb_local --model DIR --tatoeba-dir ../shared/data/tatoeba/v1 --work-dir /tmp/mteb-local \
        [--langs fra,cmn,jpn] [--out comparison.json]

runs `mteb.evaluate(LaserMTEBEncoder(...), Tatoeba)` on the local copy and `evaluate_tatoeba` on the same files, and
prints both per language: MTEB's `accuracy` (nearest English neighbour of each xx sentence, by cosine) is
`1 - xx2en_error / 100`, so the xx->en error counts must be equal. Exit status 1 when any language differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["tatoeba_dataset", "bucc_v2_dataset", "bucc_dataset", "write_dataset", "local_task", "compare_tatoeba"]


def tatoeba_dataset(tatoeba_dir: str | Path, langs: Sequence[str] | None = None) -> dict:
    """`{"default": {"test": Dataset}}` in the layout of `mteb/tatoeba-bitext-mining` (languages: ISO 639-3 codes
    of the xx sides; default every language in the folder)."""
    import datasets

    from .tatoeba import available_languages, check_pair_files, read_lines, tatoeba_paths

    langs = [lang for lang in (langs or available_languages(tatoeba_dir)) if lang != "eng"]
    rows = {"sentence1": [], "sentence2": [], "lang": []}
    for lang in langs:
        src, tgt = tatoeba_paths(tatoeba_dir, lang)
        n = check_pair_files(src, tgt)
        rows["sentence1"] += list(read_lines(src))
        rows["sentence2"] += list(read_lines(tgt))
        rows["lang"] += [f"{lang}-eng"] * n
    return {"default": {"test": datasets.Dataset.from_dict(rows)}}


def _bucc_pair(mining_dir: Path, pair: str, split: str) -> tuple[list[str], list[str], list[tuple[int, int]]]:
    """Source sentences, English sentences (file order) and gold `(source index, English index)` pairs."""
    xx = pair.split("-")[0]

    def sentences(lang: str) -> tuple[list[str], dict[str, int]]:
        ids, texts = [], []
        with open(mining_dir / pair / f"{pair}.{split}.{lang}", encoding="utf-8", newline="\n") as f:
            for line in f.read().split("\n"):
                if line:
                    sid, text = line.split("\t", 1)
                    ids.append(sid)
                    texts.append(text)
        return texts, {sid: i for i, sid in enumerate(ids)}

    src, src_index = sentences(xx)
    en, en_index = sentences("en")
    gold = []
    with open(mining_dir / pair / f"{pair}.{split}.gold", encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if line:
                a, b = line.split("\t")
                gold.append((src_index[a], en_index[b]))
    return src, en, gold


def _bucc_pairs(mining_dir: Path) -> list[str]:
    return sorted(p.name for p in mining_dir.iterdir() if p.is_dir() and p.name.endswith("-en"))


def bucc_v2_dataset(mining_dir: str | Path, split: str = "sample") -> dict:
    """`{"default": {"test": Dataset}}` in the layout of `mteb/bucc-bitext-mining`: the gold pairs of every
    `{xx}-en` folder's `split`."""
    import datasets

    mining_dir = Path(mining_dir)
    rows = {"sentence1": [], "sentence2": [], "lang": []}
    for pair in _bucc_pairs(mining_dir):
        src, en, gold = _bucc_pair(mining_dir, pair, split)
        rows["sentence1"] += [src[i] for i, _ in gold]
        rows["sentence2"] += [en[j] for _, j in gold]
        rows["lang"] += [pair] * len(gold)
    return {"default": {"test": datasets.Dataset.from_dict(rows)}}


def bucc_dataset(mining_dir: str | Path, split: str = "sample") -> dict:
    """`{pair: {"test": Dataset}}` in the layout of `mteb/BUCC`: one row per pair with every source sentence,
    every English sentence and the 1-based gold index pairs."""
    import datasets

    mining_dir = Path(mining_dir)
    out = {}
    for pair in _bucc_pairs(mining_dir):
        src, en, gold = _bucc_pair(mining_dir, pair, split)
        out[pair] = {"test": datasets.Dataset.from_dict(
            {"sentence1": [src], "sentence2": [en], "gold": [[[i + 1, j + 1] for i, j in gold]]})}
    return out


def write_dataset(configs: dict, parent: str | Path, name: str) -> tuple[Path, str]:
    """Writes `{config: {split: Dataset}}` as parquet files plus a README declaring the configurations (what
    `datasets.load_dataset(path, config)` reads) into `parent/{name}-{digest}`; returns that path and
    `"local-{digest}"` (a revision for MTEB). The digest of the content is in the folder name because `datasets`
    caches a local folder's data under its name: a folder rewritten with other data would be read from the cache."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=parent))
    digest = hashlib.sha256()
    card = ["---", "configs:"]
    for config, splits in configs.items():
        card += [f"- config_name: {config}", "  data_files:"]
        for split, ds in splits.items():
            path = staging / config / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            ds.to_parquet(path)
            digest.update(f"{config}/{split}".encode() + hashlib.sha256(path.read_bytes()).digest())
            card += [f"  - split: {split}", f"    path: {config}/{split}.parquet"]
    card += ["---", "", "A local copy in the layout of an MTEB dataset (evaluation/mteb_local.py).", ""]
    (staging / "README.md").write_text("\n".join(card), encoding="utf-8")
    short = digest.hexdigest()[:12]
    out_dir = parent / f"{name}-{short}"
    if out_dir.exists():  # the same content: keep the existing copy
        shutil.rmtree(staging)
    else:
        staging.rename(out_dir)
    return out_dir, f"local-{short}"


def local_task(name: str, data_dir: str | Path, revision: str, **get_task_kwargs):
    """`mteb.get_task(name, **get_task_kwargs)` reading its dataset from `data_dir` (the task's metadata is copied,
    the registered task is unchanged)."""
    import mteb

    task = mteb.get_task(name, **get_task_kwargs)
    task.metadata = task.metadata.model_copy(update={"dataset": {"path": str(data_dir), "revision": revision}})
    return task


def compare_tatoeba(encoder, tatoeba_dir: str | Path, work_dir: str | Path, langs: Sequence[str] | None = None,
                    *, log=print) -> dict:
    """MTEB's Tatoeba (through [`hf_laser.integrations.mteb.LaserMTEBEncoder`]) and `evaluate_tatoeba` on the same files and
    model: `{lang: {"mteb_xx2en_errors", "tatoeba_py_xx2en_errors", "mteb_accuracy", "mteb_f1", "mteb_lang_xx",
    "mteb_lang_en", "n"}, "languages": count, "differing": [languages whose error counts differ]}`."""
    import mteb

    from hf_laser.integrations.mteb import LaserMTEBEncoder, texts_sha256

    from .cache import EmbeddingCache
    from .tatoeba import available_languages, evaluate_tatoeba, read_lines, tatoeba_paths

    work_dir = Path(work_dir)
    langs = [lang for lang in (langs or available_languages(tatoeba_dir)) if lang != "eng"]
    data_dir, revision = write_dataset(tatoeba_dataset(tatoeba_dir, langs), work_dir, "tatoeba")
    task = local_task("Tatoeba", data_dir, revision, languages=langs)
    missing = sorted(set(langs) - {subset.split("-")[0] for subset in task.hf_subsets})
    if missing:
        raise ValueError(f"MTEB's Tatoeba has no subset for {missing}")
    model = LaserMTEBEncoder(encoder=encoder)
    result = mteb.evaluate(model, task, cache=None, show_progress_bar=False)
    mteb_scores = {row["hf_subset"].split("-")[0]: row for row in result.task_results[0].scores["test"]}
    # the language MTEB's calls were preprocessed in, by the content of the call (the xx side or the English side)
    mteb_langs = {entry["texts_sha256"]: entry["lang"] for entry in model.language_log}
    reference = evaluate_tatoeba(EmbeddingCache(encoder, work_dir / "cache"), langs, folder=tatoeba_dir,
                                 show_progress=False, log=lambda *a: None)
    out, differing = {}, []
    for lang in langs:
        n = reference[lang]["n"]
        # evaluate_tatoeba reports percentages rounded to 2 decimals: compare the error counts
        ours = round(reference[lang]["xx2en_error"] * n / 100)
        theirs = round((1 - mteb_scores[lang]["accuracy"]) * n)
        if ours != theirs:
            differing.append(lang)
        src, tgt = tatoeba_paths(tatoeba_dir, lang)
        out[lang] = {"mteb_xx2en_errors": theirs, "tatoeba_py_xx2en_errors": ours,
                     "mteb_accuracy": mteb_scores[lang]["accuracy"], "mteb_f1": mteb_scores[lang]["f1"],
                     "mteb_lang_xx": mteb_langs.get(texts_sha256(list(read_lines(src)))),
                     "mteb_lang_en": mteb_langs.get(texts_sha256(list(read_lines(tgt)))), "n": n}
        log(f"{lang}: xx->en errors: MTEB {theirs}/{n} (accuracy {mteb_scores[lang]['accuracy']:.4f}), "
            f"evaluation/tatoeba.py {ours}/{n} ({reference[lang]['xx2en_error']:.2f} %); MTEB preprocessed "
            f"{out[lang]['mteb_lang_xx']!r} / {out[lang]['mteb_lang_en']!r}")
    out["languages"] = len(langs)
    out["differing"] = differing
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.mteb_local", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="LASER directory or Hub id (default: the shipped laser-mini)")
    parser.add_argument("--tatoeba-dir", required=True, help="LASER-layout Tatoeba folder")
    parser.add_argument("--work-dir", required=True, help="where the local MTEB dataset and embeddings go")
    parser.add_argument("--langs", default=None, help="comma-separated ISO 639-3 codes (default: all in the folder)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default=None, help="write the comparison as JSON here")
    args = parser.parse_args(argv)
    from hf_laser.encoder import LaserEncoder
    from hf_laser.models import resolve_model

    encoder = LaserEncoder.from_pretrained(resolve_model(args.model, who="evaluation.mteb_local"), device=args.device)
    langs = [x.strip() for x in args.langs.split(",") if x.strip()] if args.langs else None
    result = compare_tatoeba(encoder, args.tatoeba_dir, args.work_dir, langs)
    print(f"{result['languages']} languages; xx->en error counts differ for {len(result['differing'])}: "
          f"{result['differing']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if not result["differing"] else 1


if __name__ == "__main__":
    sys.exit(main())
