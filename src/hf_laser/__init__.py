"""hf_laser: LASER sentence embeddings as a Hugging Face transformers model.

`import hf_laser` is fast (neither torch nor transformers is imported): the classes below are imported on first
access (PEP 562 module `__getattr__`, like transformers' `_LazyModule`), and the `laser` model type is registered
with the transformers Auto classes and the `laser-sentence-embedding` pipeline as transformers loads them:

* when `transformers.models.auto.configuration_auto` is imported (by `from transformers import AutoConfig`,
  `AutoModel`, `AutoTokenizer`, `pipeline` ...), `laser` is registered with `AutoConfig`;
* when transformers resolves the model type `laser` (`AutoConfig/AutoModel/AutoTokenizer.from_pretrained(dir)`,
  `AutoConfig.for_model("laser")`), or `hf_laser.modeling.modeling_laser` is imported (any of `hf_laser.LaserModel`,
  `LaserEncoder` ...), the models are registered with `AutoModel`, `AutoModelForPreTraining` and
  `AutoModelForSequenceClassification`, and the tokenizer with `AutoTokenizer`;
* when `transformers.tokenization_auto` is imported, the tokenizer is registered with `AutoTokenizer`;
* when `transformers.pipelines` is imported, the pipeline is registered.

So `import hf_laser` followed by `AutoModel.from_pretrained(dir)` / `AutoTokenizer.from_pretrained(dir)` /
`pipeline("laser-sentence-embedding")` works as before, in either import order. `hf_laser.register_auto_classes()`
does all of it at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import warnings
from typing import TYPE_CHECKING

from .models import DEFAULT_MODEL

__version__ = "0.1.0"

# public name -> submodule that defines it
_LAZY_ATTRS = {
    "LaserConfig": "modeling.configuration_laser",
    "LaserModel": "modeling.modeling_laser",
    "LaserPreTrainedModel": "modeling.modeling_laser",
    "LaserForPreTraining": "modeling.modeling_laser",
    "LaserForSequenceClassification": "modeling.modeling_laser",
    "LaserClassificationHead": "modeling.modeling_laser",
    "LaserClassificationCollator": "modeling.modeling_laser",
    "LaserTokenizer": "text.tokenization_laser",
    "SonarConfig": "modeling.configuration_sonar",
    "SonarModel": "modeling.modeling_sonar",
    "SonarTokenizer": "text.tokenization_sonar",
    "SonarDecoderConfig": "modeling.configuration_sonar_decoder",
    "SonarDecoderModel": "modeling.modeling_sonar_decoder",
    "SonarTextDecoder": "decoder",
    "LaserEncoder": "encoder",
}

__all__ = [
    "LaserConfig",
    "LaserModel",
    "LaserPreTrainedModel",
    "LaserForPreTraining",
    "LaserForSequenceClassification",
    "LaserClassificationHead",
    "LaserClassificationCollator",
    "LaserTokenizer",
    "LaserEncoder",
    "SonarConfig",
    "SonarModel",
    "SonarTokenizer",
    "SonarDecoderConfig",
    "SonarDecoderModel",
    "SonarTextDecoder",
    "DEFAULT_MODEL",
    "register_auto_classes",
    "__version__",
]

if TYPE_CHECKING:
    from .decoder import SonarTextDecoder
    from .encoder import LaserEncoder
    from .modeling.configuration_laser import LaserConfig
    from .modeling.modeling_laser import (
        LaserClassificationCollator,
        LaserClassificationHead,
        LaserForPreTraining,
        LaserForSequenceClassification,
        LaserModel,
        LaserPreTrainedModel,
    )
    from .modeling.configuration_sonar import SonarConfig
    from .modeling.configuration_sonar_decoder import SonarDecoderConfig
    from .modeling.modeling_sonar import SonarModel
    from .modeling.modeling_sonar_decoder import SonarDecoderModel
    from .text.tokenization_laser import LaserTokenizer
    from .text.tokenization_sonar import SonarTokenizer


def __getattr__(name: str):
    module = _LAZY_ATTRS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY_ATTRS))


# ------------------------------------------------------------------------------------------- Auto registration
_CONFIG_AUTO = "transformers.models.auto.configuration_auto"
_TOKENIZATION_AUTO = "transformers.models.auto.tokenization_auto"
_PIPELINES = "transformers.pipelines"
_MODELING = f"{__name__}.modeling.modeling_laser"
_MODELING_SONAR = f"{__name__}.modeling.modeling_sonar"
_CONFIGURATION = f"{__name__}.modeling.configuration_laser"

_done: set[str] = set()


def _once(step: str, fn) -> None:
    # No lock (a lock held across imports can deadlock with the import locks): two threads may both register,
    # which is harmless (exist_ok=True).
    if step in _done:
        return
    _done.add(step)  # first: a re-entrant call (the step imports a module whose hook calls it) is a no-op
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - never break the user's import of transformers
        _done.discard(step)
        warnings.warn(f"hf_laser could not register the 'laser' {step} with transformers "
                      f"({type(err).__name__}: {err}); call hf_laser.register_auto_classes() to retry",
                      RuntimeWarning, stacklevel=2)


class _ConfigTrigger(dict):
    """`CONFIG_MAPPING._extra_content` while the models are not registered: looking up `laser` or `sonar` (what
    every `Auto*.from_pretrained` of such a directory does first) registers them, then the plain dict is put back."""

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        if key in ("laser", "sonar", "sonar_decoder"):
            _register_models()
        return value


def _register_config() -> None:
    # lazy: transformers (the NumPy engine and the command line's start run without it)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    # lazy: modeling.configuration_laser imports this module
    from .modeling.configuration_laser import LaserConfig

    # lazy: modeling.configuration_sonar imports this module
    from .modeling.configuration_sonar import SonarConfig

    # lazy: modeling.configuration_sonar_decoder imports this module
    from .modeling.configuration_sonar_decoder import SonarDecoderConfig

    CONFIG_MAPPING.register("laser", LaserConfig, exist_ok=True)
    CONFIG_MAPPING.register("sonar", SonarConfig, exist_ok=True)
    CONFIG_MAPPING.register("sonar_decoder", SonarDecoderConfig, exist_ok=True)
    if "models" not in _done and type(CONFIG_MAPPING._extra_content) is dict:
        CONFIG_MAPPING._extra_content = _ConfigTrigger(CONFIG_MAPPING._extra_content)


def _register_config_class() -> None:
    # Saved directories carry the code and an `auto_map`, written by checkpoints/integration_files.py (not by
    # `register_for_auto_class`, whose copier would copy the package's files unflattened).
    if _CONFIG_AUTO in sys.modules:
        _once("config", _register_config)


def _register_tokenizer() -> None:
    # lazy: transformers (the NumPy engine and the command line's start run without it)
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    # lazy: modeling.configuration_laser imports this module
    from .modeling.configuration_laser import LaserConfig

    # lazy: modeling.configuration_sonar imports this module
    from .modeling.configuration_sonar import SonarConfig

    # lazy: text.tokenization_laser imports this module
    from .text.tokenization_laser import LaserTokenizer

    # lazy: text.tokenization_sonar imports this module
    from .text.tokenization_sonar import SonarTokenizer

    _once("config", _register_config)
    AutoTokenizer.register(LaserConfig, tokenizer_class=LaserTokenizer, exist_ok=True)
    AutoTokenizer.register(SonarConfig, tokenizer_class=SonarTokenizer, exist_ok=True)


def _register_models_now() -> None:
    # lazy: transformers (the NumPy engine and the command line's start run without it)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        AutoModel,
        AutoModelForPreTraining,
        AutoModelForSequenceClassification,
    )

    # lazy: modeling.configuration_laser imports this module
    from .modeling.configuration_laser import LaserConfig

    # lazy: modeling.configuration_sonar imports this module
    from .modeling.configuration_sonar import SonarConfig

    # lazy: modeling.configuration_sonar_decoder imports this module
    from .modeling.configuration_sonar_decoder import SonarDecoderConfig

    # lazy: modeling.modeling_laser imports this module
    from .modeling.modeling_laser import LaserForPreTraining, LaserForSequenceClassification, LaserModel

    # lazy: modeling.modeling_sonar imports this module
    from .modeling.modeling_sonar import SonarModel

    # lazy: modeling.modeling_sonar_decoder imports this module
    from .modeling.modeling_sonar_decoder import SonarDecoderModel

    _once("config", _register_config)
    AutoModel.register(LaserConfig, LaserModel, exist_ok=True)
    AutoModel.register(SonarConfig, SonarModel, exist_ok=True)
    AutoModel.register(SonarDecoderConfig, SonarDecoderModel, exist_ok=True)
    AutoModelForPreTraining.register(LaserConfig, LaserForPreTraining, exist_ok=True)
    AutoModelForSequenceClassification.register(LaserConfig, LaserForSequenceClassification, exist_ok=True)
    _once("tokenizer", _register_tokenizer)
    if isinstance(CONFIG_MAPPING._extra_content, _ConfigTrigger):
        CONFIG_MAPPING._extra_content = dict(CONFIG_MAPPING._extra_content)


def _register_models() -> None:
    _once("models", _register_models_now)


def _register_pipeline() -> None:
    importlib.import_module(f"{__name__}.integrations.pipelines")  # registers the task on import


def register_auto_classes() -> None:
    """Registers everything now: `laser` with AutoConfig, AutoModel, AutoModelForPreTraining,
    AutoModelForSequenceClassification and AutoTokenizer, and the `laser-sentence-embedding` pipeline (imports
    torch and transformers). Not needed in normal use: this happens by itself when transformers needs it."""
    _register_models()
    _once("pipeline", _register_pipeline)


_HOOKS = {
    _CONFIG_AUTO: lambda: _once("config", _register_config),
    _TOKENIZATION_AUTO: lambda: _once("tokenizer", _register_tokenizer),
    _PIPELINES: lambda: _once("pipeline", _register_pipeline),
    _CONFIGURATION: lambda: _once("config class", _register_config_class),
    _MODELING: _register_models,
    _MODELING_SONAR: _register_models,
}


class _HookedLoader:
    """Runs the module's loader, then its registration hook; the real loader is put back on the module."""

    def __init__(self, loader, name: str):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        spec = module.__spec__
        try:
            self._loader.exec_module(module)
        finally:
            if spec is not None:
                spec.loader = self._loader
            module.__loader__ = self._loader
        hook = _HOOKS.get(self._name)
        if hook is not None:
            hook()
        _PostImportFinder.forget(self._name)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportFinder:
    """A `sys.meta_path` entry that only wraps the loaders of the modules in `_HOOKS`; it removes itself once
    they are all imported."""

    pending: set[str] = set()
    _busy = threading.local()

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in cls.pending or getattr(cls._busy, "name", None) == fullname:
            return None
        cls._busy.name = fullname
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            cls._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, fullname)
        return spec

    @classmethod
    def forget(cls, name: str) -> None:
        cls.pending.discard(name)
        if not cls.pending and cls in sys.meta_path:
            sys.meta_path.remove(cls)

    @classmethod
    def install(cls) -> None:
        cls.pending = {name for name in _HOOKS if name not in sys.modules}
        if cls.pending and cls not in sys.meta_path:
            sys.meta_path.insert(0, cls)
        # modules imported before hf_laser: register now
        for name in (_CONFIG_AUTO, _TOKENIZATION_AUTO, _PIPELINES):
            if name in sys.modules:
                _HOOKS[name]()


_PostImportFinder.install()


# ------------------------------------------------------------------------------------------- moved modules
# Before the subpackages (0.2), every module stood at the top: `hf_laser.modeling_laser`, and a shipped-form
# directory's modules.json names `hf_laser.sentence_transformers_laser...`. Those paths still import, as the module
# at its new place (the same object), with a DeprecationWarning that names it.
_MOVED = {
    **{name: f"text.{name}" for name in ("preprocessing", "nonbreaking_prefixes", "bpe", "text_tokenizer",
                                         "tokenization_laser", "langid", "languages")},
    **{name: f"modeling.{name}" for name in ("configuration_laser", "modeling_laser", "bilstm", "bilstm_numpy",
                                             "transformer", "plain_config", "plain_weights")},
    **{name: f"checkpoints.{name}" for name in ("convert", "fairseq_checkpoint", "download", "integration_files",
                                                "hub", "model_card")},
    **{name: f"integrations.{name}" for name in ("pipelines", "pipeline_laser", "sentence_transformers_laser",
                                                 "sentence_transformers_sets", "mteb")},
    "cpu": "speed.cpu",
    "on_ray": "mining.on_ray",
}


class _MovedModuleLoader:
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.new}: import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:  # already executed under its new name
        pass


class _MovedModuleFinder:
    @staticmethod
    def find_spec(fullname, path=None, target=None):
        prefix, _, name = fullname.partition(".")
        if prefix != __name__ or name not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedModuleLoader(f"{__name__}.{_MOVED[name]}"))


sys.meta_path.append(_MovedModuleFinder)
