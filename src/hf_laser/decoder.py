"""`SonarTextDecoder`: SONAR sentence embeddings -> text, in any of SONAR's 202 languages, without fairseq2.

    decoder = SonarTextDecoder.from_pretrained("sonar-decoder")   # a directory `hf-laser convert` wrote
    texts = decoder.decode(embeddings, lang="fra_Latn")           # embeddings: (n, 1024) from SONAR's encoder

It generates what SONAR's `EmbeddingToTextModelPipeline.predict` generates (fairseq2's beam search, step for step:
`modeling/sonar_generation.py`), greedy with `beam_size=1`. The embeddings are SONAR's encoder's (`LaserEncoder` on a
converted SONAR directory, not normalised): a LASER embedding, or a normalised one, is not what the decoder was
trained on, and gives text that looks like text but means nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from transformers.utils import logging as hf_logging

from .checkpoints.sonar_decoder import SPM_FILE
from .errors import UsageError
from .modeling.configuration_sonar_decoder import SonarDecoderConfig
from .modeling.modeling_sonar_decoder import SonarDecoderModel
from .modeling.sonar_generation import GenerationOptions, Hypothesis, beam_search
from .text.sonar_languages import sonar_tag
from .text.sonar_text_tokenizer import EOS, SonarTextTokenizer
from .text.text_tokenizer import LaserInputError

__all__ = ["SonarTextDecoder"]

DEFAULT_BATCH_SIZE = 5  # SONAR's pipeline's (`predict(batch_size=5)`); each input's result does not depend on it


def is_sonar_decoder_directory(path: str | os.PathLike) -> bool:
    config = Path(path) / "config.json"
    if not config.is_file() or config.stat().st_size > 1_000_000:
        return False
    return '"sonar_decoder"' in config.read_text(encoding="utf-8", errors="replace")


class SonarTextDecoder:
    """SONAR's text decoder and its tokenizer (module docstring)."""

    def __init__(self, model: SonarDecoderModel, tokenizer: SonarTextTokenizer):
        if model.config.vocab_size != tokenizer.vocab_size:
            raise ValueError(f"the decoder has {model.config.vocab_size} rows, the tokenizer {tokenizer.vocab_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, device: str | torch.device = "cpu",
                        dtype: torch.dtype | None = None) -> SonarTextDecoder:
        """A directory `hf-laser convert` wrote from `sonar_text_decoder.pt` (config.json with model_type
        "sonar_decoder", model.safetensors, sentencepiece.bpe.model). float32 unless `dtype` says otherwise."""
        path = Path(path)
        if not path.is_dir():
            raise UsageError(f"SONAR decoder directory not found: {path} (convert sonar_text_decoder.pt with "
                             f"`hf-laser convert`)")
        if not is_sonar_decoder_directory(path):
            raise UsageError(f"{path} is not a SONAR decoder directory (its config.json has no model_type "
                             f"'sonar_decoder')")
        config = SonarDecoderConfig.from_pretrained(path)
        quiet = hf_logging.is_progress_bar_enabled()
        if quiet:  # a local directory: no "Loading weights" bar
            hf_logging.disable_progress_bar()
        try:
            model = SonarDecoderModel.from_pretrained(path, config=config, dtype=dtype or torch.float32)
        finally:
            if quiet:
                hf_logging.enable_progress_bar()
        tokenizer = SonarTextTokenizer(path / SPM_FILE, langs=getattr(config, "langs", None))
        return cls(model.to(device), tokenizer)

    @property
    def embedding_dim(self) -> int:
        return self.model.config.d_model

    def target_prefix(self, lang: str) -> list[int]:
        """The prompt of a target language, fairseq2's NLLB `mode="target"` prefix: `</s> __lang__`."""
        return [EOS, self.tokenizer.lang_ids[sonar_tag(lang, self.tokenizer.langs)]]

    def generate(self, embeddings, lang: str, *, batch_size: int = DEFAULT_BATCH_SIZE,
                 progress: Callable[[int], None] | None = None, **options) -> list[list[Hypothesis]]:
        """Every hypothesis of every embedding, best first. `lang`: any name hf_laser takes for a language
        (FLORES-200 code, ISO 639-1/3, English name) that names one of SONAR's tags. `options`: fairseq2's
        generator options ([`GenerationOptions`]: beam_size 5, min_gen_len, max_gen_len, max_seq_len,
        normalize_scores, temperature, unk_penalty, len_penalty). `progress(n)` is called after each batch."""
        generation = GenerationOptions(**options)
        prompt = self.target_prefix(lang)
        rows = self._check(embeddings)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        out: list[list[Hypothesis]] = []
        for start in range(0, len(rows), batch_size):
            batch = np.array(rows[start:start + batch_size], dtype=np.float32)  # a copy: a memory map is read-only
            if not np.isfinite(batch).all():  # (checked batch by batch: a memory-mapped file is never read whole)
                raise LaserInputError(f"embeddings {start}-{start + len(batch) - 1} hold NaN or infinite values")
            batch = torch.from_numpy(batch)
            out += beam_search(self.model, batch, prompt, generation)
            if progress is not None:
                progress(len(batch))
        return out

    def decode(self, embeddings, lang: str, **kwargs) -> list[str]:
        """The text of each embedding in `lang` (the best hypothesis; [`generate`] for the arguments)."""
        return [self.tokenizer.decode(beam[0].ids) for beam in self.generate(embeddings, lang, **kwargs)]

    def _check(self, embeddings) -> np.ndarray:
        if isinstance(embeddings, torch.Tensor):
            embeddings = embeddings.detach().to("cpu", torch.float32).numpy()
        rows = np.asarray(embeddings)
        if rows.ndim == 1:
            rows = rows[None]
        if rows.ndim != 2 or rows.shape[1] != self.embedding_dim:
            raise LaserInputError(f"embeddings must be (n, {self.embedding_dim}) (SONAR's encoder's), got shape "
                                  f"{rows.shape}")
        if not np.issubdtype(rows.dtype, np.floating):
            raise LaserInputError(f"embeddings must be floating-point, got {rows.dtype}")
        return rows
