"""A model set (LASER2 + LASER3 students, `model_set.py`) as one sentence-transformers model: each sentence embedded by
the member of its language.

    from hf_laser.integrations.sentence_transformers_sets import set_sentence_transformer
    model = set_sentence_transformer("~/.cache/hf_laser/laser")              # laser_model_set.json
    model.encode([{"text": "Naka nga def?", "lang": "wolof"}, {"text": "Bonjour.", "lang": "fr"}])
    model.encode(["Naka nga def?", "Jërëjëf."], lang="wol_Latn")             # one language for the call

The language is required (a set chooses its model by it): one code for the call, or `{"text", "lang"}` items for one
per sentence (sentence-transformers sorts and batches the inputs, so a list of languages would not stay aligned).
Each member is an ordinary [`~sentence_transformers_laser.LaserSentenceTransformerModule`]; the set's module adds the
routing, so `sentence_embedding` of every row is its member's. Members give sentence embeddings only (their token
outputs differ in length and kind). `model.save(DIR)` writes the members and the set file; `SentenceTransformer(DIR,
trust_remote_code=True)` loads it back where hf_laser is installed (the module is hf_laser's, not remote code).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import InputModule

from ..model_set import RoutedLaserEncoder, read_model_set, write_model_set
from ..models import resolve
from .sentence_transformers_inputs import split_items
from .sentence_transformers_laser import LaserSentenceTransformerModule


class LaserSetSentenceTransformerModule(InputModule):
    """The members of a model set as one input module (see the module docstring)."""

    save_in_root = True
    forward_kwargs = {"lang"}

    def __init__(self, routing: RoutedLaserEncoder, members: dict[str, LaserSentenceTransformerModule]):
        super().__init__()
        self.routing = routing
        self.members = torch.nn.ModuleDict(members)
        dims = {key: m.get_embedding_dimension() for key, m in members.items()}
        if len(set(dims.values())) != 1:
            raise ValueError(f"the members give embeddings of different sizes: {dims}")

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    def get_embedding_dimension(self) -> int:
        return next(iter(self.members.values())).get_embedding_dimension()

    def preprocess(self, inputs: Sequence, prompt: str | None = None, lang: str | None = None,
                   processing_kwargs: dict | None = None, **kwargs) -> dict[str, Any]:
        texts, langs = split_items(inputs, "LASER")
        if lang is not None and not isinstance(lang, str):
            raise TypeError("lang must be one language code for the call; one per sentence goes with the sentence: "
                            "encode([{'text': sentence, 'lang': code}, ...])")
        langs = [lang if code is None else code for code in langs]
        routes = []
        for key, (rows, member_langs) in self.routing._groups(len(texts), langs).items():
            items = [{"text": texts[i], "lang": code} for i, code in zip(rows, member_langs)]
            features = self.members[key].preprocess(items, prompt=prompt, processing_kwargs=processing_kwargs)
            routes.append((key, torch.as_tensor(rows), features))
        return {"routes": routes, "size": len(texts)}

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = None
        for key, rows, member_features in features["routes"]:
            member = self.members[key]
            device = next(member.model.parameters()).device
            moved = {k: v.to(device) if torch.is_tensor(v) else v for k, v in member_features.items()}
            emb = member.forward(moved)["sentence_embedding"]
            if out is None:
                out = emb.new_empty((features["size"], emb.shape[1]))
            out[rows.to(out.device)] = emb.to(out.device)
        features["sentence_embedding"] = out
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        members = {}
        for key, module in self.members.items():
            name = "laser2" if key == "default" else f"laser3-{key}"
            module.save(os.path.join(output_path, name))
            members[key] = os.path.join(output_path, name)
        write_model_set(output_path, default=members.pop("default", None), students=members)

    @classmethod
    def load(cls, model_name_or_path: str, **kwargs) -> LaserSetSentenceTransformerModule:
        """The set at `model_name_or_path` (a local directory with `laser_model_set.json`), every member loaded;
        `kwargs` go to each member's [`LaserSentenceTransformerModule.load`]."""
        default, students = read_model_set(model_name_or_path)
        routing = RoutedLaserEncoder(default, students, load=None, name=str(model_name_or_path))
        members = {key: LaserSentenceTransformerModule.load(str(path), **kwargs)
                   for key, path in routing.members().items()}
        return cls(routing, members)

    def __repr__(self) -> str:
        return f"LaserSetSentenceTransformerModule(members={list(self.members)})"


def set_sentence_transformer(path: str | os.PathLike, *, revision: str | None = None, **kwargs):
    """A `SentenceTransformer` of the model set at `path` (see the module docstring): a directory, a shipped set's
    name (`"laser-mini-set"`) or a Hub id (`"owner/name"`, its snapshot at `revision`, as `LaserEncoder` fetches
    it); `kwargs` go to the `SentenceTransformer` (e.g. `device`)."""
    resolved = resolve(path, who="set_sentence_transformer", hub_kwargs={"revision": revision})
    if resolved.kind == "members" or not resolved.is_set:
        raise ValueError(f"{path} is not a model set (a directory with laser_model_set.json)")
    location = str(Path(resolved.location).expanduser())
    return SentenceTransformer(modules=[LaserSetSentenceTransformerModule.load(location)], **kwargs)
