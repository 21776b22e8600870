"""What train.py, distillation.py and learn_bpe.py share: the training configuration (`DEFAULTS`, `load_config`,
`config_differences`) and the validation measure (`similarity_error` on `embed_valid_rows`). A module of its own, so
that none of the three imports another for them."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import torch
import yaml

from hf_laser.encoder import plan_batches
from hf_laser.modeling.modeling_laser import LaserForPreTraining
from training.data import check_corpus_weight_values
from training.objectives import check_objective, uses_decoder


DEFAULTS = {
    "seed": 1,
    "data": {
        "corpora": None,                 # list of corpus entries (see training/data.py)
        "source_languages": "all",       # list, or "all" languages found in the corpora
        "target_languages": ["en", "es"],  # decoder languages (the paper's); their order gives the language ids
        "max_length": 250,               # tokens per side, </s> included; longer pairs are skipped
        "max_length_ratio": 4.0,         # longer/shorter side above this: skipped as misaligned (null: off)
        "num_proc": 1,                   # processes for tokenization (datasets.map)
        "cache_dir": None,               # default: $XDG_CACHE_HOME/hf_laser/training
        "pretokenized": False,           # corpora written by training/pretokenize.py (BPE tokens: lookup only)
        "bitext_pairs": "targets",       # "all": bitexts between two non-target languages (tatoeba.de-fr) are
                                         # trained on too, as one direction (ranking objective only)
    },
    "tokenizer": {
        "path": None,                    # an existing LaserTokenizer directory; otherwise BPE is learned:
        "bpe_merges": 50000,
        "bpe_alpha": 0.5,                # language balancing exponent of the BPE sample
        "bpe_max_lines": None,           # size of the BPE sample (default: all lines)
        "bpe_target_languages": None,    # the target languages whose side of the pairs the BPE is learned on
                                         # (default data.target_languages; a distillation student with non-English
                                         # targets it never reads: [en])
    },
    "model": {                           # LaserConfig arguments (vocab_size/target_languages come from the data)
        "embed_dim": 320, "hidden_size": 512, "num_layers": 5, "dropout": 0.1,
        "decoder_embed_dim": 320, "decoder_hidden_size": 2048, "decoder_num_layers": 1, "lang_embed_dim": 32,
        "init_range": 0.1,
        # a transformer encoder instead (LASER3's students; distillation): its sentence is `embed_dim` wide
        "encoder_type": "bilstm", "attention_heads": 16, "ffn_dim": 4096, "normalize_before": False,
        "layernorm_embedding": False, "final_layer_norm": False, "attention_dropout": 0.0, "activation_dropout": 0.0,
        "pooling": "max", "prepend_bos": False, "max_positions": 1024,
    },
    "batching": {
        "max_tokens": 8000,              # per process and micro-batch, padded, on each side
        "max_sentences": None,
        "sampling": "alternate",         # "alternate" (paper) or "temperature"
        "temperature": 5.0,
        "num_workers": 1,                # DataLoader workers (collation only)
        "corpus_weights": None,          # {data.corpora entry: weight}: its batches drawn as if it were that many
                                         # times bigger, no pair repeated within a batch (temperature sampling)
    },
    "training": {
        "objective": "translation",      # "translation" (the paper's decoder), "ranking" (in-batch translation
                                         # ranking, no decoder) or "translation+ranking": training/objectives.py
        "ranking_temperature": 0.05,     # cosine similarities are divided by it
        "ranking_margin": 0.0,           # additive margin subtracted from the true pairs' cosine
        "translation_weight": 1.0,       # weights of the two losses in translation+ranking
        "ranking_weight": 1.0,
        "max_steps": None,               # optimizer updates; with num_epochs, whichever comes first
        "num_epochs": None,
        "max_minutes": None,             # wall-clock budget of this launch (from its start), checked every
                                         # log_every steps: then validate, checkpoint, export (extra time) and stop
        "init_from": None,               # a LaserModel directory (e.g. an earlier run's final/ or a shipped model):
                                         # the encoder starts from its weights (continued training); needs the
                                         # same tokenizer and encoder shape, checked at start
        "init_widen": False,             # with init_from: allow it a smaller model.hidden_size (the width lever):
                                         # its units are kept as they are and new ones added (widen_encoder_state)
        "learning_rate": 1.0e-3,
        "lr_scheduler": "constant",      # any transformers scheduler name: constant, linear, cosine, inverse_sqrt ...
        "lr_schedule_over": "steps",     # "minutes": a linear schedule whose decay ends at max_minutes (for a fixed
                                         # time on hardware of unknown speed; one launch, no --resume)
        "warmup_steps": 0,
        "adam_betas": [0.9, 0.98],
        "adam_eps": 1.0e-8,
        "weight_decay": 0.0,
        "max_grad_norm": 5.0,            # null: no clipping
        "gradient_accumulation_steps": 1,
        "label_smoothing": 0.0,
        "mixed_precision": None,         # "no" | "fp16" | "bf16"; null: accelerate launch's setting
        "log_every": 100,
        "eval_every": 1000,              # also at step 0 (untrained) and at the end; 0: never
        "save_every": 1000,
        "keep_checkpoints": 2,
        "final_model": "best",           # OUT/final = the best validated encoder ("best") or the last one ("last")
        "best_metric": "valid_error",    # what "best" minimises: valid_error (validation.path), valid_extra_error
                                         # (validation.extra_path) or valid_mean (the mean of the two)
        "report_to": "tensorboard",      # Accelerate tracker(s); null: none
        "check_sync_every": 0,           # compare parameters across processes every N steps (0: off)
        "save_untrained": True,          # OUT/untrained = the encoder at step 0, the baseline of training/report.py
        "snapshot_encoders": False,      # keep the encoder of every validation in OUT/encoders/step-N (for curves
                                         # of Tatoeba error vs time: training/report.py --curve)
    },
    "distillation": {                    # training.objective: distillation (training/distillation.py)
        "teacher": None,                 # a LaserEncoder directory (laser-mini, a converted LASER2): frozen, it
                                         # embeds the target side (data.target_languages) of every pair
        "cache_dir": None,               # its embeddings of the targets (default OUT/teacher), reused only when
                                         # computed by this teacher from these sentences (their manifests)
        "target_weight": 0.0,            # > 0: the teacher on both sides: the student also embeds each target
                                         # sentence and learns the teacher's embedding of it (a loss term of this
                                         # weight; Reimers & Gurevych 2020); 0: the source side only (LASER3)
    },
    "validation": {
        "path": "../shared/data/parallel/valid/flores200-devtest",  # multi-parallel folder; null: no validation
        "languages": None,               # default: the source languages (and targets) the folder has
        "max_sentences": None,           # first N lines (default all)
        "max_tokens": 12000,
        "decoder_loss": True,
        "pretokenized": False,           # the folder was written by training/pretokenize.py
        "extra_path": None,              # a folder of multi-parallel sets (e.g. de-en/{de,en}.txt), validated too:
                                         # valid_extra_error (mean over sets), valid_extra_error_<set>; e.g. the
                                         # Tatoeba pairs that training/split_tatoeba.py holds out of training
        "extra_max_sentences": None,
    },
}


def _merge(defaults: dict, given: dict, where: str = "") -> dict:
    out = copy.deepcopy(defaults)
    for key, value in (given or {}).items():
        if key not in defaults:
            raise ValueError(f"unknown config key {where}{key!r} (known: {', '.join(defaults)})")
        out[key] = _merge(defaults[key], value, f"{where}{key}.") if isinstance(defaults[key], dict) \
            else _as_number(value) if _is_number(defaults[key]) else value
    return out


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_number(value):
    """YAML 1.1 reads `1e-3` (no dot) as a string: a key whose default is a number takes it as the float it means,
    rather than failing deep inside the optimizer."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _read_config(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A YAML config; `base: OTHER.yaml` (relative to this file) is read first and this file's keys replace its
    keys one by one (nested sections merged, lists replaced): a config that changes a few keys of another."""
    if path.resolve() in seen:
        raise ValueError(f"config {path}: `base` chain loops back to it ({' -> '.join(map(str, seen))})")
    given = yaml.safe_load(path.read_text()) or {}
    base = given.pop("base", None)
    if base is None:
        return given

    def update(into: dict, new: dict) -> dict:
        for key, value in new.items():
            into[key] = update(into[key], value) if isinstance(value, dict) and isinstance(into.get(key), dict) \
                else value
        return into

    return update(_read_config(path.parent / base, (*seen, path.resolve())), given)


def load_config(path: str | os.PathLike, overrides: list[str] = ()) -> dict:
    """The YAML config (with its `base` configs) merged over `DEFAULTS` (unknown keys are errors), with
    `KEY.SUB=VALUE` overrides."""
    given = _read_config(Path(path))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        node = given
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = yaml.safe_load(value)
    cfg = _merge(DEFAULTS, given)
    if not cfg["data"]["corpora"]:
        raise ValueError("data.corpora is empty: list at least one corpus")
    tr = cfg["training"]
    if tr["mixed_precision"] is False:  # YAML 1.1 reads an unquoted `no` as false
        tr["mixed_precision"] = "no"
    if tr["mixed_precision"] not in (None, "no", "fp16", "bf16"):
        raise ValueError(f"training.mixed_precision must be no, fp16 or bf16, got {tr['mixed_precision']!r}")
    if not tr["max_steps"] and not tr["num_epochs"] and not tr["max_minutes"]:
        raise ValueError("set training.max_steps, training.num_epochs or training.max_minutes")
    if tr["max_minutes"] is not None and not tr["max_minutes"] > 0:
        raise ValueError(f"training.max_minutes must be positive, got {tr['max_minutes']!r}")
    check_objective(tr["objective"])
    if tr["lr_schedule_over"] not in ("steps", "minutes"):
        raise ValueError(f"training.lr_schedule_over must be 'steps' or 'minutes', got {tr['lr_schedule_over']!r}")
    if tr["lr_schedule_over"] == "minutes" and (tr["lr_scheduler"] != "linear" or not tr["max_minutes"]):
        raise ValueError("training.lr_schedule_over: minutes needs lr_scheduler: linear and training.max_minutes "
                         f"(got {tr['lr_scheduler']!r} and {tr['max_minutes']!r})")
    if tr["final_model"] not in ("best", "last"):
        raise ValueError(f"training.final_model must be 'best' or 'last', got {tr['final_model']!r}")
    if tr["best_metric"] not in BEST_METRICS:
        raise ValueError(f"training.best_metric must be one of {', '.join(BEST_METRICS)}, got {tr['best_metric']!r}")
    if tr["best_metric"] != "valid_error" and not cfg["validation"]["extra_path"]:
        raise ValueError(f"training.best_metric {tr['best_metric']!r} needs validation.extra_path")
    if cfg["data"].get("bitext_pairs", "targets") not in ("targets", "all"):
        raise ValueError(f"data.bitext_pairs must be 'targets' or 'all', got {cfg['data']['bitext_pairs']!r}")
    if cfg["data"].get("bitext_pairs") == "all" and uses_decoder(tr["objective"]):
        raise ValueError("data.bitext_pairs: all pairs languages that are no decoder target; it needs "
                         "training.objective: ranking")
    if tr["objective"] == "distillation" and not cfg["distillation"]["teacher"]:
        raise ValueError("training.objective: distillation needs distillation.teacher (a LaserEncoder directory)")
    if cfg["distillation"]["target_weight"] and tr["objective"] != "distillation":
        raise ValueError("distillation.target_weight is a term of training.objective: distillation only")
    if not float(cfg["distillation"]["target_weight"]) >= 0:
        raise ValueError(f"distillation.target_weight must be >= 0, got {cfg['distillation']['target_weight']}")
    if tr["objective"] == "distillation" and cfg["validation"]["extra_path"]:
        raise ValueError("training.objective: distillation validates on validation.path only (no extra_path yet)")
    if cfg["data"]["max_length"] > cfg["batching"]["max_tokens"]:
        raise ValueError("data.max_length must not exceed batching.max_tokens")
    check_corpus_weights(cfg)
    return cfg


def check_corpus_weights(cfg: dict) -> None:
    """`batching.corpus_weights` checked before any data is read: keys that are `data.corpora` entries, positive
    weights, temperature sampling (the batch schedule checks the keys against the corpora found as well)."""
    weights = cfg["batching"]["corpus_weights"]
    if not weights:
        return
    check_corpus_weight_values(weights)
    if cfg["batching"]["sampling"] != "temperature":
        raise ValueError("batching.corpus_weights needs batching.sampling: temperature")
    entries = {e if isinstance(e, str) else e.get("name", e.get("path", e.get("dataset")))
               for e in cfg["data"]["corpora"]}
    unknown = sorted(set(weights) - {str(e) for e in entries})
    if unknown:
        raise ValueError(f"batching.corpus_weights: {unknown} not among data.corpora ({sorted(map(str, entries))})")


# where and how a launch runs, not what the run computes: free to change between the launches of a run (--resume:
# its checkpoint holds the weights and OUT/tokenizer the tokenizer) and between a recipe and the run it describes
# (export_default_model.py: a run continued from another copy of the same encoder, on more processes)
LAUNCH_KEYS = frozenset({"training.init_from", "tokenizer.path", "data.num_proc", "data.cache_dir",
                         "batching.num_workers", "training.log_every", "training.save_every",
                         "training.keep_checkpoints", "training.report_to", "training.check_sync_every"})


def config_differences(before: dict, after: dict) -> list[tuple[str, object, object]]:
    """`(section.key, before, after)` for each setting in which two configs differ in what a run computes:
    `LAUNCH_KEYS` aside, and `training.max_minutes` where both schedules count steps (it only ends a launch). A key
    that a config lacks (written before the key existed) counts as its default."""
    def flat(node, prefix=""):
        if not isinstance(node, dict):
            return {prefix[:-1]: node}
        return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}

    defaults = flat(DEFAULTS)
    a, b = {**defaults, **flat(before)}, {**defaults, **flat(after)}
    ignored = LAUNCH_KEYS | ({"training.max_minutes"} if a["training.lr_schedule_over"] == "steps" ==
                             b["training.lr_schedule_over"] else set())
    missing = "(not set)"
    return [(key, a.get(key, missing), b.get(key, missing)) for key in sorted(a.keys() | b.keys())
            if key not in ignored and a.get(key, missing) != b.get(key, missing)]


BEST_METRICS = ("valid_error", "valid_extra_error", "valid_mean")


def similarity_misses(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`(n,)` bool: whether row i of `a` has a nearest row of `b` (cosine) other than row i; `a`, `b`: `(n, dim)`."""
    a = torch.nn.functional.normalize(a.float(), dim=-1)
    b = torch.nn.functional.normalize(b.float(), dim=-1)
    return (a @ b.T).argmax(dim=1) != torch.arange(len(a), device=a.device)


def similarity_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of rows of `a` whose nearest row of `b` (cosine) is not the aligned one; `a`, `b`: `(n, dim)`."""
    return int(similarity_misses(a, b).sum()) / len(a)  # a count over n: exact, as model_flores_misses' mean


@torch.no_grad()
def embed_valid_rows(model: LaserForPreTraining, tokens, rows: np.ndarray, accelerator, max_tokens: int) -> torch.Tensor:
    """`(len(rows), embedding_dim)` the encoder's embeddings of these rows of a validation token table."""
    device = accelerator.device
    out = torch.empty(len(rows), model.config.embedding_dim, device=device)
    for batch in plan_batches(tokens.lengths[rows], max_tokens):
        ids = pad_rows([tokens.get(r) for r in rows[batch]], model.config.pad_token_id).to(device)
        with accelerator.autocast():
            out[torch.from_numpy(batch).to(device)] = model.laser(
                ids, attention_mask=ids.ne(model.config.pad_token_id)).pooler_output.float()
    return out


def pad_rows(seqs, value: int) -> torch.Tensor:
    out = torch.full((len(seqs), max(map(len, seqs))), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = torch.from_numpy(np.asarray(s, dtype=np.int64))
    return out
