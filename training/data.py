"""Parallel data for LASER training: corpus readers, pairing, tokenization cache, token-budget batching.

Corpora (YAML `data.corpora`, paths relative to the repository root or absolute; `.gz` or plain UTF-8, lines split
on `'\\n'` only):

* a folder of Moses/OPUS bitexts `{corpus}.{a}-{b}.{a}[.gz]` + `{corpus}.{a}-{b}.{b}[.gz]`, or one bitext given by its
  prefix (`path: dir/europarl.de-en`);
* a multi-parallel folder, one `{lang}[.txt][.gz]` file per language with aligned lines (empty line = missing);
* a `datasets` dataset with a `translation` column (`{lang: text}` per row): `dataset: org/name` (Hub, with
  optional `config`, `split`, `revision`) or a directory written by `Dataset.save_to_disk`.

Every source sentence is paired with each target language available for it, never with its own language. Pairs
with an empty side, a side longer than `max_length` tokens or a length ratio above `max_length_ratio` are skipped
and counted per corpus; a bitext whose sides have different line counts (or a multi-parallel folder whose files do)
is rejected with an error naming the files, and so is a corpus that gives no pair.

Tokenization runs once through `datasets.Dataset.map(num_proc=...)` and is saved under `cache_dir/<key>/`, the key
hashing the corpus files (path, size, mtime), the languages, the filters and the tokenizer files, so later runs
(and the other processes of a run) load it memory-mapped.

With `pretokenized: true` (in `data` and/or `validation`) the corpora hold the BPE tokens LASER's encoder reads, as
written by `training/pretokenize.py`: only the dictionary lookup runs (no Moses, jieba or MeCab), and every corpus
folder must carry that script's manifest (`.hf_laser_pretokenized.json`) naming the same tokenizer files as the run's
and listing each file used with its sha256, else the run stops: ids from another BPE (or an edited file) would look
like data and train garbage.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

DATA_FORMAT_VERSION = 1
SKIP_REASONS = ("empty", "too_long", "length_ratio")
_BITEXT = re.compile(r"^(?P<prefix>.+)\.(?P<a>[^.\-]+)-(?P<b>[^.\-]+)\.(?P<lang>[^.\-]+)(?P<gz>\.gz)?$")
_MONO = re.compile(r"^(?P<lang>[A-Za-z]{2,3}(?:_[A-Za-z0-9]+)?)(?:\.txt)?(?:\.gz)?$")


def default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "hf_laser" / "training"


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file, plain or gzip, split on `'\\n'` only (a final newline adds no line).
    Invalid UTF-8 bytes survive as surrogates (`errors="surrogateescape"`).

    Raises:
        ValueError: a `.gz` file that is truncated or not gzip data, naming the file.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape",
                                                         newline="\n") as fh:
            lines = fh.read().split("\n")
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        # gzip's own messages ("Compressed file ended before the end-of-stream marker was reached") name no file
        raise ValueError(f"{path} is not a valid gzip file ({type(err).__name__}: {err}): it is truncated or "
                         "damaged; download or compress it again") from err
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# ---------------------------------------------------------------------------------------------- corpora
@dataclass
class Corpus:
    """One aligned source: a bitext, a multi-parallel folder or a `datasets` translation dataset."""

    name: str
    kind: str  # "bitext" | "multiparallel" | "datasets"
    files: dict[str, Path] = field(default_factory=dict)
    dataset: dict | None = None
    spec: str = ""  # the config entry it came from (a folder expands into several bitexts)

    def fingerprint(self) -> list:
        if self.kind == "datasets":
            fp = [self.kind, self.dataset]
            local = Path(self.dataset["path"])
            if local.is_dir():
                fp += sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in local.rglob("*") if p.is_file())
            return fp
        return [self.kind, self.name] + [
            (lang, str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for lang, p in sorted(self.files.items())
        ]


def _lang_files(folder: Path) -> tuple[dict[tuple[str, str, str], dict[str, Path]], dict[str, Path]]:
    bitexts: dict[tuple[str, str, str], dict[str, Path]] = {}
    mono: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        if not p.is_file() or p.name.startswith("."):
            continue
        m = _BITEXT.match(p.name)
        if m and m["lang"] in (m["a"], m["b"]) and m["a"] != m["b"]:
            bitexts.setdefault((m["prefix"], m["a"], m["b"]), {})[m["lang"]] = p
            continue
        m = _MONO.match(p.name)
        if m:
            if m["lang"] in mono:
                raise ValueError(f"{folder}: two files for language {m['lang']!r}: {mono[m['lang']].name}, {p.name}")
            mono[m["lang"]] = p
    return bitexts, mono


def resolve_corpora(specs: Sequence, base_dir: str | os.PathLike = ".") -> list[Corpus]:
    """Expands the `data.corpora` entries of a config into [`Corpus`] objects (checks that the files exist)."""
    if not specs:
        raise ValueError("data.corpora is empty: list at least one corpus")
    base_dir = Path(base_dir)
    corpora = []
    for spec in specs:
        if isinstance(spec, str):
            spec = {"path": spec}
        if not isinstance(spec, dict):
            raise ValueError(f"a corpus entry must be a path or a mapping, got {spec!r}")
        if "dataset" in spec:
            ds = {"path": str(spec["dataset"]), "name": spec.get("config"), "split": spec.get("split", "train"),
                  "revision": spec.get("revision"), "column": spec.get("column", "translation")}
            local = base_dir / ds["path"]
            if local.is_dir():
                ds["path"] = str(local.resolve())
            name = spec.get("name", ds["path"])
            corpora.append(Corpus(name, "datasets", dataset=ds, spec=name))
            continue
        if "path" not in spec:
            raise ValueError(f"a corpus entry needs `path` or `dataset`: {spec!r}")
        path = base_dir / spec["path"]
        fmt = spec.get("format", "auto")
        if fmt not in ("auto", "moses", "multiparallel"):
            raise ValueError(f"corpus {spec['path']}: format must be auto, moses or multiparallel, got {fmt!r}")
        keep = set(spec["languages"]) if spec.get("languages") else None
        name = spec.get("name", spec["path"])
        if path.is_dir():
            bitexts, mono = _lang_files(path)
            if fmt == "auto":
                if bitexts and mono:
                    raise ValueError(f"corpus {path} holds both bitexts and per-language files; set `format`")
                fmt = "moses" if bitexts else "multiparallel"
            if fmt == "moses":
                if not bitexts:
                    raise ValueError(f"corpus {path}: no bitext files {{corpus}}.{{a}}-{{b}}.{{a}}[.gz] found")
                for (prefix, a, b), files in sorted(bitexts.items()):
                    if set(files) != {a, b}:
                        present = ", ".join(str(p) for p in files.values())
                        missing = ({a, b} - set(files)).pop()
                        raise ValueError(f"corpus {path}: {present} has no other side (.{missing}[.gz] file missing)")
                    if keep is None or {a, b} <= keep:
                        corpora.append(Corpus(f"{name}/{prefix}.{a}-{b}", "bitext", dict(files), spec=name))
            else:
                if not mono:
                    raise ValueError(f"corpus {path}: no per-language files ({{lang}}.txt[.gz]) found")
                files = {lang: p for lang, p in mono.items() if keep is None or lang in keep}
                corpora.append(Corpus(name, "multiparallel", files, spec=name))
        else:
            # a single bitext given by its prefix: `dir/europarl.de-en` -> europarl.de-en.de[.gz] + .en[.gz]
            m = re.match(r"^.+\.(?P<a>[^.\-]+)-(?P<b>[^.\-]+)$", path.name)
            if not m:
                raise FileNotFoundError(f"corpus {path}: not a folder, and not a bitext prefix like dir/name.de-en")
            files = {}
            for lang in (m["a"], m["b"]):
                found = [p for p in (path.with_name(f"{path.name}.{lang}"), path.with_name(f"{path.name}.{lang}.gz"))
                         if p.is_file()]
                if not found:
                    raise FileNotFoundError(f"corpus {path}: {path}.{lang}[.gz] not found")
                files[lang] = found[0]
            corpora.append(Corpus(name, "bitext", files, spec=name))
    return corpora


def _load_translation_rows(corpus: Corpus) -> list[dict]:
    import datasets

    ds = corpus.dataset
    if Path(ds["path"]).is_dir():
        data = datasets.load_from_disk(ds["path"])
        if isinstance(data, datasets.DatasetDict):
            data = data[ds["split"]]
    else:
        data = datasets.load_dataset(ds["path"], ds["name"], split=ds["split"], revision=ds["revision"])
    if ds["column"] not in data.column_names:
        raise ValueError(f"corpus {corpus.name}: no {ds['column']!r} column (columns: {data.column_names})")
    return data[ds["column"]]


# ---------------------------------------------------------------------------------------------- pairing
@dataclass
class RawPairs:
    """Pairs before tokenization; `src`/`tgt` index `texts`/`langs` (one entry per used line of each file)."""

    texts: list[str] = field(default_factory=list)
    langs: list[str] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    tgt: list[int] = field(default_factory=list)
    direction: list[int] = field(default_factory=list)
    corpus: list[int] = field(default_factory=list)
    directions: list[tuple[str, str]] = field(default_factory=list)
    stats: list[dict] = field(default_factory=list)

    def direction_id(self, src_lang: str, tgt_lang: str) -> int:
        key = (src_lang, tgt_lang)
        if key not in self._direction_ids:
            self._direction_ids[key] = len(self.directions)
            self.directions.append(key)
        return self._direction_ids[key]

    def __post_init__(self):
        self._direction_ids: dict[tuple[str, str], int] = {}


def _segment_adder(raw: RawPairs, lang: str, lines: list[str]):
    ids = np.full(len(lines), -1, dtype=np.int64)

    def seg(row: int) -> int:
        if ids[row] < 0:
            ids[row] = len(raw.texts)
            raw.texts.append(lines[row])
            raw.langs.append(lang)
        return int(ids[row])

    return seg


def collect_pairs(corpora: Sequence[Corpus], source_languages: Sequence[str] | None,
                  target_languages: Sequence[str], bitext_pairs: str = "targets") -> RawPairs:
    """Reads the corpora and pairs every source sentence with its available targets (never its own language).

    `source_languages=None` means every language found in the corpora. `bitext_pairs="all"` also takes a bitext
    whose languages are no target (e.g. `tatoeba.de-fr`), once, as the direction first language → second (for the
    ranking objective, which needs no decoder target).
    """
    if not target_languages:
        raise ValueError("data.target_languages is empty")
    targets = list(target_languages)
    sources = None if source_languages is None else set(source_languages)
    raw = RawPairs()
    per_spec: dict[str, int] = {}

    def is_source(lang):
        return sources is None or lang in sources

    for ci, corpus in enumerate(corpora):
        stats = {"corpus": corpus.name, "kind": corpus.kind, "pairs": 0, "missing": 0,
                 "skipped": dict.fromkeys(SKIP_REASONS, 0)}
        raw.stats.append(stats)
        if corpus.kind == "bitext":
            (la, fa), (lb, fb) = corpus.files.items()
            directions = [(s, t) for s, t in ((la, lb), (lb, la)) if s != t and is_source(s) and t in targets]
            if not directions and bitext_pairs == "all" and la != lb and is_source(la) and is_source(lb):
                directions = [(la, lb)]
            if not directions:  # a bitext of other languages in a folder
                per_spec.setdefault(corpus.spec, 0)
                continue
            lines_a, lines_b = read_text_lines(fa), read_text_lines(fb)
            if len(lines_a) != len(lines_b):
                raise ValueError(
                    f"corpus {corpus.name}: {fa} has {len(lines_a)} lines but {fb} has {len(lines_b)}; the two sides "
                    "of a bitext must be line-aligned"
                )
            if not lines_a:
                raise ValueError(f"corpus {corpus.name} is empty: {fa} and {fb} have no lines")
            seg = {la: _segment_adder(raw, la, lines_a), lb: _segment_adder(raw, lb, lines_b)}
            text = {la: lines_a, lb: lines_b}
            for s, t in directions:
                d = raw.direction_id(s, t)
                for row in range(len(lines_a)):
                    if not text[s][row].strip() or not text[t][row].strip():
                        stats["skipped"]["empty"] += 1
                        continue
                    raw.src.append(seg[s](row))
                    raw.tgt.append(seg[t](row))
                    raw.direction.append(d)
                    raw.corpus.append(ci)
                    stats["pairs"] += 1
        elif corpus.kind == "multiparallel":
            used = {lang: p for lang, p in corpus.files.items() if is_source(lang) or lang in targets}
            src_langs = sorted(lang for lang in used if is_source(lang))
            tgt_langs = [t for t in targets if t in used]
            if not (src_langs and tgt_langs and any(s != t for s in src_langs for t in tgt_langs)):
                per_spec.setdefault(corpus.spec, 0)
                continue
            lines = {lang: read_text_lines(p) for lang, p in used.items()}
            counts = {lang: len(v) for lang, v in lines.items()}
            if len(set(counts.values())) > 1:
                # name the files that disagree with the most common line count
                values = list(counts.values())
                common = max(set(values), key=values.count)
                odd = [f"{used[lang]} ({n} lines)" for lang, n in counts.items() if n != common]
                raise ValueError(
                    f"corpus {corpus.name}: files of a multi-parallel corpus must have the same number of lines; "
                    f"most have {common}, but " + ", ".join(odd)
                )
            n_rows = next(iter(counts.values()))
            if n_rows == 0:
                raise ValueError(f"corpus {corpus.name} is empty: {', '.join(str(p) for p in used.values())} "
                                 "have no lines")
            seg = {lang: _segment_adder(raw, lang, v) for lang, v in lines.items()}
            present = {lang: np.array([bool(x.strip()) for x in v]) for lang, v in lines.items()}
            for s in src_langs:
                for t in tgt_langs:
                    if s == t:
                        continue
                    d = raw.direction_id(s, t)
                    both = present[s] & present[t]
                    stats["missing"] += int((~both).sum())
                    for row in np.flatnonzero(both).tolist():
                        raw.src.append(seg[s](row))
                        raw.tgt.append(seg[t](row))
                        raw.direction.append(d)
                        raw.corpus.append(ci)
                        stats["pairs"] += 1
        else:
            rows = _load_translation_rows(corpus)
            if not rows:
                raise ValueError(f"corpus {corpus.name} is empty: the dataset has no rows")
            for row in rows:
                texts = {lang: text for lang, text in (row or {}).items() if isinstance(text, str)}
                for s in sorted(texts):
                    if not is_source(s):
                        continue
                    for t in targets:
                        if t == s:
                            continue
                        if t not in texts:
                            stats["missing"] += 1
                            continue
                        if not texts[s].strip() or not texts[t].strip():
                            stats["skipped"]["empty"] += 1
                            continue
                        d = raw.direction_id(s, t)
                        raw.src.append(len(raw.texts))
                        raw.texts.append(texts[s])
                        raw.langs.append(s)
                        raw.tgt.append(len(raw.texts))
                        raw.texts.append(texts[t])
                        raw.langs.append(t)
                        raw.direction.append(d)
                        raw.corpus.append(ci)
                        stats["pairs"] += 1
        per_spec[corpus.spec] = per_spec.get(corpus.spec, 0) + stats["pairs"] + sum(stats["skipped"].values())
    for spec, n in per_spec.items():
        if n == 0:
            raise ValueError(
                f"corpus {spec} gives no sentence pair for source languages "
                f"{'all' if sources is None else sorted(sources)} and target languages {targets}"
            )
    return raw


# ---------------------------------------------------------------------------------------------- tokenization
def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of what determines the ids: the vocabulary and the subword model files."""
    h = hashlib.sha256()
    h.update(json.dumps(tokenizer.get_vocab(), sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    for key, content in sorted(getattr(tokenizer, "_files", {}).items()):
        h.update(key.encode())
        h.update(content)
    h.update(str(getattr(tokenizer, "mode", "")).encode())
    return h.hexdigest()


PRETOKENIZED_MANIFEST = ".hf_laser_pretokenized.json"


def file_sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def check_pretokenized(files: Sequence[Path], tokenizer) -> None:
    """Raises unless every file is listed in its folder's `training/pretokenize.py` manifest, written with the
    tokenizer files of `tokenizer`, and still holds what was written (sha256)."""
    expected = tokenizer_fingerprint(tokenizer)
    manifests: dict[Path, dict] = {}
    for f in files:
        folder = Path(f).parent
        if folder not in manifests:
            path = folder / PRETOKENIZED_MANIFEST
            if not path.is_file():
                raise ValueError(f"pretokenized is set, but {folder} has no {PRETOKENIZED_MANIFEST}: write the corpus "
                                 "with training/pretokenize.py (or unset pretokenized for raw text)")
            manifest = manifests[folder] = json.loads(path.read_text(encoding="utf-8"))
            if manifest.get("tokenizer_fingerprint") != expected:
                raise ValueError(f"{folder} was pretokenized with another tokenizer ({manifest.get('tokenizer')}, "
                                 f"fingerprint {str(manifest.get('tokenizer_fingerprint'))[:12]}) than this run's "
                                 f"({expected[:12]}): its ids would not mean the same tokens")
        entry = manifests[folder].get("files", {}).get(Path(f).name)
        if entry is None:
            raise ValueError(f"{f} is not listed in {folder / PRETOKENIZED_MANIFEST}: not written by "
                             "training/pretokenize.py with that tokenizer")
        if entry.get("sha256") != file_sha256(f):
            raise ValueError(f"{f} changed since training/pretokenize.py wrote it (sha256 differs from "
                             f"{folder / PRETOKENIZED_MANIFEST}); write the folder again")


def _encode_batch(batch: dict, tokenizer, pretokenized: bool = False) -> dict:
    ids = tokenizer.encode_lines(batch["text"], lang=batch["lang"], pretokenized=pretokenized)
    return {"input_ids": ids, "length": [len(x) for x in ids]}


def tokenize_texts(texts: list[str], langs: list[str], tokenizer, num_proc: int = 1, fingerprint: str | None = None,
                   pretokenized: bool = False):
    """`datasets.Dataset` with `input_ids` (ids with `</s>`) and `length`, one row per text, via `map(num_proc)`;
    `pretokenized`: the texts are BPE tokens, only looked up."""
    import datasets

    if not pretokenized:
        for lang in dict.fromkeys(langs):
            # Built here, in this process, so that an unknown language code warns where the user sees it (the
            # tokenizer then uses the Moses defaults) and a missing optional dependency (jieba, MeCab) fails before
            # the workers.
            tokenizer.pipeline.preprocessor(lang)
    ds = datasets.Dataset.from_dict({"text": texts, "lang": langs})
    num_proc = max(1, min(int(num_proc or 1), len(texts) // 1000 or 1))
    return ds.map(_encode_batch, batched=True, batch_size=1000, num_proc=num_proc if num_proc > 1 else None,
                  fn_kwargs={"tokenizer": tokenizer, "pretokenized": bool(pretokenized)}, remove_columns=["text"],
                  desc="tokenizing", new_fingerprint=fingerprint)


class TokenTable:
    """Token ids of many sentences as one flat int32 array + offsets (memory-mapped from the Arrow cache)."""

    def __init__(self, dataset):
        import pyarrow as pa

        column = dataset.data.table.column("input_ids")
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        self.offsets = column.offsets.to_numpy().astype(np.int64)
        self.values = column.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        self.lengths = np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.lengths)

    def get(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]


def _cache_key(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _atomic_publish(tmp: Path, final: Path) -> None:
    try:
        os.replace(tmp, final)
    except OSError:
        if not (final / "meta.json").is_file():  # another process published first: keep theirs
            raise
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class ParallelData:
    """Tokenized training pairs: `src[i]`, `tgt[i]` index `tokens`; `direction[i]` indexes `directions`."""

    tokens: TokenTable
    src: np.ndarray
    tgt: np.ndarray
    direction: np.ndarray
    corpus: np.ndarray
    directions: list[tuple[str, str]]
    stats: dict
    path: Path

    def __len__(self) -> int:
        return len(self.src)

    @property
    def src_lengths(self) -> np.ndarray:
        return self.tokens.lengths[self.src]

    @property
    def tgt_lengths(self) -> np.ndarray:
        return self.tokens.lengths[self.tgt]


def prepare_training_data(data_cfg: dict, tokenizer, *, base_dir: str | os.PathLike = ".", log=print,
                          target_tokenizer=None) -> ParallelData:
    """Reads, pairs, tokenizes and filters the training corpora, or loads them from the cache.

    `data_cfg` keys: `corpora`, `source_languages` (list or `"all"`), `target_languages`, `max_length`,
    `max_length_ratio`, `num_proc`, `cache_dir`, `pretokenized`. `target_tokenizer`: the tokenizer of the model that
    reads the target side when `tokenizer`'s model does not (a distillation teacher): the target side's length
    filters then count its tokens, not those of a vocabulary that may never have seen the target languages (a Basque
    student's BPE cuts Russian into letters, which would skip most eu-ru pairs as too long).
    """
    import datasets

    corpora = resolve_corpora(data_cfg["corpora"], base_dir)
    pretokenized = bool(data_cfg.get("pretokenized"))
    if pretokenized:
        if any(c.kind == "datasets" for c in corpora):
            raise ValueError("data.pretokenized applies to corpus files; a `datasets` corpus cannot be pretokenized")
        check_pretokenized([p for c in corpora for p in c.files.values()], tokenizer)
    sources = data_cfg.get("source_languages", "all")
    sources = None if sources in (None, "all") else list(sources)
    targets = list(data_cfg["target_languages"])
    bitext_pairs = data_cfg.get("bitext_pairs", "targets")
    max_length = int(data_cfg["max_length"])
    ratio = data_cfg.get("max_length_ratio")
    tok_fp = tokenizer_fingerprint(tokenizer)
    key = _cache_key({"version": DATA_FORMAT_VERSION, "corpora": [c.fingerprint() for c in corpora],
                      "sources": sources, "targets": targets, "max_length": max_length, "ratio": ratio,
                      "tokenizer": tok_fp, **({"pretokenized": True} if pretokenized else {}),
                      **({"bitext_pairs": bitext_pairs} if bitext_pairs != "targets" else {}),
                      **({"target_tokenizer": tokenizer_fingerprint(target_tokenizer)} if target_tokenizer else {})})
    cache_root = Path(data_cfg.get("cache_dir") or default_cache_dir())
    path = cache_root / f"train-{key}"
    if not (path / "meta.json").is_file():
        log(f"preparing training data in {path}")
        raw = collect_pairs(corpora, sources, targets, bitext_pairs)
        if not raw.src:
            raise ValueError("the corpora give no sentence pair at all for the configured languages")
        cache_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".train-{key}-", dir=cache_root))
        segments = tokenize_texts(raw.texts, raw.langs, tokenizer, data_cfg.get("num_proc", 1), f"laser-{key}",
                                  pretokenized=pretokenized)
        segments.save_to_disk(str(tmp / "segments"))
        lengths = np.asarray(segments["length"], dtype=np.int64)
        src, tgt = np.asarray(raw.src, dtype=np.int64), np.asarray(raw.tgt, dtype=np.int64)
        direction = np.asarray(raw.direction, dtype=np.int32)
        corpus = np.asarray(raw.corpus, dtype=np.int32)
        ls, lt = lengths[src], lengths[tgt]
        if target_tokenizer is not None:
            if pretokenized:
                raise ValueError("data.pretokenized holds the student's tokens: the target side's reader cannot "
                                 "count them (give raw corpora)")
            segments_of_targets = np.unique(tgt)
            target_lengths = np.zeros(len(raw.texts), dtype=np.int64)
            target_lengths[segments_of_targets] = tokenize_texts(
                [raw.texts[i] for i in segments_of_targets], [raw.langs[i] for i in segments_of_targets],
                target_tokenizer, data_cfg.get("num_proc", 1), f"laser-{key}-targets")["length"]
            lt = target_lengths[tgt]
        # `length` counts </s>: a side with no token after preprocessing is empty
        ratio_hit = np.maximum(ls, lt) > float(ratio) * np.minimum(ls, lt) if ratio else np.zeros(len(ls), bool)
        reasons = {"empty": (ls <= 1) | (lt <= 1), "too_long": (ls > max_length) | (lt > max_length),
                   "length_ratio": ratio_hit}
        keep = np.ones(len(src), dtype=bool)
        for reason in SKIP_REASONS:  # each skipped pair is counted once, under its first reason
            hit = reasons[reason] & keep
            for ci, n in zip(*np.unique(corpus[hit], return_counts=True)):
                raw.stats[ci]["skipped"][reason] += int(n)
                raw.stats[ci]["pairs"] -= int(n)
            keep &= ~reasons[reason]
        np.savez(tmp / "pairs.npz", src=src[keep], tgt=tgt[keep], direction=direction[keep], corpus=corpus[keep])
        kept_direction = direction[keep]
        per_direction = {f"{s}-{t}": int((kept_direction == d).sum()) for d, (s, t) in enumerate(raw.directions)}
        stats = {"corpora": raw.stats, "pairs": int(keep.sum()), "pairs_per_direction": per_direction,
                 "skipped": {r: sum(c["skipped"][r] for c in raw.stats) for r in SKIP_REASONS},
                 "missing": sum(c["missing"] for c in raw.stats), "segments": len(raw.texts)}
        meta = {"version": DATA_FORMAT_VERSION, "directions": raw.directions, "stats": stats,
                "target_languages": targets, "max_length": max_length, "max_length_ratio": ratio}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))
        _atomic_publish(tmp, path)
        if not stats["pairs"]:
            raise ValueError(f"every sentence pair was skipped ({stats['skipped']}); check max_length and the data")
    meta = json.loads((path / "meta.json").read_text())
    pairs = np.load(path / "pairs.npz")
    if not len(pairs["src"]):
        raise ValueError(f"every sentence pair was skipped ({meta['stats']['skipped']}); check max_length and the data")
    tokens = TokenTable(datasets.load_from_disk(str(path / "segments")))
    return ParallelData(tokens, pairs["src"], pairs["tgt"], pairs["direction"], pairs["corpus"],
                        [tuple(d) for d in meta["directions"]], meta["stats"], path)


@dataclass
class ValidData:
    """A held-out multi-parallel set: `rows[lang]` are token-table indices of that language's aligned lines."""

    tokens: TokenTable
    rows: dict[str, np.ndarray]
    path: Path


def prepare_valid_data(valid_cfg: dict, languages: Sequence[str], tokenizer, *, cache_dir=None,
                       base_dir: str | os.PathLike = ".", num_proc: int = 1, log=print) -> ValidData | None:
    """Tokenizes (or loads from the cache) the validation folder for the languages it has; None if none."""
    import datasets

    folder = Path(base_dir) / valid_cfg["path"]
    if not folder.is_dir():
        raise FileNotFoundError(f"validation folder {folder} not found")
    _, files = _lang_files(folder)
    langs = [lang for lang in dict.fromkeys(languages) if lang in files]
    missing = [lang for lang in languages if lang not in files]
    if missing:
        log(f"validation: no file for {missing} in {folder}; validating on {langs}")
    if len(langs) < 2:
        return None
    max_sentences = valid_cfg.get("max_sentences")
    corpus = Corpus(str(folder), "multiparallel", {lang: files[lang] for lang in langs})
    pretokenized = bool(valid_cfg.get("pretokenized"))
    if pretokenized:
        check_pretokenized(list(corpus.files.values()), tokenizer)
    key = _cache_key({"version": DATA_FORMAT_VERSION, "valid": corpus.fingerprint(), "max": max_sentences,
                      "tokenizer": tokenizer_fingerprint(tokenizer),
                      **({"pretokenized": True} if pretokenized else {})})
    cache_root = Path(cache_dir or default_cache_dir())
    path = cache_root / f"valid-{key}"
    if not (path / "meta.json").is_file():
        lines = {lang: read_text_lines(files[lang]) for lang in langs}
        n = {len(v) for v in lines.values()}
        if len(n) != 1:
            raise ValueError(f"validation files in {folder} have different line counts: "
                             + ", ".join(f"{files[lang].name} ({len(v)})" for lang, v in lines.items()))
        n_rows = min(n.pop(), max_sentences or 1 << 62)
        texts = [line for lang in langs for line in lines[lang][:n_rows]]
        cache_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".valid-{key}-", dir=cache_root))
        segments = tokenize_texts(texts, [lang for lang in langs for _ in range(n_rows)], tokenizer, num_proc,
                                  f"laser-valid-{key}", pretokenized=pretokenized)
        segments.save_to_disk(str(tmp / "segments"))
        (tmp / "meta.json").write_text(json.dumps({"languages": langs, "rows": n_rows}))
        _atomic_publish(tmp, path)
    meta = json.loads((path / "meta.json").read_text())
    tokens = TokenTable(datasets.load_from_disk(str(path / "segments")))
    n_rows = meta["rows"]
    rows = {lang: np.arange(i * n_rows, (i + 1) * n_rows) for i, lang in enumerate(meta["languages"])}
    return ValidData(tokens, rows, path)


def prepare_extra_valid_data(path: str | os.PathLike, languages: Sequence[str], tokenizer, *,
                             max_sentences: int | None = None, cache_dir=None, base_dir: str | os.PathLike = ".",
                             num_proc: int = 1, log=print) -> dict[str, ValidData]:
    """The multi-parallel sets in the subfolders of `path` (e.g. `de-en/{de,en}.txt` from
    training/split_tatoeba.py), each tokenized like the main validation folder; sets with fewer than two of
    `languages` are left out (and named)."""
    folder = Path(base_dir) / path
    if not folder.is_dir():
        raise FileNotFoundError(f"validation.extra_path {folder} not found")
    sets, skipped = {}, []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        data = prepare_valid_data({"path": str(sub), "max_sentences": max_sentences}, languages, tokenizer,
                                  cache_dir=cache_dir, num_proc=num_proc, log=lambda _msg: None)
        if data is None:
            skipped.append(sub.name)
        else:
            sets[sub.name] = data
    if not sets:
        raise ValueError(f"validation.extra_path {folder} has no subfolder with two of the run's languages")
    if skipped:
        log(f"extra validation: sets without two of the run's languages left out: {skipped}")
    return sets


# ---------------------------------------------------------------------------------------------- batching
def token_budget_batches(src_len: np.ndarray, tgt_len: np.ndarray, max_tokens: int, max_sentences: int | None,
                         rng: np.random.Generator) -> list[np.ndarray]:
    """Length-bucketed batches: examples sorted by (source, target) length with random tie-breaking, then cut so that
    neither padded side exceeds `max_tokens` tokens (nor `max_sentences` sentences). Returns local index arrays."""
    n = len(src_len)
    if n == 0:
        return []
    order = np.lexsort((rng.random(n), tgt_len, src_len))
    s_sorted, t_sorted = src_len[order].tolist(), tgt_len[order].tolist()
    cap = max_sentences or n
    bounds, start, max_s, max_t = [], 0, 0, 0
    for i, (s, t) in enumerate(zip(s_sorted, t_sorted)):
        ms, mt = max(max_s, s), max(max_t, t)
        size = i - start + 1
        if size > 1 and (size > cap or size * ms > max_tokens or size * mt > max_tokens):
            bounds.append(i)
            start, ms, mt = i, s, t
        max_s, max_t = ms, mt
    return np.split(order, bounds)


def check_corpus_weight_values(corpus_weights: dict) -> None:
    """`batching.corpus_weights` must map corpus entries to positive numbers."""
    if not isinstance(corpus_weights, dict):
        raise ValueError(f"batching.corpus_weights must map data.corpora entries to weights, got {corpus_weights!r}")
    bad = {k: v for k, v in corpus_weights.items()
           if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)}
    if bad:
        raise ValueError(f"batching.corpus_weights must be positive numbers, got {bad}")


class BatchSchedule:
    """The batches of every epoch, a pure function of `(seed, epoch)`: same order when a run is resumed.

    Batches hold one translation direction each. `sampling="alternate"` (the paper) cycles over the directions in a
    shuffled order, each batch from the next direction that has batches left; `sampling="temperature"` draws the
    direction of every batch with probability proportional to `n_pairs ** (1 / temperature)` (upsampling small
    directions, whose batches repeat with a fresh shuffle), for the same number of batches per epoch.
    `corpus_weights` (`{data.corpora entry: weight}`, temperature sampling only) changes a corpus's share without
    repeating its pairs: batches then hold one direction *of one weighted corpus* (the unweighted ones pooled), and a
    unit's probability is `(n_pairs * weight) ** (1 / temperature)`, as if the corpus were `weight` times bigger. Copies
    of a pair in one batch would be each other's false negatives under the ranking loss; here they never meet.
    Process `rank` of `world` takes batches `rank, rank + world, ...`; each process gets the same count.
    `source_only`: the model reads only the source side (a distillation student whose targets the teacher embedded),
    so only the source side counts against `max_tokens`.
    """

    def __init__(self, data: ParallelData, max_tokens: int, *, max_sentences: int | None = None,
                 sampling: str = "alternate", temperature: float = 1.0, seed: int = 0,
                 corpus_weights: dict[str, float] | None = None, source_only: bool = False):
        if sampling not in ("alternate", "temperature"):
            raise ValueError(f"batching.sampling must be 'alternate' or 'temperature', got {sampling!r}")
        if corpus_weights and sampling != "temperature":
            raise ValueError("batching.corpus_weights needs batching.sampling: temperature (alternate sampling "
                             "takes every batch once and has no share to weight)")
        self.source_only = bool(source_only)
        longest = int(data.src_lengths.max() if source_only else max(data.src_lengths.max(), data.tgt_lengths.max()))
        if longest > max_tokens:
            raise ValueError(f"max_tokens={max_tokens} is below the longest kept sentence ({longest} tokens); "
                             "raise max_tokens or lower data.max_length")
        self.data, self.max_tokens, self.max_sentences = data, max_tokens, max_sentences
        self.sampling, self.temperature, self.seed = sampling, float(temperature), seed
        self._units, self._weights, self._weighted = self._sampling_units(data, corpus_weights or {})
        self._cache: tuple[int, list[np.ndarray]] | None = None

    @staticmethod
    def _sampling_units(data: ParallelData, corpus_weights: dict[str, float]):
        """Pair indices of each sampling unit (a direction, or a direction of one weighted corpus), its weight, and
        whether it belongs to a weighted corpus."""
        if not corpus_weights:
            units = [np.flatnonzero(data.direction == d) for d in range(len(data.directions))]
            return units, np.ones(len(units)), np.zeros(len(units), dtype=bool)
        check_corpus_weight_values(corpus_weights)
        names = [c["corpus"] for c in data.stats["corpora"]]
        group = np.zeros(len(names), dtype=np.int64)  # 0: the unweighted corpora; i + 1: weighted entry i
        weights = [1.0]
        for i, (entry, weight) in enumerate(corpus_weights.items()):
            # a folder entry expands into bitexts named `{entry}/{file prefix}.{a}-{b}` (resolve_corpora)
            hit = [j for j, name in enumerate(names) if name == entry or name.startswith(f"{entry.rstrip('/')}/")]
            if not hit:
                raise ValueError(f"batching.corpus_weights: {entry!r} names no corpus of this run; the weights' keys "
                                 "are data.corpora entries as written in the config")
            group[hit] = i + 1
            weights.append(float(weight))
        pair_group = group[data.corpus]
        units, unit_groups = [], []
        for d in range(len(data.directions)):
            in_direction = data.direction == d
            for g in np.unique(pair_group[in_direction]).tolist():
                units.append(np.flatnonzero(in_direction & (pair_group == g)))
                unit_groups.append(g)
        unit_groups = np.asarray(unit_groups)
        return units, np.asarray(weights)[unit_groups], unit_groups > 0

    def batch_shares(self, weighted: bool = True) -> np.ndarray:
        """Expected share of each sampling unit in an epoch's batches under temperature sampling (`weighted=False`:
        as it would be without `corpus_weights`)."""
        sizes = np.array([len(i) for i in self._units], dtype=np.float64)
        p = (sizes * self._weights if weighted else sizes) ** (1.0 / self.temperature)
        return p / p.sum()

    def weighted_corpora_share(self) -> tuple[float, float]:
        """The weighted corpora's expected share of the batches: with their weights, and without."""
        return float(self.batch_shares()[self._weighted].sum()), float(self.batch_shares(False)[self._weighted].sum())

    def epoch(self, epoch: int) -> list[np.ndarray]:
        """All batches of an epoch (indices into the pair arrays), in training order."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        rng = np.random.default_rng([self.seed, epoch])
        src_len, tgt_len = self.data.src_lengths, self.data.tgt_lengths
        if self.source_only:
            tgt_len = np.zeros_like(tgt_len)
        per_dir = []
        for idx in self._units:
            batches = [idx[b] for b in token_budget_batches(src_len[idx], tgt_len[idx], self.max_tokens,
                                                            self.max_sentences, rng)]
            per_dir.append([batches[i] for i in rng.permutation(len(batches))])
        total = sum(map(len, per_dir))
        out: list[np.ndarray] = []
        if self.sampling == "alternate":
            queues = [list(reversed(b)) for b in per_dir]
            order = [d for d in rng.permutation(len(per_dir)) if queues[d]]
            while order:
                order = [d for d in order if queues[d]]
                out.extend(queues[d].pop() for d in order)
        else:
            p = self.batch_shares()
            position = [0] * len(per_dir)
            for d in rng.choice(len(per_dir), size=total, p=p).tolist():
                if position[d] == len(per_dir[d]):
                    per_dir[d] = [per_dir[d][i] for i in rng.permutation(len(per_dir[d]))]
                    position[d] = 0
                out.append(per_dir[d][position[d]])
                position[d] += 1
        self._cache = (epoch, out)
        return out

    def shard(self, epoch: int, rank: int, world: int, multiple: int = 1) -> list[np.ndarray]:
        """This process's batches of `epoch`; the count is the same on every process and a multiple of `multiple`."""
        batches = self.epoch(epoch)
        per_process = len(batches) // world // multiple * multiple
        return batches[rank::world][:per_process]

    def steps_in_epoch(self, epoch: int, world: int, accumulation: int) -> int:
        """Optimizer steps of `epoch` (batch counts vary a little between epochs with the random tie-breaking)."""
        return len(self.epoch(epoch)) // world // accumulation


class PairBatches(torch.utils.data.Dataset):
    """`dataset[index_array]` → a padded batch: `input_ids`/`attention_mask` `(batch, src_len)` (right padding),
    `labels` `(batch, tgt_len)` padded with -100, `target_lang_ids` `(batch,)`; for a `DataLoader(batch_size=None)`."""

    def __init__(self, data: ParallelData, target_languages: Sequence[str], pad_token_id: int = 1):
        self.data, self.pad = data, pad_token_id
        lang_index = {lang: i for i, lang in enumerate(target_languages)}
        # -1: a direction into a language the decoder has no embedding for (data.bitext_pairs: all, ranking only)
        self.direction_target = np.array([lang_index.get(t, -1) for _, t in data.directions], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.data)

    def _pad(self, segments: np.ndarray, value: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.data.tokens
        lengths = tokens.lengths[segments]
        out = np.full((len(segments), int(lengths.max())), value, dtype=np.int64)
        for row, (seg, n) in enumerate(zip(segments.tolist(), lengths.tolist())):
            out[row, :n] = tokens.values[tokens.offsets[seg]:tokens.offsets[seg] + n]
        mask = np.arange(out.shape[1])[None, :] < lengths[:, None]
        return torch.from_numpy(out), torch.from_numpy(mask.astype(np.int64))

    def __getitem__(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        index = np.asarray(index)
        input_ids, attention_mask = self._pad(self.data.src[index], self.pad)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": self._pad(self.data.tgt[index], -100)[0],
            "target_lang_ids": torch.from_numpy(self.direction_target[self.data.direction[index]]),
        }


class ListSampler(torch.utils.data.Sampler):
    """Yields the given items in order (the schedule's batches of one process, from a resume offset)."""

    def __init__(self, items: list):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)
