"""The files that make a saved LASER directory usable by libraries that know nothing of hf_laser.

Besides the weights, `config.json` and the tokenizer files, an encoder directory (`LaserModel`) gets:

* in `config.json`, an `auto_map` for `AutoConfig`, `AutoModel`, `AutoModelForSequenceClassification` and, once
  the tokenizer is saved, `AutoTokenizer` (transformers reads the tokenizer's from `tokenizer_config.json`, which
  gets it too);
* in `config.json`, `custom_pipelines`: the `feature-extraction` pipeline is `pipeline_laser.py`'s (it takes `lang=`);
* once both model and tokenizer are saved, the sentence-transformers files: `modules.json` (a single module,
  `sentence_transformers_laser.LaserSentenceTransformerModule`, saved in the root) and
  `config_sentence_transformers.json` (cosine similarity, no prompts, sentence-transformers >= 6 required);
* the code all of these name, and the modules it imports relatively ([`code_files`]): copied from the package's own
  sources, so a written directory holds no copy older than the package. In the package these files live in several
  subpackages (`text/`, `modeling/`, `checkpoints/`, `integrations/`); a directory holds them side by side, so
  [`write_code_files`] rewrites their relative imports to the flat form transformers loads (`from ..text.bpe import`
  becomes `from .bpe import`): the file names are unique across those subpackages (`tests/test_layout.py`).

`LaserPreTrainedModel.save_pretrained` and `LaserTokenizer.save_pretrained` both call [`write_integration_files`]
after writing their own files, so the result does not depend on which of the two is saved first; `hf-laser push`
calls it on the copy it uploads. Classifier and pre-training directories get the code of their own `auto_map` and the
`AutoTokenizer` entry (they are not sentence encoders).

The package's shipped model holds none of this ([`remove_remote_code`]): with hf_laser installed the `laser` type is
registered, and its `modules.json` names the module by its package path.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

# where this file is: in hf_laser's `checkpoints/`, or in a flat copy made by transformers for remote code
SOURCES = Path(__file__).resolve().parent
# the subpackages whose files a directory's remote code may come from (in the package; a flat copy has one folder)
CODE_PACKAGES = ("text", "modeling", "checkpoints", "integrations")
_IN_PACKAGE = __name__.startswith("hf_laser.")
_RELATIVE_IMPORT = re.compile(r"^(\s*from\s+)\.+(?:\w+\.)*(\w+)(\s+import\b)", re.M)

ENCODER_AUTO_MAP = {
    "AutoConfig": "configuration_laser.LaserConfig",
    "AutoModel": "modeling_laser.LaserModel",
    "AutoModelForSequenceClassification": "modeling_laser.LaserForSequenceClassification",
}
# the auto class of each saved architecture. The classes do not `register_for_auto_class`: transformers would then
# copy the package's files as they are, two-dot imports and all; the map and the flat code are written here instead.
ARCHITECTURE_AUTO_CLASS = {
    "LaserModel": "AutoModel",
    "LaserForSequenceClassification": "AutoModelForSequenceClassification",
    "LaserForPreTraining": "AutoModelForPreTraining",
}
TOKENIZER_AUTO_MAP = ["tokenization_laser.LaserTokenizer", None]  # (slow, fast), as transformers writes it
# a SONAR text encoder directory (`modeling_sonar.py`, `tokenization_sonar.py`)
SONAR_AUTO_MAP = {"AutoConfig": "configuration_sonar.SonarConfig", "AutoModel": "modeling_sonar.SonarModel"}
SONAR_TOKENIZER_AUTO_MAP = ["tokenization_sonar.SonarTokenizer", None]
SONAR_SENTENCE_TRANSFORMERS_FILE = "sentence_transformers_sonar.py"
SONAR_SENTENCE_TRANSFORMERS_MODULE = "sentence_transformers_sonar.SonarSentenceTransformerModule"
PIPELINE_FILE = "pipeline_laser.py"
CUSTOM_PIPELINES = {
    "feature-extraction": {"impl": "pipeline_laser.LaserFeatureExtractionPipeline", "pt": ["AutoModel"], "tf": [],
                           "type": "text"},
}
SENTENCE_TRANSFORMERS_FILE = "sentence_transformers_laser.py"
SENTENCE_TRANSFORMERS_MODULE = "sentence_transformers_laser.LaserSentenceTransformerModule"
SENTENCE_TRANSFORMERS_MODULES = [{"idx": 0, "name": "0", "path": "", "type": SENTENCE_TRANSFORMERS_MODULE}]
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
    """Whether `directory` holds a saved `LaserTokenizer`."""
    tokenizer_config = _read_json(Path(directory) / "tokenizer_config.json")
    return isinstance(tokenizer_config, dict) and tokenizer_config.get("tokenizer_class") == "LaserTokenizer"


def _pipeline_source() -> Path:
    # A relative import: transformers copies the files this module imports next to it (into a saved directory, and
    # into its module cache for remote code), so a model loaded as remote code can ship the pipeline again.
    # lazy: integrations.pipeline_laser imports transformers
    from ..integrations.pipeline_laser import LaserFeatureExtractionPipeline  # noqa: F401

    return source_file(PIPELINE_FILE) or SOURCES / PIPELINE_FILE


def source_file(name: str) -> Path | None:
    """Where the code file `name` (e.g. `"bpe.py"`) is among the package's sources (a flat copy: next to this
    file), or None."""
    if not _IN_PACKAGE:
        return SOURCES / name if (SOURCES / name).is_file() else None
    for package in CODE_PACKAGES:
        if (path := SOURCES.parent / package / name).is_file():
            return path
    return None


def relative_imports(path: Path) -> list[str]:
    """The module names (the last component: the flat file name) that the code file `path` imports relatively,
    anywhere in it (function-local imports too, `try` blocks too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted({node.module.rpartition(".")[2] for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.level and node.module})


def flat_source(path: Path) -> str:
    """The text of a code file as a directory holds it: every relative import names a sibling (`from .bpe import`)."""
    return _RELATIVE_IMPORT.sub(lambda m: f"{m.group(1)}.{m.group(2)}{m.group(3)}", path.read_text(encoding="utf-8"))


def code_files(modules: Iterable[str], directory: str | Path | None = None) -> list[str]:
    """The file names of `modules` (e.g. `"modeling_laser"`) and of every module they import relatively, directly
    or not: what transformers copies for remote code. Read from the package's sources ([`source_file`]), else from
    `directory`."""
    names, todo = set(), [f"{m}.py" for m in modules]
    while todo:
        name = todo.pop()
        if name in names:
            continue
        names.add(name)
        source = source_file(name) or Path(directory or SOURCES) / name
        if source.is_file():
            todo.extend(f"{m}.py" for m in relative_imports(source))
    return sorted(names)


def write_code_files(modules: Iterable[str], directory: str | Path) -> bool:
    """Copies the code of `modules` ([`code_files`]) from the package's sources into `directory`. False, with a
    warning and nothing copied, when one of the files is neither there nor in `directory`."""
    directory = Path(directory)
    names = code_files(modules, directory)
    missing = [n for n in names if source_file(n) is None and not (directory / n).is_file()]
    if missing:
        # a model loaded as remote code and saved again: the cached code holds only what transformers copied
        logger.warning(f"{', '.join(missing)} not next to {__file__}: {directory} is saved without what needs them "
                       "(save it with hf_laser installed to get them)")
        return False
    for name in names:
        source = source_file(name)
        if source is not None and source.resolve() != (directory / name).resolve():
            (directory / name).write_text(flat_source(source), encoding="utf-8")
    return True


def _auto_map_modules(auto_map: dict) -> set[str]:
    refs = [r for v in auto_map.values() for r in (v if isinstance(v, list) else [v]) if isinstance(r, str)]
    return {r.split("--")[-1].split(".")[0] for r in refs}


def _tokenizer_class(directory: Path) -> str | None:
    tokenizer_config = _read_json(directory / "tokenizer_config.json")
    return tokenizer_config.get("tokenizer_class") if isinstance(tokenizer_config, dict) else None


def _add_tokenizer_auto_map(directory: Path, entry: list) -> None:
    tokenizer_config = _read_json(directory / "tokenizer_config.json")
    if not (tokenizer_config.get("auto_map") or {}).get("AutoTokenizer"):
        tokenizer_config["auto_map"] = dict(tokenizer_config.get("auto_map") or {}, AutoTokenizer=entry)
        _write_json(directory / "tokenizer_config.json", tokenizer_config)


def write_sonar_integration_files(directory: str | Path) -> None:
    """[`write_integration_files`] for a SONAR text encoder directory: `auto_map` (AutoConfig, AutoModel,
    AutoTokenizer), the code, and the sentence-transformers files once model and tokenizer are both there."""
    directory = Path(directory)
    tokenizer = _tokenizer_class(directory) == "SonarTokenizer" and write_code_files(["tokenization_sonar"], directory)
    if tokenizer:
        _add_tokenizer_auto_map(directory, SONAR_TOKENIZER_AUTO_MAP)
    config = _read_json(directory / "config.json")
    if not isinstance(config, dict) or config.get("model_type") != "sonar":
        return
    updated = dict(config, auto_map=dict(config.get("auto_map") or {}, **SONAR_AUTO_MAP))
    write_code_files(["modeling_sonar"], directory)
    if tokenizer:
        updated["auto_map"]["AutoTokenizer"] = SONAR_TOKENIZER_AUTO_MAP
    if updated != config:
        _write_json(directory / "config.json", updated)
    if tokenizer and write_code_files([Path(SONAR_SENTENCE_TRANSFORMERS_FILE).stem], directory):
        modules = [dict(SENTENCE_TRANSFORMERS_MODULES[0], type=SONAR_SENTENCE_TRANSFORMERS_MODULE)]
        (directory / "modules.json").write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
        _write_json(directory / "config_sentence_transformers.json", SENTENCE_TRANSFORMERS_CONFIG)


def _write_prefix_bundle(directory: Path) -> None:
    """A LASER1 tokenizer's Moses prefixes for its remote code (which has no data folder), where the directory was
    not written by `LaserTokenizer.save_pretrained` (which writes them): a shipped or staged directory."""
    # lazy: the prefix files, read only for a directory with fastBPE codes
    from ..text.nonbreaking_prefixes import BUNDLE_FILE, bundle

    if (directory / "bpe.fcodes").is_file() and not (directory / BUNDLE_FILE).is_file():
        with open(directory / BUNDLE_FILE, "w", encoding="utf-8", newline="\n") as fh:
            json.dump(bundle(), fh, ensure_ascii=False, indent=0, sort_keys=True)


def write_integration_files(directory: str | Path) -> None:
    """Adds the integration entries and files (module docstring) to a saved LASER directory: the tokenizer's alone
    where there is no LASER `config.json` (a tokenizer saved alone), nothing where there is neither. A SONAR
    directory gets its own ([`write_sonar_integration_files`])."""
    directory = Path(directory)
    config = _read_json(directory / "config.json")
    if (isinstance(config, dict) and config.get("model_type") == "sonar") or \
            _tokenizer_class(directory) == "SonarTokenizer":
        write_sonar_integration_files(directory)
        return
    tokenizer = has_laser_tokenizer(directory) and write_code_files(["tokenization_laser"], directory)
    if tokenizer:
        _add_tokenizer_auto_map(directory, TOKENIZER_AUTO_MAP)
        _write_prefix_bundle(directory)
    if not isinstance(config, dict) or config.get("model_type") != "laser":
        return
    encoder = config.get("architectures") == ["LaserModel"]
    updated = dict(config, auto_map=dict(config.get("auto_map") or {}))
    updated["auto_map"]["AutoConfig"] = ENCODER_AUTO_MAP["AutoConfig"]
    for architecture in config.get("architectures") or []:
        if architecture in ARCHITECTURE_AUTO_CLASS:
            updated["auto_map"][ARCHITECTURE_AUTO_CLASS[architecture]] = f"modeling_laser.{architecture}"
    if encoder:
        updated["auto_map"].update(ENCODER_AUTO_MAP)
        if write_code_files([_pipeline_source().stem], directory):
            updated["custom_pipelines"] = CUSTOM_PIPELINES
    write_code_files(_auto_map_modules({k: v for k, v in updated["auto_map"].items() if k != "AutoTokenizer"}),
                     directory)
    if tokenizer:
        updated["auto_map"]["AutoTokenizer"] = TOKENIZER_AUTO_MAP
    if updated != config:
        _write_json(directory / "config.json", updated)
    if encoder and tokenizer and write_code_files([Path(SENTENCE_TRANSFORMERS_FILE).stem], directory):
        (directory / "modules.json").write_text(json.dumps(SENTENCE_TRANSFORMERS_MODULES, indent=2) + "\n",
                                                encoding="utf-8")
        _write_json(directory / "config_sentence_transformers.json", SENTENCE_TRANSFORMERS_CONFIG)


def remove_remote_code(directory: str | Path) -> list[str]:
    """Turns a saved LASER directory into the form the package ships its model in (hf_laser installed): the code
    files and the `auto_map` / `custom_pipelines` entries that name them are removed, and `modules.json` names the
    sentence-transformers module by its package path (`hf_laser.integrations.sentence_transformers_laser...`). Returns the
    names of the files removed; [`write_integration_files`] restores the full form."""
    directory = Path(directory)
    removed = [name for name in code_files(["modeling_laser", "tokenization_laser", Path(PIPELINE_FILE).stem,
                                            Path(SENTENCE_TRANSFORMERS_FILE).stem], directory)
               if (directory / name).is_file()]
    for name in removed:
        (directory / name).unlink()
    for name, keys in (("config.json", ("auto_map", "custom_pipelines")), ("tokenizer_config.json", ("auto_map",))):
        data = _read_json(directory / name)
        if isinstance(data, dict) and any(k in data for k in keys):
            _write_json(directory / name, {k: v for k, v in data.items() if k not in keys})
    if (directory / "modules.json").is_file():
        modules = [dict(m, type=f"hf_laser.integrations.{m['type']}") if m.get("type") == SENTENCE_TRANSFORMERS_MODULE else m
                   for m in _read_json(directory / "modules.json")]
        (directory / "modules.json").write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
    return removed
