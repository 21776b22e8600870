"""The files that make a saved LASER directory usable by libraries that know nothing of hf_laser.

Besides the weights, `config.json` and the tokenizer files, an encoder directory (`LaserModel`) gets:

* in `config.json`, an `auto_map` for `AutoConfig`, `AutoModel`, `AutoModelForSequenceClassification` and, once
  the tokenizer is saved, `AutoTokenizer` (transformers reads the tokenizer's from `tokenizer_config.json`, which
  `LaserTokenizer.save_pretrained` writes); the code they name is copied next to them by transformers;
* in `config.json`, `custom_pipelines`: the `feature-extraction` pipeline is `pipeline_laser.py`'s (it takes `lang=`);
* once both model and tokenizer are saved, the sentence-transformers files: `modules.json` (a single module,
  `sentence_transformers_laser.LaserSentenceTransformerModule`, saved in the root), `config_sentence_transformers.json`
  (cosine similarity, no prompts, sentence-transformers >= 6 required) and the module's code.

`LaserPreTrainedModel.save_pretrained` and `LaserTokenizer.save_pretrained` both call [`write_integration_files`]
after writing their own files, so the result does not depend on which of the two is saved first. Classifier and
pre-training directories only get the `AutoTokenizer` entry (they are not sentence encoders).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

# where this file and the code files below are: hf_laser's source, or a copy made by transformers for remote code
SOURCES = Path(__file__).resolve().parent

ENCODER_AUTO_MAP = {
    "AutoConfig": "configuration_laser.LaserConfig",
    "AutoModel": "modeling_laser.LaserModel",
    "AutoModelForSequenceClassification": "modeling_laser.LaserForSequenceClassification",
}
TOKENIZER_AUTO_MAP = ["tokenization_laser.LaserTokenizer", None]  # (slow, fast), as transformers writes it
PIPELINE_FILE = "pipeline_laser.py"
CUSTOM_PIPELINES = {
    "feature-extraction": {"impl": "pipeline_laser.LaserFeatureExtractionPipeline", "pt": ["AutoModel"], "tf": [],
                           "type": "text"},
}
SENTENCE_TRANSFORMERS_FILE = "sentence_transformers_laser.py"
SENTENCE_TRANSFORMERS_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers_laser.LaserSentenceTransformerModule"},
]
SENTENCE_TRANSFORMERS_CONFIG = {
    "model_type": "SentenceTransformer",
    "prompts": {},
    "default_prompt_name": None,
    "similarity_fn_name": "cosine",
    "requirements": {
        "sentence_transformers": {
            "specifier": ">=6.0",
            "reason": "the LASER module implements the InputModule API of sentence-transformers 6",
        },
    },
}


def _read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data) -> None:
    # the layout transformers uses for config.json
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def has_laser_tokenizer(directory: str | Path) -> bool:
    """Whether `directory` holds a saved `LaserTokenizer` with its code."""
    directory = Path(directory)
    tokenizer_config = _read_json(directory / "tokenizer_config.json")
    return (isinstance(tokenizer_config, dict) and tokenizer_config.get("tokenizer_class") == "LaserTokenizer"
            and (directory / "tokenization_laser.py").is_file())


def _pipeline_source() -> Path:
    # A relative import, not a path: transformers copies the files this module imports next to it (into a saved
    # directory, and into its module cache for remote code), so a model loaded as remote code can ship it again.
    from .pipeline_laser import LaserFeatureExtractionPipeline

    return Path(sys.modules[LaserFeatureExtractionPipeline.__module__].__file__)


def _copy_source(name: str, directory: Path) -> bool:
    source = _pipeline_source() if name == PIPELINE_FILE else SOURCES / name
    if not source.is_file():
        # a model loaded as remote code and saved again: the cached code holds only what transformers copied
        logger.warning(f"{name} is not next to {__file__}: {directory} is saved without the files that need it "
                       "(save it with hf_laser installed to get them)")
        return False
    if source.resolve() != (directory / name).resolve():
        shutil.copyfile(source, directory / name)
    return True


def write_integration_files(directory: str | Path) -> None:
    """Adds the integration entries and files (module docstring) to a saved LASER directory; a no-op for a
    directory without a LASER `config.json` (e.g. a tokenizer saved alone)."""
    directory = Path(directory)
    config = _read_json(directory / "config.json")
    if not isinstance(config, dict) or config.get("model_type") != "laser":
        return
    tokenizer = has_laser_tokenizer(directory)
    encoder = config.get("architectures") == ["LaserModel"]
    updated = dict(config, auto_map=dict(config.get("auto_map") or {}))
    if encoder:
        updated["auto_map"].update(ENCODER_AUTO_MAP)
        if _copy_source(PIPELINE_FILE, directory):
            updated["custom_pipelines"] = CUSTOM_PIPELINES
    if tokenizer:
        updated["auto_map"]["AutoTokenizer"] = TOKENIZER_AUTO_MAP
    if updated != config:
        _write_json(directory / "config.json", updated)
    if encoder and tokenizer and _copy_source(SENTENCE_TRANSFORMERS_FILE, directory):
        (directory / "modules.json").write_text(json.dumps(SENTENCE_TRANSFORMERS_MODULES, indent=2) + "\n",
                                                encoding="utf-8")
        _write_json(directory / "config_sentence_transformers.json", SENTENCE_TRANSFORMERS_CONFIG)
