"""Writes a training config's corpora (and its validation folder) as the BPE tokens LASER's encoder reads.

    python training/pretokenize.py --config CONFIG.yaml --tokenizer DIR --output-dir OUT [--num-proc N] [--set K=V]

The preprocessing (Moses rules, jieba, MeCab, romanisation, lower-casing) and the BPE run here, once; a run on the
written corpora only looks the tokens up. That is for machines without the optional segmenters or the time to run
them (a GPU node, a cluster of them sharing one prepared copy), and it makes the corpora smaller to move.

OUT gets one folder per corpus entry of `data.corpora` (named after it; the same file names, as plain text), with
only the languages the run uses (`data.source_languages` and `data.target_languages`), plus `valid/<name>/` for
`validation.path` (same languages), each with a manifest `.hf_laser_pretokenized.json` (the tokenizer's fingerprint,
each file's source, line count, and the sha256 of the source and of the written file), and `OUT/config.yaml`: the
config with these folders and `pretokenized: true`, so that

    accelerate launch ... training/train.py --config OUT/config.yaml --output-dir RUN

trains on exactly what the raw config would give (the ids are checked against the full tokenizer on the first
lines of every file before anything is written). Lines stay aligned: an empty line stays empty. A line that is not
empty but has no token after preprocessing also becomes empty, so the run counts it as missing instead of as an
empty pair; both are skipped. Paths in the config are relative to the repository root, like the other configs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))

import yaml  # noqa: E402

from hf_laser.text.tokenization_laser import LaserTokenizer  # noqa: E402
from training.data import (  # noqa: E402
    PRETOKENIZED_MANIFEST,
    _lang_files,
    file_sha256,
    read_text_lines,
    resolve_corpora,
    tokenizer_fingerprint,
)
from training.common import load_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHECK_LINES = 200  # per file: the ids of the written tokens must equal the full tokenizer's
SMALL_FILE_LINES = 20_000  # files with fewer lines are processed in this process, without workers


def _bpe_batch(batch: dict, tokenizer, lang: str) -> dict:
    return {"bpe": tokenizer.pipeline.process(batch["text"], lang, stage="bpe")}


def bpe_lines(lines: list[str], lang: str, tokenizer, num_proc: int) -> list[str]:
    """The BPE line of every raw line (empty stays empty), in `num_proc` processes."""
    import datasets

    tokenizer.pipeline.preprocessor(lang)  # a missing segmenter (jieba, MeCab) fails here, not in a worker
    keep = [i for i, line in enumerate(lines) if line.strip()]
    out = [""] * len(lines)
    if not keep:
        return out
    if len(keep) < SMALL_FILE_LINES:  # here: starting workers would cost more than the file (Tatoeba has 1,650)
        for i, bpe in zip(keep, tokenizer.pipeline.process([lines[i] for i in keep], lang, stage="bpe")):
            out[i] = bpe
        return out
    ds = datasets.Dataset.from_dict({"text": [lines[i] for i in keep]})
    procs = max(1, min(num_proc, len(keep) // 1000 or 1))
    done = ds.map(_bpe_batch, batched=True, batch_size=1000, num_proc=procs if procs > 1 else None,
                  fn_kwargs={"tokenizer": tokenizer, "lang": lang}, remove_columns=["text"],
                  desc=f"BPE {lang}", load_from_cache_file=False)
    for i, bpe in zip(keep, done["bpe"]):
        out[i] = bpe
    return out


def check_ids(raw: list[str], bpe: list[str], lang: str, tokenizer, where: Path) -> None:
    """The ids of the written tokens equal the full tokenizer's on the first lines (same vocabulary, same BPE)."""
    rows = [i for i, line in enumerate(raw[:CHECK_LINES]) if line.strip()]
    if not rows:
        return
    direct = tokenizer.encode_lines([raw[i] for i in rows], lang=lang)
    looked_up = tokenizer.encode_lines([bpe[i] for i in rows], lang=lang, pretokenized=True)
    for i, a, b in zip(rows, direct, looked_up):
        if a != b:
            raise RuntimeError(f"{where} line {i + 1}: the pretokenized ids {b[:12]}... differ from the tokenizer's "
                               f"{a[:12]}...; this tokenizer cannot be replayed from its tokens")


def write_corpus_file(src: Path, lang: str, dest: Path, tokenizer, num_proc: int) -> dict:
    raw = read_text_lines(src)
    bpe = bpe_lines(raw, lang, tokenizer, num_proc)
    check_ids(raw, bpe, lang, tokenizer, src)
    dest.write_bytes("".join(line + "\n" for line in bpe).encode("utf-8", "surrogateescape"))
    return {"source": str(src), "language": lang, "lines": len(raw), "source_sha256": file_sha256(src),
            "sha256": file_sha256(dest),
            "empty_after_preprocessing": sum(1 for r, b in zip(raw, bpe) if r.strip() and not b.strip())}


def write_folder(files: dict[tuple[str, str], Path], dest: Path, tokenizer, tokenizer_dir: str, num_proc: int,
                 log) -> None:
    """`files` ({(language, file name): path}; a bitext folder has one language in many files) tokenized into
    `dest` under the same names, as plain text, and the manifest."""
    dest.mkdir(parents=True, exist_ok=True)
    manifest = {"format": 1, "tokenizer": tokenizer_dir, "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
                "files": {}}
    for (lang, fname), src in sorted(files.items(), key=lambda kv: kv[0][1]):
        name = fname.removesuffix(".gz")  # plain: xz of the folder is a third smaller than of gzip files
        t0 = time.perf_counter()
        manifest["files"][name] = write_corpus_file(src, lang, dest / name, tokenizer, num_proc)
        log(f"{dest / name}: {manifest['files'][name]['lines']:,} lines in {time.perf_counter() - t0:.1f} s")
    (dest / PRETOKENIZED_MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")


def pretokenize(cfg: dict, tokenizer_dir: str, work: Path, final: Path, num_proc: int = 1, log=print) -> dict:
    """Writes the corpora and validation folder of `cfg` pretokenized into `work` (to be renamed `final`); returns
    the config that trains on `final`."""
    tokenizer = LaserTokenizer.from_pretrained(str(REPO / tokenizer_dir))
    data = cfg["data"]
    sources = data.get("source_languages", "all")
    sources = None if sources in (None, "all") else set(sources)
    targets = set(data["target_languages"])

    all_pairs = data.get("bitext_pairs") == "all"  # bitexts of two source languages are trained on too

    def used(lang):
        return sources is None or lang in sources or lang in targets

    new_corpora, names = [], set()
    for spec in data["corpora"]:
        entry = {"path": spec} if isinstance(spec, str) else dict(spec)
        if "dataset" in entry:
            raise ValueError(f"corpus {entry['dataset']}: a `datasets` corpus cannot be pretokenized (save its "
                             "translation column as a multi-parallel folder first)")
        corpora = resolve_corpora([entry], REPO)
        src_path = REPO / entry["path"]
        name = (src_path if src_path.is_dir() else src_path.parent).name
        if name in names:
            raise ValueError(f"two corpus entries are folders named {name!r}; give them distinct names")
        names.add(name)
        files = {}
        for corpus in corpora:
            langs = list(corpus.files)
            if corpus.kind == "bitext":
                if any(used(a) and (b in targets or all_pairs and used(b)) and a != b for a in langs for b in langs):
                    files.update({(lang, p.name): p for lang, p in corpus.files.items()})
            else:
                files.update({(lang, p.name): p for lang, p in corpus.files.items() if used(lang)})
        write_folder(files, work / name, tokenizer, tokenizer_dir, num_proc, log)
        if src_path.is_dir():
            entry["path"] = os.path.relpath(final / name, REPO)
        else:  # a single bitext given by its prefix
            entry["path"] = os.path.relpath(final / name / src_path.name, REPO)
        new_corpora.append(entry)
    new = json.loads(json.dumps(cfg))
    new["data"]["corpora"] = new_corpora
    new["data"]["pretokenized"] = True
    new["tokenizer"]["path"] = tokenizer_dir
    valid = cfg.get("validation") or {}
    if valid.get("path"):
        folder = REPO / valid["path"]
        _, files = _lang_files(folder)
        langs = valid.get("languages")
        keep = {(lang, p.name): p for lang, p in files.items() if (lang in langs if langs else used(lang))}
        write_folder(keep, work / "valid" / folder.name, tokenizer, tokenizer_dir, num_proc, log)
        new["validation"]["path"] = os.path.relpath(final / "valid" / folder.name, REPO)
        new["validation"]["pretokenized"] = True
    return new


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--tokenizer", help="LaserTokenizer directory (default: the config's tokenizer.path)")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--num-proc", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    args = parser.parse_args(argv)
    cfg = load_config(args.config, args.set)
    tokenizer_dir = args.tokenizer or cfg["tokenizer"]["path"]
    if not tokenizer_dir:
        parser.error("--tokenizer is needed: the config learns its BPE during training (tokenizer.path is null)")
    out = Path(args.output_dir).resolve()
    if out.exists() and any(out.iterdir()):
        parser.error(f"{out} exists and is not empty")
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    new = pretokenize(cfg, os.path.relpath(Path(tokenizer_dir).resolve(), REPO), tmp, out, args.num_proc)
    (tmp / "config.yaml").write_text(yaml.safe_dump(new, sort_keys=False, allow_unicode=True), encoding="utf-8")
    if out.exists():
        out.rmdir()
    os.replace(tmp, out)  # OUT appears complete or not at all
    print(f"wrote {out}; train with --config {os.path.relpath(out / 'config.yaml', REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
