"""Which model: the one shipped inside the package (the default), a local directory, or a Hub id.

`DEFAULT_MODEL` is the directory of `laser-mini`, a small LASER encoder trained by this project with
`training/configs/laser-mini.yaml` on the parallel corpora described in its model card. It is far weaker than the
original LASER models (convert those with `hf-laser convert`); it exists so that embedding works out of the box.
The directory holds weights, configuration, tokenizer files, model card and plot, no code: with the package
installed the `laser` type is registered, and a directory for the Hub (`save_pretrained`, `hf-laser push`) gets
its remote code from the package's sources (`hf_laser.checkpoints.integration_files`). `LASER_MINI_SET` (`laser-mini-set`) is
a model set beside it: laser-mini, and distilled students for the languages where a student beats it on
FLORES-200 by more than the test set's sampling noise (the set's README.md lists them).

One place says what a model argument is: [`resolve`] returns a [`ResolvedModel`] (a shipped model, a local
directory, a model set, a list of member directories, a converted original in the download cache, or a Hub id), or
raises the one-line error when it is none of them; every loader (`LaserEncoder.from_pretrained`, the pipelines,
MTEB, Ray, the commands) takes its answer. [`resolve_model`] is its location alone; [`looks_local`],
[`check_local_dir`] and [`check_model_dir`] tell a local path from a Hub id and check a directory before anything
is loaded.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..defaults import MODEL_SET_FILE
from ..errors import UsageError, one_line

DEFAULT_MODEL_NAME = "laser-mini"
DEFAULT_MODEL = str(Path(__file__).resolve().parent / DEFAULT_MODEL_NAME)
# laser-mini plus the distilled student of the languages where it beats laser-mini (training/student_set.py; its
# README.md says which): a model set, so it needs the language of the text (`lang=`)
LASER_MINI_SET_NAME = "laser-mini-set"
LASER_MINI_SET = str(Path(__file__).resolve().parent / LASER_MINI_SET_NAME)
# the models inside the package, by the name a user can give for them (`--model laser-mini`)
SHIPPED_MODELS = {DEFAULT_MODEL_NAME: DEFAULT_MODEL, LASER_MINI_SET_NAME: LASER_MINI_SET}

_announced = False


def shipped_model(model) -> str | None:
    """The directory of the shipped model `model` names (`"laser-mini"`), or None; a local path of that name, when
    there is one, is what the user means, so it is not replaced."""
    if isinstance(model, str) and model in SHIPPED_MODELS and not Path(model).exists():
        return SHIPPED_MODELS[model]
    return None


class ResolvedModel:
    """What a model argument is. `kind`: `"shipped"` (a model inside the package, by name or as the default),
    `"directory"` (a local model directory), `"model_set"` (a directory with `laser_model_set.json`), `"members"`
    (a list of model directories given as one set), `"download"` (`laser2` / `laser3-LANG`: the original release,
    converted once into the cache), `"hub"` (an `owner/name` id not fetched: `resolve(download=False)`).
    `location` is what the loaders open: a path, a list of paths (`members`) or the Hub id. A Hub id that is
    fetched resolves to its local snapshot ("directory" or "model_set"), `given` keeping the id."""

    # (a plain class: `import hf_laser` imports this module, and dataclasses would add to its start-up)
    __slots__ = ("given", "kind", "location")

    def __init__(self, given: object, kind: str, location: str | os.PathLike | list):
        self.given, self.kind, self.location = given, kind, location

    def __repr__(self) -> str:
        return f"ResolvedModel(given={self.given!r}, kind={self.kind!r}, location={self.location!r})"

    @property
    def is_set(self) -> bool:
        """Each sentence goes to the member of its language (a model set or a list of members)."""
        return self.kind in ("members", "model_set") or (self.kind in ("shipped", "download")
                                                          and (Path(self.location) / MODEL_SET_FILE).is_file())


HUB_KWARGS = ("revision", "token", "cache_dir")  # the loading arguments that say which Hub snapshot


def resolve(model, *, who: str = "hf_laser", download: bool = True, hub_kwargs: dict | None = None) -> ResolvedModel:
    """What `model` names ([`ResolvedModel`]), in this order: None (the shipped default, said once per process on
    stderr), a list (members of one set), a shipped model's name where no local path has it, an existing local
    path, `laser2` / `laser3-LANG` / `sonar` (fetched and converted once when `download`, else [`ModelsNotAvailable`]
    when not in the cache), a Hub id (its snapshot at `hub_kwargs`' revision, fetched into the Hub cache when
    `download`: `checkpoints.hub_snapshot`; a model directory or a whole model set). A path that can only be local ([`looks_local`]) and does not exist is a
    FileNotFoundError of one line, at once (transformers would try it as a Hub id: retries when offline)."""
    if isinstance(model, (list, tuple)):
        return ResolvedModel(model, "members", list(model))
    if model is None or shipped_model(model):
        return ResolvedModel(model, "shipped", _default_model(who) if model is None else shipped_model(model))
    path = Path(str(model)).expanduser()
    if path.exists():
        return ResolvedModel(model, "model_set" if (path / MODEL_SET_FILE).is_file() else "directory", model)
    # lazy: `import hf_laser` imports this module, and the download module's HTTP client is needed only here
    from ..checkpoints.download import NAMED, resolve_named_model

    if NAMED.match(str(model)):
        return ResolvedModel(model, "download", str(resolve_named_model(str(model), download=download)))
    if looks_local(model):
        raise FileNotFoundError(missing_model_message(model))
    if not download:
        return ResolvedModel(model, "hub", model)
    # lazy: the Hub client, needed for Hub ids only
    from ..checkpoints.hub_snapshot import hub_snapshot

    local = hub_snapshot(str(model), **{k: v for k, v in (hub_kwargs or {}).items() if k in HUB_KWARGS})
    return ResolvedModel(model, "model_set" if (local / MODEL_SET_FILE).is_file() else "directory", str(local))


def resolve_model(model: str | os.PathLike | None, *, who: str = "hf_laser") -> str | os.PathLike:
    """`model` (a shipped model's name: its directory in the package), or the shipped default model when it is
    None, saying so once per process on stderr. Unlike [`resolve`], nothing is fetched or refused here: the
    loaders that take this location resolve it fully."""
    if model is not None:
        return shipped_model(model) or model
    return _default_model(who)


def _default_model(who: str) -> str:
    global _announced
    if not (Path(DEFAULT_MODEL) / "config.json").is_file():
        raise FileNotFoundError(f"the default model is missing from the installed package ({DEFAULT_MODEL}); "
                                "reinstall hf-laser, or pass a model directory")
    if not _announced:
        print(f"{who}: no model given, using the shipped default model {DEFAULT_MODEL_NAME} ({DEFAULT_MODEL}); "
              "it is small and much weaker than the original LASER (see its model card)", file=sys.stderr)
        _announced = True
    return DEFAULT_MODEL


def looks_local(model: str | os.PathLike) -> bool:
    """A model argument that can only mean a local path: absolute, `./`, `../`, `~`, more than one `/`, or whose
    parent directory exists (`models/x` with a `models/` here, or a bare name). Such a path is never sent to
    the Hub; only `owner/name` with no `owner/` directory here is a Hub id."""
    s = str(model)
    if isinstance(model, os.PathLike) or os.path.isabs(s) or s.startswith(("./", "../", "~", ".\\", "..\\")):
        return True
    if s in (".", "..") or "\\" in s or s.count("/") > 1 or s.endswith("/"):
        return True
    return Path(s).parent.is_dir()


def missing_model_message(model: str | os.PathLike) -> str:
    """What to say of a model argument that names no existing directory (and is no Hub id, see [`looks_local`])."""
    return (f"model directory not found: {model} (a Hub model is 'owner/name'; the original models: 'laser2', "
            "'laser3-LANG' and 'sonar' are downloaded and converted, and a checkpoint you have is converted with "
            "hf-laser convert)")


def check_local_dir(model: str | os.PathLike) -> None:
    """[`UsageError`] when `model` means a local directory that is missing, or is a file; a Hub id passes."""
    path = Path(str(model)).expanduser()
    if not path.exists():
        # lazy: `import hf_laser` imports this module, and the download module's HTTP client is needed only here
        from ..checkpoints.download import NAMED

        if NAMED.match(str(model)):  # "laser2", "laser3-wol_Latn": fetched and converted once by from_pretrained
            return
        if looks_local(model):
            raise UsageError(missing_model_message(model))
    elif not path.is_dir():
        raise UsageError(f"--model {model} is a file, not a model directory (make one with hf-laser convert)")


_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


def check_model_dir(model: str | os.PathLike) -> None:
    """Raises [`UsageError`] with one line when `model` is a missing local directory or not a LASER model
    directory; a Hub id (`owner/name`) passes."""
    check_local_dir(model)
    s = str(model)
    path = Path(s).expanduser()
    if not path.exists():
        return
    config = path / "config.json"
    if (path / MODEL_SET_FILE).is_file():  # a model set: its members are checked when they load
        return
    if not config.is_file():
        raise UsageError(f"{s} is not a LASER model directory: it has no config.json "
                         "(make one from an original checkpoint with hf-laser convert)")
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (ValueError, AttributeError, OSError, RecursionError) as err:  # (a nesting bomb: RecursionError)
        raise UsageError(f"{config} is not a valid config file ({type(err).__name__}: {one_line(err)})") from None
    if model_type not in ("laser", "sonar"):
        raise UsageError(f"{s} is not a LASER model directory: config.json has model_type {model_type!r}, "
                         "expected 'laser' (or 'sonar': a SONAR text encoder)")
    if not any((path / name).is_file() for name in _WEIGHT_FILES):
        raise UsageError(f"{s} has no weights (model.safetensors)")
