"""A LASER model set: LASER2 (or any LASER model) plus any number of LASER3 students, used as one encoder that
chooses the model by language, as laser_encoders' `LaserEncoderPipeline(lang=...)` does.

A set is a directory with `laser_model_set.json` (written by [`write_model_set`], `hf-laser download`):

```json
{"format": "hf-laser model set", "version": 1, "default": "laser2",
 "students": {"wol_Latn": "laser3-wol_Latn", "zul_Latn": "/models/laser3-zul_Latn"}}
```

`default` is the model for every language without a student (absent: such a language is an error); `students`
maps FLORES-200 codes (or, for a language outside FLORES-200, its ISO 639-3 code and script, `bre_Latn`:
[`~languages.student_code`]) to model directories (relative paths from the set's directory). Each is an ordinary converted
directory. [`RoutedLaserEncoder`] loads the members on first use, so a set of 147 students costs only what is used.

Routing (`route`): a language named by FLORES-200 code, ISO 639-3 or 639-1 code or English name
([`~languages.flores_codes`]) goes to the student of that language when the set has one (two students for one name,
such as `zh` with `zho_Hans` and `zho_Hant`, is an error naming both; a student outside FLORES-200 is named by any
code of its language: `br`, `bre`, `bre_Latn`), else to the default model when the name is a language at all; a
name that is no language is one clear error. The language is also given to the member's
tokenizer, as with a single model.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .defaults import MODEL_SET_FILE as SET_FILE
from .text.languages import (
    flores_codes,
    is_flores_code,
    is_student_code,
    names_student,
    student_code,
)
from .text.preprocessing import KNOWN_CODES, normalize_lang

FORMAT = "hf-laser model set"


class UnknownLanguage(ValueError):
    """A language name that names no language, or one this model set has no model for."""

def is_model_set(path) -> bool:
    """Whether `path` is a model set's directory (it holds `laser_model_set.json`)."""
    return isinstance(path, (str, os.PathLike)) and (Path(path).expanduser() / SET_FILE).is_file()


def write_model_set(directory: str | os.PathLike, *, default: str | os.PathLike | None,
                    students: dict[str, str | os.PathLike]) -> Path:
    """Writes `directory/laser_model_set.json` naming `default` and `students` (`{language: model directory}`,
    languages in any form [`~languages.flores_codes`] resolves to exactly one FLORES-200 code, or `xxx_Scrp` codes
    of languages outside FLORES-200 ([`~languages.student_code`]); directories as paths from here, stored relative
    to `directory`; one directory may be the student of several languages). Every member must be a converted model directory (`config.json`)
    with the same embedding size. Returns the set's file."""

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    members = {}
    for lang, path in students.items():
        try:
            code = student_code(str(lang))
        except ValueError as err:
            raise UnknownLanguage(f"student language: {err}") from None
        if code in members:
            raise ValueError(f"two students for {code}: {members[code]} and {path}")
        members[code] = path
    dims = {}
    for name, path in [("default", default), *members.items()]:
        if path is None:
            continue
        config = Path(path) / "config.json"
        if not config.is_file():
            raise FileNotFoundError(f"{name}: {path} is not a converted model directory (no "
                                    "config.json)")
        values = json.loads(config.read_text(encoding="utf-8"))
        dims[name] = values.get("embed_dim") if values.get("encoder_type") == "transformer" else \
            values.get("hidden_size", 512) * (2 if values.get("bidirectional", True) else 1)
    if len(set(dims.values())) > 1:
        raise ValueError(f"the models of a set must give embeddings of one size to be comparable: {dims}")

    def relative(path):
        path = Path(path)
        try:
            return os.path.relpath(Path(path).resolve(), directory.resolve())
        except ValueError:  # another drive
            return str(path.resolve())

    content = {"format": FORMAT, "version": 1, "default": None if default is None else relative(default),
               "students": {code: relative(path) for code, path in sorted(members.items())}}
    out = directory / SET_FILE
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return out


def read_model_set(directory: str | os.PathLike) -> tuple[Path | None, dict[str, Path]]:
    """`(default directory or None, {FLORES code: student directory})` of a set, paths resolved."""

    directory = Path(directory).expanduser()
    path = directory / SET_FILE
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a model set") from None
    except ValueError as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise ValueError(f"{path} is not an {FORMAT} file (its 'format' is not {FORMAT!r})")
    students = content.get("students") or {}
    if not isinstance(students, dict) or not all(isinstance(v, str) for v in students.values()):
        raise ValueError(f"{path}: 'students' must map FLORES-200 codes to directories")
    bad = [code for code in students if not is_student_code(code)]
    if bad:
        raise ValueError(f"{path}: {bad} are not FLORES-200 codes (such as wol_Latn) nor codes of languages outside "
                         "FLORES-200 with their script (such as bre_Latn)")
    default = content.get("default")
    if default is not None and not isinstance(default, str):
        raise ValueError(f"{path}: 'default' must be a model directory (a string) or null, got {default!r}")
    members = {"default": None if default is None else directory / default,
               **{k: directory / v for k, v in students.items()}}
    for name, member in members.items():
        # a member that is a set itself (the set's own directory, ".", or A -> B -> A) would load without end
        if member is not None and is_model_set(member):
            raise ValueError(f"{path}: the {'default model' if name == 'default' else 'student ' + name} is "
                             f"{member}, a model set itself; the members of a set are model directories")
    return members.pop("default"), members


class RoutedLaserEncoder:
    """Several LASER models used as one encoder, each sentence embedded by the model of its language (see the
    module docstring). The methods are [`~encoder.LaserEncoder`]'s; every member loads with the same loading
    arguments, on first use.

    Example (LASER2 plus the Wolof student, converted beforehand):

    ```python
    encoder = LaserEncoder.from_pretrained("models/laser-set")       # a directory with laser_model_set.json
    encoder.encode(["Naka nga def?", "How are you?"], lang=["wol_Latn", "eng_Latn"])
    ```
    """

    def __init__(self, default: str | os.PathLike | None, students: dict[str, str | os.PathLike],
                 load: Callable | None, name: str = "model set", **load_kwargs):
        if default is None and not students:
            raise ValueError("a model set needs a default model or at least one student")
        self.default_path = None if default is None else Path(default)
        self.student_paths = {code: Path(p) for code, p in students.items()}
        self.name = name
        self._load = load  # LaserEncoder.from_pretrained (passed in: encoder.py imports this module)
        self._load_kwargs = load_kwargs
        self._loaded: dict[str, object] = {}
        for member, path in self.members().items():
            if not (Path(path) / "config.json").is_file():
                raise FileNotFoundError(f"{name}: the model of {member} is missing: {path} has no config.json")

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike | Sequence[str | os.PathLike], load: Callable | None,
                        **kwargs) -> RoutedLaserEncoder:
        """A set directory (`laser_model_set.json`), or a list of model directories: those whose `config.json`
        names a `language` (LASER3 students converted by `hf-laser convert`, which records it) are students of
        their language, and the one without (LASER2) is the default. `load(directory, **kwargs)` loads a member
        (`LaserEncoder.from_pretrained` calls this with itself; None: routing only, as `RoutedLaserPipeline`
        uses it)."""
        if isinstance(path, (str, os.PathLike)):
            default, students = read_model_set(path)
            return cls(default, students, load, name=str(path), **kwargs)
        default, students = None, {}
        for member in path:
            config = Path(member) / "config.json"
            if not config.is_file():
                raise FileNotFoundError(f"{member} is not a converted model directory (no config.json)")
            try:
                values = json.loads(config.read_text(encoding="utf-8"))
            except RecursionError:
                raise ValueError(f"{config} is nested too deeply to be a LASER config") from None
            lang = values.get("language") if isinstance(values, dict) else None
            if lang is None:
                if default is not None:
                    raise ValueError(f"two models without a language: {default} and {member}; a set has one default "
                                     "model (the others are students, whose config.json names their language)")
                default = Path(member)
            elif lang in students:
                raise ValueError(f"two students for {lang}: {students[lang]} and {member}")
            else:
                students[lang] = Path(member)
        return cls(default, students, load, name="the models given", **kwargs)

    def members(self) -> dict[str, Path]:
        """`{"default" or FLORES code: directory}`."""
        out = {code: path for code, path in sorted(self.student_paths.items())}
        if self.default_path is not None:
            out = {"default": self.default_path, **out}
        return out

    def member(self, key: str):
        """The loaded [`~encoder.LaserEncoder`] of a member (`"default"` or a FLORES code), loaded on first use."""
        if key not in self._loaded:
            if self._load is None:
                raise RuntimeError("this RoutedLaserEncoder routes only (built without a loader); load the set with "
                                   "LaserEncoder.from_pretrained to embed")
            path = self.members()[key].resolve()
            # one directory may be the student of several languages: loaded once
            same = next((k for k in self._loaded if self.members()[k].resolve() == path), None)
            self._loaded[key] = self._loaded[same] if same else self._load(self.members()[key], **self._load_kwargs)
        return self._loaded[key]

    def route(self, lang: str) -> str:
        """The member (`"default"` or a FLORES code) that embeds text in `lang` (see the module docstring)."""

        if not isinstance(lang, str) or not lang.strip():
            raise UnknownLanguage(f"a model set needs a language per sentence, got {lang!r}")
        codes = flores_codes(lang)
        students = [code for code in codes if code in self.student_paths] or [
            code for code in self.student_paths if not is_flores_code(code) and names_student(lang, code)]
        if len(students) > 1:
            raise UnknownLanguage(f"{lang!r} names {len(students)} languages this set has students for "
                                  f"({', '.join(students)}): give one of these codes")
        if students:
            return students[0]
        try:
            known = bool(codes) or normalize_lang(lang) in KNOWN_CODES
        except ValueError:
            known = False
        if not known:
            raise UnknownLanguage(
                f"unknown language {lang!r}: give a FLORES-200 code (wol_Latn), an ISO 639-3 or 639-1 code (wol, "
                f"wo) or an English name (wolof); {self._has()}")
        if self.default_path is None:
            raise UnknownLanguage(f"{self.name} has no model for {lang!r} ({self._has()}) and no default model")
        return "default"

    def describe_route(self, lang: str) -> str:
        """Which member embeds `lang`, in words (what the command line says once per run):
        `"laser-mini-set embeds cy with its student for cym_Latn (student-cy-en)"`."""
        key = self.route(lang)
        what = "its default model" if key == "default" else "its student" if key == lang else f"its student for {key}"
        return f"{Path(self.name).name} embeds {lang} with {what} ({self.members()[key].resolve().name})"

    def file_manifest_info(self, key: str) -> dict:
        """What an output's manifest records of the member `key` that embedded it (for information: the identity
        already holds that member's hashes)."""
        return {"model_set": {"set": str(self.name), "member": key, "model": str(self.members()[key].resolve())}}

    def _has(self) -> str:
        students = sorted(self.student_paths)
        shown = ", ".join(students[:10]) + (f" and {len(students) - 10} more" if len(students) > 10 else "")
        return f"this set has students for {shown or 'no language'}" + (
            " and a default model for the others" if self.default_path is not None else "")

    @property
    def dim(self) -> int:
        return self.member(next(iter(self.members()))).dim

    @property
    def device(self):
        return self.member(next(iter(self.members()))).device

    @property
    def quantize(self):
        return self.member(next(iter(self.members()))).quantize

    @property
    def tokenizer(self):
        """The default member's tokenizer (each member tokenizes its own sentences)."""
        return self.member(next(iter(self.members()))).tokenizer

    def _groups(self, n: int, lang) -> dict[str, tuple[np.ndarray, list[str]]]:
        if lang is None or (not isinstance(lang, str) and len(lang) == 0 and n):
            raise UnknownLanguage("a model set chooses its model by language: give lang (one code for all "
                                  "sentences, or one per sentence)")
        langs = [lang] * n if isinstance(lang, str) else list(lang)
        if any(code is None for code in langs):
            raise UnknownLanguage("a model set chooses its model by language: give lang for every sentence (one code "
                                  "for all, or one per sentence)")
        if len(langs) != n:
            raise ValueError(f"got {len(langs)} languages for {n} sentences: give one per sentence, or one for all")
        if isinstance(lang, str) and lang.strip().lower() == "auto":
            # the detector knows ISO 639-1 languages, not most LASER3 ones, and mistakes short sentences for a
            # neighbour language: routing on its guess would pick a wrong student silently
            raise UnknownLanguage("lang='auto' cannot choose among a set's models: give the language")
        routes: dict[str, list[int]] = {}
        member_langs = {}
        for i, code in enumerate(langs):
            if code not in member_langs:
                member_langs[code] = self._member_lang(code)
            routes.setdefault(member_langs[code][0], []).append(i)
        return {key: (np.array(rows), [member_langs[langs[i]][1] for i in rows]) for key, rows in routes.items()}

    def _member_lang(self, lang: str) -> tuple[str, str]:
        """`(member, language for its tokenizer)`: a student gets its FLORES code, the default model the code given,
        or the FLORES code of a language given by name (its preprocessing knows codes, not names)."""

        key = self.route(lang)
        if key != "default":
            return key, key
        codes = flores_codes(lang)
        return key, codes[0] if len(codes) == 1 and normalize_lang(lang) not in KNOWN_CODES else lang

    def encode(self, sentences: str | Sequence[str], lang: str | Sequence[str] | None = None, **kwargs):
        """[`~encoder.LaserEncoder.encode`], each sentence by the model of its language (`lang`: one for all, or one
        per sentence; required)."""
        single = isinstance(sentences, str)
        sentences = [sentences] if single else list(sentences)
        groups = self._groups(len(sentences), lang)
        out = None
        for key, (rows, langs) in groups.items():
            emb = self.member(key).encode([sentences[i] for i in rows], lang=langs, **kwargs)
            if out is None:
                out = np.empty((len(sentences), emb.shape[1]), dtype=np.float32) if isinstance(emb, np.ndarray) \
                    else emb.new_empty((len(sentences), emb.shape[1]))
            out[rows] = emb
        if out is None:
            return self.member(next(iter(self.members()))).encode(sentences, lang="en", **kwargs)
        return out[0] if single else out

    def token_ids(self, sentences: Sequence[str], lang=None, **kwargs) -> list[list[int]]:
        """Each sentence's ids in the dictionary of the model of its language."""
        sentences = list(sentences)
        out: list = [None] * len(sentences)
        for key, (rows, langs) in self._groups(len(sentences), lang).items():
            for i, ids in zip(rows, self.member(key).token_ids([sentences[i] for i in rows], langs, **kwargs)):
                out[i] = ids
        return out

    def encode_file(self, input_path, output_path, *, lang: str | None = None, **kwargs):
        """[`~encoder.LaserEncoder.encode_file`] by the model of `lang` (one language per file): the output's
        manifest names that model, so a resumed or reused output is always that model's."""
        key, member_lang = self._file_member(lang)
        member = self.member(key)
        # the member's encode_file with its defaults, and the member named in the manifest
        defaults = {name: p.default for name, p in inspect.signature(member.encode_file).parameters.items()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "lang"}
        return member._encode_file(input_path, output_path, lang=member_lang, **{**defaults, **kwargs},
                                   manifest_info=self.file_manifest_info(key))[0]

    def _encode_file(self, input_path, output_path, *, lang: str | None = None, **kwargs):
        # what the command lines call (their messages in their words)
        key, member_lang = self._file_member(lang)
        return self.member(key)._encode_file(input_path, output_path, lang=member_lang,
                                             manifest_info=self.file_manifest_info(key), **kwargs)

    def _file_member(self, lang) -> tuple[str, str]:
        if not isinstance(lang, str):
            raise UnknownLanguage("a model set embeds a file with the model of its language: give lang (one code)")
        if lang.strip().lower() == "auto":
            raise UnknownLanguage("lang='auto' cannot choose among a set's models: give the file's language")
        return self._member_lang(lang)

    def model_identity(self) -> dict:
        """A set has no identity of its own: its numbers for a language are those of the member that embeds it
        (`model_for(lang).model_identity()`); refused so that no cache or manifest keys a set's output by the set
        alone (two sets with other students would share it)."""
        raise TypeError(f"{self.name} is a model set: its embeddings of a language are those of the member that "
                        "embeds it; use model_for(lang).model_identity()")

    def model_for(self, lang: str):
        """The [`~encoder.LaserEncoder`] that embeds text in `lang`."""
        return self.member(self.route(lang))
