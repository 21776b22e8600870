"""LASER in MTEB (mteb 2.x): an encoder that preprocesses every task's text in the task's language.

    import mteb
    from hf_laser.integrations.mteb import LaserMTEBEncoder

    model = LaserMTEBEncoder("laser-93langs")                    # a LASER directory or Hub id (default: laser-mini)
    tasks = mteb.get_tasks(tasks=["Tatoeba", "BUCC.v2", "STS17", "MassiveIntentClassification"])
    results = mteb.evaluate(model, tasks, encode_kwargs={"batch_size": 256})

LASER's preprocessing depends on the language (Moses rules and prefixes, jieba for Chinese, MeCab for Japanese,
romanised Greek), which a plain sentence-transformers model in MTEB cannot be told. Here, for every `encode` call:

1. the languages of the call's subset come from the task metadata: `eval_langs[hf_subset]` (or `eval_langs` for a
   task without subsets; the subset itself for bitext tasks with parallel subsets, which name the column's
   language), e.g. `["fra-Latn", "eng-Latn"]`, and are mapped to tokenizer codes with
   `hf_laser.text.preprocessing.normalize_lang` (`fra-Latn` -> `fr`, `cmn-Hans` -> `zh`, `lvs-Latn` -> `lv`; for all
   112 Tatoeba subsets this gives the codes `evaluation/tatoeba.py` uses);
2. one code: the call is preprocessed with it. Several (cross-lingual subsets: Tatoeba `fra-eng`, BUCC `de-en`,
   STS17 `en-de`, ...: MTEB encodes each side with its own call, with the same `hf_subset`), the call's language is
   identified among them ([`identify_language`]): py3langid classifies (up to 1,000 of) the call's sentences, the
   subset language with most votes wins; when most sentences are in none of the subset's languages (py3langid does
   not know the language, e.g. Kadazan `kzj`), the one subset language py3langid cannot recognise is taken.
   Measured on Tatoeba v1 and the BUCC sample sets: every column gets its own language
   (`tests/test_mteb.py::test_column_languages_on_all_of_tatoeba`).

A call is taken to be in one language; that is how MTEB's evaluators call `encode` (one side of one subset at a
time). The decisions are logged (`logging`, logger `hf_laser.integrations.mteb`, level INFO) and kept in `language_log`.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mteb.models import ModelMeta
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ScoringFunction

from ..encoder import LaserEncoder
from ..models import resolve_model
from ..text.langid import classify, sample, supported_codes
from ..text.preprocessing import normalize_lang
from ..text.sonar_languages import sonar_tag

__all__ = ["LaserMTEBEncoder", "subset_languages", "identify_language", "texts_sha256"]

logger = logging.getLogger(__name__)

IDENTIFY_SAMPLE = 1000  # sentences of a call classified to tell the languages of a cross-lingual subset apart
_OTHER = None  # vote for "none of the subset's languages"

LASER_CITATION = """@article{artetxe2019massively,
  title   = {Massively Multilingual Sentence Embeddings for Zero-Shot Cross-Lingual Transfer and Beyond},
  author  = {Artetxe, Mikel and Schwenk, Holger},
  journal = {Transactions of the Association for Computational Linguistics},
  volume  = {7},
  pages   = {597--610},
  year    = {2019}
}"""


def subset_languages(task_metadata, hf_subset: str) -> list[str]:
    """The tokenizer codes of the languages of `hf_subset` (in the task's order, without repeats)."""
    eval_langs = task_metadata.eval_langs
    if isinstance(eval_langs, dict):
        # a bitext task with parallel subsets passes the column (named after its language) as the subset
        langs = eval_langs.get(hf_subset, [hf_subset])
    else:
        langs = eval_langs
    codes = []
    for lang in langs:
        code = normalize_lang(lang)
        if code not in codes:
            codes.append(code)
    if not codes:
        raise ValueError(f"task {task_metadata.name!r} lists no language for subset {hf_subset!r}")
    return codes


def sonar_task_language(task_metadata, hf_subset: str, code: str) -> str:
    """The SONAR tag of the task language `code` names (its tokenizer code, from [`subset_languages`]): SONAR's
    tag needs the script the task gives (`zho-Hant`), which the tokenizer code (`zh`) has lost."""
    eval_langs = task_metadata.eval_langs
    langs = eval_langs.get(hf_subset, [hf_subset]) if isinstance(eval_langs, dict) else eval_langs
    for lang in langs:
        if normalize_lang(lang) == code:
            return sonar_tag(lang.replace("-", "_"))
    return sonar_tag(code)


def identify_language(texts: Sequence[str], candidates: Sequence[str]) -> str:
    """The language of `texts` (one language, e.g. one side of a bitext subset) among `candidates` (see the module
    docstring). Raises ValueError when the sentences do not tell (e.g. none has a letter)."""
    if len(candidates) == 1:
        return candidates[0]
    votes: Counter = Counter()
    for text in sample(list(texts), IDENTIFY_SAMPLE):
        found = classify(text)
        if found is not None:
            votes[found[0] if found[0] in candidates else _OTHER] += 1
    ranked = sorted(candidates, key=lambda code: -votes[code])  # stable: ties keep the task's order
    if votes[ranked[0]] >= votes[_OTHER] and votes[ranked[0]] > 0:
        return ranked[0]
    unrecognisable = [code for code in candidates if code not in supported_codes()]
    if votes[_OTHER] and len(unrecognisable) == 1:
        return unrecognisable[0]
    if votes[ranked[0]] > votes[ranked[1]]:
        return ranked[0]
    raise ValueError(f"cannot tell which of {list(candidates)} the {len(texts)} sentences are in (language votes: "
                     f"{dict(votes)}); LaserMTEBEncoder(lang_overrides=...) sets it")


def texts_sha256(texts: Sequence[str]) -> str:
    """A short digest of a call's sentences (identifies the call in `LaserMTEBEncoder.language_log`)."""
    return hashlib.sha256("\n".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


class LaserMTEBEncoder(AbsEncoder):
    """An MTEB encoder (`mteb.models.EncoderProtocol`) around [`LaserEncoder`].

    Args:
        model_name: LASER directory or Hub id (default: the shipped laser-mini).
        revision: the Hub revision, also MTEB's result folder name; for a local directory the first 12 hex digits
            of the sha256 of its config and weights.
        device: where the model runs.
        name: the model name MTEB files results under (default: the Hub id, or `hf_laser/<directory name>`).
        max_tokens: the encoder's token budget per batch (MTEB's `batch_size` is not used: LASER batches by
            tokens).
        lang_overrides: `{(task name, hf_subset): code}` or `{task name: code}`, for a call that should not follow
            the task metadata (see the module docstring).
        encoder: an already loaded [`LaserEncoder`] (then `model_name` only names it).
        kwargs: passed to `LaserEncoder.from_pretrained` (e.g. `dtype=torch.bfloat16`).
    """

    def __init__(self, model_name: str | None = None, revision: str | None = None, *, device: str | None = None,
                 name: str | None = None, max_tokens: int | None = None, lang_overrides: dict | None = None,
                 encoder: LaserEncoder | None = None, **kwargs: Any):
        if encoder is None:
            path = resolve_model(model_name, who="LaserMTEBEncoder")
            _check_laser_directory(path)
            if revision is not None:
                kwargs["revision"] = revision
            if "speed" not in kwargs:
                kwargs.setdefault("engine", "torch")  # (PyTorch, as before the library's default became NumPy's)
            encoder = LaserEncoder.from_pretrained(path, device=device, **kwargs)
        elif kwargs:
            raise TypeError(f"{sorted(kwargs)} are loading options: they cannot apply to an already loaded encoder")
        else:
            path = model_name or encoder.model.config.name_or_path
        if encoder.tokenizer is None:
            raise ValueError(f"{path} has no tokenizer (a dictionary-only directory): MTEB gives raw text")
        self.encoder = encoder
        self.model = encoder.model
        self.max_tokens = max_tokens
        self.lang_overrides = dict(lang_overrides or {})
        self.language_log: list[dict] = []
        local = Path(str(path)).is_dir()
        if revision is None and local:
            revision = encoder.model_identity()["model"][:12]
        config = encoder.model.config
        self.mteb_model_meta = ModelMeta(
            loader=LaserMTEBEncoder,
            name=name or (f"hf_laser/{Path(str(path)).name}" if local else str(path)),
            revision=revision,
            release_date=None,
            languages=None,
            n_parameters=(sum(p.numel() for p in encoder.model.parameters()) if encoder.engine == "torch" else
                          sum(a.size for a in encoder.model.state_dict().values())),
            memory_usage_mb=None,
            # an LSTM: no position limit; SONAR: its 514 positions
            max_tokens=float(getattr(config, "max_position_embeddings", float("inf"))
                             if getattr(config, "model_type", None) == "sonar" else float("inf")),
            embed_dim=encoder.dim,
            license="cc-by-nc-4.0" if getattr(config, "model_type", None) == "sonar" else None,
            open_weights=True,
            public_training_code=None,
            public_training_data=None,
            framework=["PyTorch", "Transformers"],
            reference="https://github.com/facebookresearch/" + (
                "SONAR" if getattr(config, "model_type", None) == "sonar" else "LASER"),
            similarity_fn_name=ScoringFunction.COSINE,
            use_instructions=False,
            training_datasets=None,
            citation=LASER_CITATION,
        )
        kind = (f"SONAR {config.encoder_layers}x{config.d_model}" if getattr(config, "model_type", None) == "sonar"
                else f"{config.num_layers}x{config.hidden_size} {getattr(config, 'encoder_type', 'bilstm')}")
        logger.info(f"LaserMTEBEncoder: {self.mteb_model_meta.name} ({kind}, {encoder.dim}-d)")

    def language(self, texts: Sequence[str], task_metadata, hf_subset: str) -> str:
        """The tokenizer language of one `encode` call (module docstring); recorded in `language_log`."""
        override = self.lang_overrides.get((task_metadata.name, hf_subset), self.lang_overrides.get(task_metadata.name))
        candidates = subset_languages(task_metadata, hf_subset)
        code = override if override is not None else identify_language(texts, candidates)
        if override is None and getattr(self.model.config, "model_type", None) == "sonar":
            code = sonar_task_language(task_metadata, hf_subset, code)
        self.language_log.append({"task": task_metadata.name, "subset": hf_subset, "n": len(texts),
                                  "candidates": candidates, "lang": code, "texts_sha256": texts_sha256(texts)})
        logger.info(f"{task_metadata.name} [{hf_subset}]: {len(texts)} sentences preprocessed as {code!r} "
                    f"(subset languages {candidates})")
        return code

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        """Embeddings of the texts of `inputs` (a DataLoader of `{"text": [...]}` batches), in order. LASER has no
        prompts: `prompt_type` (query / document) does not change the embedding."""
        texts = [text for batch in inputs for text in batch["text"]]
        if not texts:
            return np.zeros((0, self.encoder.dim), dtype=np.float32)
        lang = self.language(texts, task_metadata, hf_subset)
        options = {} if self.max_tokens is None else {"max_tokens": self.max_tokens}
        return self.encoder.encode(texts, lang=lang, show_progress_bar=False, **options)


def _check_laser_directory(path) -> None:
    # lazy: transformers (the NumPy engine and the command line's start run without it)
    from transformers import PretrainedConfig

    model_type = PretrainedConfig.get_config_dict(str(path))[0].get("model_type")
    if model_type not in ("laser", "sonar"):
        raise ValueError(f"{path} is not a LASER directory (config.json model_type {model_type!r}, expected 'laser' "
                         "or 'sonar')")
