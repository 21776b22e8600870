"""Teacher-student distillation (LASER3's recipe, Heffernan, Çelebi & Schwenk 2022): a fixed teacher embeds the
target side of each training pair, and the student learns to put the source sentence where the teacher put its
translation (cosine loss).

- The **teacher** is any `LaserEncoder` directory (laser-mini, a converted LASER2 ...), loaded frozen; it reads the
  raw target sentences with its own tokenizer, whatever the student's vocabulary.
- Its **targets are computed once** per target language with `LaserEncoder.encode_file` into `cache_dir`
  (`OUT/teacher` by default): every file carries the manifest every hf_laser output has (teacher weights and
  tokenizer hashes, the sentences' sha256, options), so a re-run or a `--resume` reuses them only when they were
  computed by this teacher from these sentences, and recomputes them (saying why) otherwise: a student is never
  paired with another teacher's targets.
- [`TeacherTargets`] maps each target segment of the training data to its row; [`DistillationBatches`] adds
  `teacher_embedding` `(batch, dim)` to each batch; [`validate_distillation`] measures the student against the teacher
  on the validation folders (xsim error of student(xx) vs teacher(target), both directions).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from training.data import PairBatches, ParallelData, _lang_files, collect_pairs, read_text_lines, resolve_corpora


def load_teacher(path: str | Path, device: str | torch.device = "cpu"):
    """The teacher as a `LaserEncoder` (PyTorch, float32; its weights are never trained)."""
    from hf_laser import LaserEncoder

    teacher = LaserEncoder.from_pretrained(str(path), device=None if str(device) == "cpu" else device, engine="torch")
    if getattr(teacher, "tokenizer", None) is None:
        raise ValueError(f"distillation.teacher {path} has no tokenizer: the teacher reads raw target sentences")
    return teacher


class TeacherTargets:
    """The teacher's embeddings of the target segments of a [`ParallelData`] (see the module docstring)."""

    def __init__(self, files: list[Path], file_of_segment: np.ndarray, row_of_segment: np.ndarray, dim: int):
        self.files, self.file_of_segment, self.row_of_segment, self.dim = files, file_of_segment, row_of_segment, dim
        self._arrays = None  # opened lazily: DataLoader workers each map the files themselves

    @classmethod
    def prepare(cls, data: ParallelData, data_cfg: dict, teacher, cache_dir: Path, *, base_dir=".", log=print):
        """Embeds (or reuses) the target side of `data` with `teacher` into `cache_dir/{lang}.npy`."""
        corpora = resolve_corpora(data_cfg["corpora"], base_dir)
        sources = data_cfg.get("source_languages", "all")
        sources = None if sources in (None, "all") else list(sources)
        # the segments of data.tgt index the texts of the same pairing (it is deterministic: same files, same order)
        raw = collect_pairs(corpora, sources, list(data_cfg["target_languages"]), data_cfg.get("bitext_pairs",
                                                                                                  "targets"))
        if len(raw.texts) != len(data.tokens):
            raise ValueError(f"the corpora changed since the training data was prepared ({len(raw.texts)} segments "
                             f"now, {len(data.tokens)} in {data.path}): prepare it again (a new data.cache_dir)")
        cache_dir.mkdir(parents=True, exist_ok=True)
        segments = np.unique(data.tgt)
        langs = np.asarray(raw.langs, dtype=object)[segments]
        file_of = np.full(len(raw.texts), -1, dtype=np.int32)
        row_of = np.full(len(raw.texts), -1, dtype=np.int64)
        files = []
        for lang in sorted(set(langs.tolist())):
            mine = segments[langs == lang]
            text_file = cache_dir / f"{lang}.txt"
            text = "".join(raw.texts[s].replace("\n", " ") + "\n" for s in mine)
            if not text_file.is_file() or text_file.read_text(encoding="utf-8", errors="surrogateescape") != text:
                text_file.write_text(text, encoding="utf-8", errors="surrogateescape")
            out = cache_dir / f"{lang}.npy"
            log(f"teacher targets: {len(mine):,} {lang} sentences -> {out}")
            embeddings, stats = teacher._encode_file(
                text_file, out, lang=lang, pretokenized=False, fp16=False, max_tokens=12000, batch_size=None,
                chunk_lines=100_000, normalize_embeddings=False, device=None, show_progress_bar=False, resume=True,
                num_proc=1, say=lambda m: log(f"teacher targets: {m}"))
            log(f"teacher targets: {lang}: " + ("reused (same teacher, same sentences)" if stats.get("reused")
                                                else f"computed {stats.get('computed', len(mine)):,} embeddings"))
            if embeddings.shape[0] != len(mine):
                raise ValueError(f"{out} has {embeddings.shape[0]} rows for {len(mine)} sentences")
            file_of[mine] = len(files)
            row_of[mine] = np.arange(len(mine))
            files.append(out)
        manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
        log(f"teacher targets from model {manifest['identity']['model'][:12]}, dimension {teacher.dim}")
        return cls(files, file_of, row_of, teacher.dim)

    def get(self, segments: np.ndarray) -> torch.Tensor:
        """`(len(segments), dim)` float32 teacher embeddings of these target segments."""
        if self._arrays is None:
            self._arrays = [np.load(f, mmap_mode="r") for f in self.files]
        out = np.empty((len(segments), self.dim), dtype=np.float32)
        which = self.file_of_segment[segments]
        if (which < 0).any():
            raise KeyError("a target segment without a teacher embedding")
        for k, array in enumerate(self._arrays):
            hit = which == k
            if hit.any():
                out[hit] = array[self.row_of_segment[segments[hit]]]
        return torch.from_numpy(out)

    def __getstate__(self):  # (memory maps are reopened by each worker)
        return {**self.__dict__, "_arrays": None}


class DistillationBatches(PairBatches):
    """[`PairBatches`] plus `teacher_embedding` `(batch, dim)`: the teacher's embedding of each pair's target."""

    def __init__(self, data: ParallelData, target_languages, targets: TeacherTargets, pad_token_id: int = 1):
        super().__init__(data, target_languages, pad_token_id)
        self.targets = targets

    def __getitem__(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        batch = super().__getitem__(index)
        batch["teacher_embedding"] = self.targets.get(self.data.tgt[np.asarray(index)])
        return batch


@torch.no_grad()
def validate_distillation(model, valid, folder: Path, max_sentences, target_languages, teacher, accelerator,
                          vcfg: dict, cache: dict) -> dict:
    """xsim error (%, mean of both directions) of the student's embeddings of each source language of `valid`
    against the teacher's of each target language (raw lines of `folder`, embedded once into `cache`):
    `valid_error` (mean) and `valid_error_<lang>`."""
    from training.common import embed_valid_rows, similarity_error

    was_training = model.training
    model.eval()
    device, tokens = accelerator.device, valid.tokens
    _, files = _lang_files(Path(folder))
    per_lang = {}
    for target in target_languages:
        if target not in valid.rows:
            continue
        key = (str(folder), target)
        if key not in cache:
            lines = read_text_lines(files[target])[: len(valid.rows[target])]
            cache[key] = torch.from_numpy(np.asarray(teacher.encode(lines, lang=target))).to(device)
        for lang, rows in valid.rows.items():
            if lang in target_languages:
                continue
            out = embed_valid_rows(model, tokens, rows, accelerator, vcfg["max_tokens"])
            error = (similarity_error(out, cache[key]) + similarity_error(cache[key], out)) / 2
            per_lang.setdefault(lang, []).append(100 * error)
    model.train(was_training)
    result = {f"valid_error_{lang}": sum(e) / len(e) for lang, e in per_lang.items()}
    if result:
        result["valid_error"] = sum(result.values()) / len(result)
    return result
