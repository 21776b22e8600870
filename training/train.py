"""Trains a LASER encoder (BiLSTM + the paper's auxiliary LSTM decoder) on parallel corpora with Accelerate.

    accelerate launch [--cpu] training/train.py --config CONFIG.yaml --output-dir OUT [--resume] [--set KEY=VALUE ...]

OUT receives `config.yaml` (the resolved config), `tokenizer/`, `data_stats.json`, `metrics.jsonl` (one JSON object
per logged step: `step`, `loss`, `lr`, throughput, and the validation figures when computed), tracker logs under
`logs/`, `checkpoints/step-*/` (`accelerator.save_state`), `untrained/` (the encoder at step 0, the baseline of
`training/report.py`; with `training.init_from`, the encoder the run continues), `best/` (encoder + tokenizer with the lowest validation error so far) and, at the end (the
step or epoch limit, or the `training.max_minutes` budget of this launch), `final/`: a `LaserModel` directory
(config, weights, tokenizer, model card) that `AutoModel` / `LaserEncoder.from_pretrained` load. `--resume`
continues from the last complete checkpoint with the same data order (the batches of an epoch are a function of the
seed and the epoch; RNG states are restored), so a killed run that is resumed ends where an uninterrupted one does.
Configs: `training/configs/*.yaml`; every key and its default is in `DEFAULTS` below. `--set training.max_steps=100`
overrides one key (value parsed as YAML).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `training` (and, if not installed, `hf_laser`) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import ProjectConfiguration, set_seed  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import get_scheduler  # noqa: E402

from hf_laser.modeling.configuration_laser import LaserConfig  # noqa: E402
from hf_laser.encoder import plan_batches  # noqa: E402
from hf_laser.checkpoints.model_card import write_model_card  # noqa: E402
from hf_laser.modeling.modeling_laser import LaserForPreTraining, LaserModel  # noqa: E402
from hf_laser.text.tokenization_laser import LaserTokenizer  # noqa: E402
from training.data import (  # noqa: E402
    BatchSchedule,
    ListSampler,
    PairBatches,
    _atomic_publish,
    _cache_key,
    default_cache_dir,
    prepare_training_data,
    prepare_extra_valid_data,
    prepare_valid_data,
    resolve_corpora,
)
from training.objectives import training_loss, uses_decoder  # noqa: E402
# the configuration and the validation measure, shared with distillation.py and learn_bpe.py (re-exported here)
from training.common import (  # noqa: E402,F401
    BEST_METRICS,
    DEFAULTS,
    LAUNCH_KEYS,
    check_corpus_weights,
    config_differences,
    embed_valid_rows,
    load_config,
    pad_rows,
    similarity_error,
    similarity_misses,
)

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------- config


def _flat(cfg: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in cfg.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out


# ---------------------------------------------------------------------------------------------- state
class TrainState:
    """Loop position and best validation result; saved with every checkpoint."""

    def __init__(self):
        self.step, self.epoch, self.epoch_step = 0, 0, 0
        self.best_error, self.best_step = math.inf, -1
        self.seconds = 0.0  # wall-clock seconds of the launches up to the last checkpoint (minutes in metrics)

    def state_dict(self) -> dict:
        return dict(vars(self))

    def load_state_dict(self, state: dict):
        vars(self).update(state)


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints (`COMPLETE` marker written after `save_state`), oldest first."""
    found = [p for p in (out / "checkpoints").glob("step-*") if (p / "COMPLETE").is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


# ---------------------------------------------------------------------------------------------- tokenizer
def get_tokenizer(cfg: dict, out: Path, log) -> LaserTokenizer:
    """`OUT/tokenizer` if present (resume), else the configured one, else a BPE learned (and cached) on the data."""
    target = out / "tokenizer"
    if (target / "vocab.json").is_file():
        return LaserTokenizer.from_pretrained(str(target))
    tok_cfg = cfg["tokenizer"]
    if not tok_cfg["path"] and cfg["data"].get("pretokenized"):
        raise ValueError("data.pretokenized needs tokenizer.path: the tokenizer the corpora were pretokenized with "
                         "(a BPE learned on BPE tokens would be wrong)")
    if tok_cfg["path"]:
        tokenizer = LaserTokenizer.from_pretrained(str(REPO / tok_cfg["path"]))
    else:
        from training.learn_bpe import learn_bpe, training_text

        data = cfg["data"]
        if tok_cfg["bpe_target_languages"] is not None:
            extra = sorted(set(tok_cfg["bpe_target_languages"]) - set(data["target_languages"]))
            if extra or not tok_cfg["bpe_target_languages"]:
                raise ValueError(f"tokenizer.bpe_target_languages must be some of data.target_languages, got "
                                 f"{tok_cfg['bpe_target_languages']}")
            data = {**data, "target_languages": list(tok_cfg["bpe_target_languages"])}
        key = _cache_key({"bpe": [c.fingerprint() for c in resolve_corpora(data["corpora"], REPO)],
                          "sources": data["source_languages"], "targets": data["target_languages"],
                          "merges": tok_cfg["bpe_merges"], "alpha": tok_cfg["bpe_alpha"],
                          "max_lines": tok_cfg["bpe_max_lines"], "seed": cfg["seed"]})
        cache_root = Path(data["cache_dir"] or default_cache_dir())
        cached = cache_root / f"bpe-{key}"
        if not (cached / "meta.json").is_file():
            cache_root.mkdir(parents=True, exist_ok=True)
            tmp = cache_root / f".bpe-{key}-{os.getpid()}"
            learn_bpe(training_text(data, REPO), tmp, merges=tok_cfg["bpe_merges"], alpha=tok_cfg["bpe_alpha"],
                      max_lines=tok_cfg["bpe_max_lines"], seed=cfg["seed"], num_proc=data["num_proc"], log=log)
            (tmp / "meta.json").write_text(json.dumps({"merges": tok_cfg["bpe_merges"]}))
            _atomic_publish(tmp, cached)
        else:
            log(f"BPE: reusing {cached}")
        tokenizer = LaserTokenizer.from_pretrained(str(cached))
    tokenizer.save_pretrained(str(target))
    if (Path(tokenizer.name_or_path) / "bpe_stats.json").is_file():
        shutil.copy(Path(tokenizer.name_or_path) / "bpe_stats.json", target / "bpe_stats.json")
    return tokenizer


# ---------------------------------------------------------------------------------------------- continued training
ENCODER_SHAPE_KEYS = ("vocab_size", "embed_dim", "hidden_size", "num_layers", "bidirectional", "pad_token_id",
                      "eos_token_id", "unk_token_id", "bos_token_id", "left_pad")


def widen_encoder_state(state: dict, old_hidden: int, new_hidden: int, num_layers: int, bidirectional: bool,
                        scale: float, generator: torch.Generator) -> dict:
    """The encoder state dict `state` (LSTM hidden size `old_hidden`) widened to `new_hidden` units per direction.

    Every old unit keeps its weights and gets weight 0 from every new unit (the new units' hidden states and,
    above the first layer, their outputs in the input), so the old units compute exactly what they did: the
    widened encoder's embedding, in the dimensions of each direction's first `old_hidden` units, is the start's.
    The new units' weights are drawn from U(-scale, scale) (distinct, so that they learn distinct features; small,
    so that they start near 0 and barely move the cosines) and their biases are 0.
    """
    if new_hidden < old_hidden:
        raise ValueError(f"cannot widen hidden_size {old_hidden} to the smaller {new_hidden}")
    directions = ("", "_reverse") if bidirectional else ("",)
    # the input of layer k > 0 is [forward units; backward units] of layer k - 1: old column j -> new column
    old_cols = torch.cat([torch.arange(old_hidden) + d * new_hidden for d in range(len(directions))])
    rows = torch.cat([torch.arange(old_hidden) + gate * new_hidden for gate in range(4)])  # gates i, f, g, o
    widened = {k: v for k, v in state.items() if not k.startswith("lstm.")}
    for layer in range(num_layers):
        for d in directions:
            for kind in ("ih", "hh"):
                old = state[f"lstm.weight_{kind}_l{layer}{d}"]
                if kind == "hh":
                    cols, in_size = torch.arange(old_hidden), new_hidden
                elif layer == 0:  # the token embeddings: unchanged
                    cols, in_size = torch.arange(old.shape[1]), old.shape[1]
                else:
                    cols, in_size = old_cols, new_hidden * len(directions)
                new = (torch.rand(4 * new_hidden, in_size, generator=generator) * 2 - 1) * scale
                new[rows] = 0.0
                new[rows[:, None], cols[None, :]] = old
                widened[f"lstm.weight_{kind}_l{layer}{d}"] = new
                bias = torch.zeros(4 * new_hidden)
                bias[rows] = state[f"lstm.bias_{kind}_l{layer}{d}"]
                widened[f"lstm.bias_{kind}_l{layer}{d}"] = bias
    return widened


def init_encoder_from(model: LaserForPreTraining, path: Path, tokenizer: LaserTokenizer, log,
                      widen: bool = False, seed: int = 0) -> None:
    """Copies the encoder weights of the LaserModel directory `path` into `model.laser` (`training.init_from`).

    Refuses a directory whose vocabulary or encoder shape differs from this run's: the same ids must mean the
    same tokens, or the continued model would silently start from garbage. With `widen` (`training.init_widen`),
    a smaller `hidden_size` is accepted and widened by `widen_encoder_state`, which is logged.
    """
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"training.init_from: {path} is not a LaserModel directory (no config.json)")
    start = LaserModel.from_pretrained(str(path), dtype=torch.float32)
    mismatched = {k: (getattr(start.config, k, None), getattr(model.config, k, None)) for k in ENCODER_SHAPE_KEYS
                  if getattr(start.config, k, None) != getattr(model.config, k, None)}
    widening = widen and set(mismatched) == {"hidden_size"} and start.config.hidden_size < model.config.hidden_size
    if mismatched and not widening:
        raise ValueError(f"training.init_from: {path} differs from this run's model in {mismatched} "
                         "(theirs, ours); set model.* (and tokenizer.path) to match it"
                         + ("" if widen else "; a smaller hidden_size is accepted with training.init_widen: true"))
    theirs = LaserTokenizer.from_pretrained(str(path)).get_vocab()
    if theirs != tokenizer.get_vocab():
        raise ValueError(f"training.init_from: {path} has another vocabulary than this run's tokenizer; set "
                         f"tokenizer.path: {path}")
    state = start.state_dict()
    if widening:
        cfg = model.config
        scale = 0.1 * cfg.init_range
        state = widen_encoder_state(state, start.config.hidden_size, cfg.hidden_size, cfg.num_layers,
                                    cfg.bidirectional, scale, torch.Generator().manual_seed(seed))
        log(f"training.init_widen: hidden_size {start.config.hidden_size} -> {cfg.hidden_size}; the start's units "
            f"are kept (its embedding is this one's dimensions 0-{start.config.hidden_size - 1} of each direction), "
            f"the new ones start from U(-{scale:g}, {scale:g}) and do not feed the old ones")
    model.laser.load_state_dict(state, strict=True)
    log(f"encoder initialised from {path} ({sum(p.numel() for p in start.parameters()):,} parameters)")


# ---------------------------------------------------------------------------------------------- validation


@torch.no_grad()
def validate(model: LaserForPreTraining, valid, target_languages: list[str], accelerator, vcfg: dict) -> dict:
    """Similarity-search error (both directions, each language against each target language) and decoder loss."""
    was_training = model.training
    model.eval()
    device, tokens = accelerator.device, valid.tokens
    emb = {lang: embed_valid_rows(model, tokens, rows, accelerator, vcfg["max_tokens"])
           for lang, rows in valid.rows.items()}
    targets = [t for t in target_languages if t in valid.rows]
    result, per_lang = {}, {}
    for lang in valid.rows:
        errs = [(similarity_error(emb[lang], emb[t]) + similarity_error(emb[t], emb[lang])) / 2
                for t in targets if t != lang]
        if errs:
            per_lang[lang] = 100 * sum(errs) / len(errs)
    if per_lang:
        result["valid_error"] = sum(per_lang.values()) / len(per_lang)
        result.update({f"valid_error_{lang}": e for lang, e in per_lang.items()})
    if vcfg["decoder_loss"] and targets and model.decoder is not None:
        loss_sum, n_tok = 0.0, 0
        for lang, rows in valid.rows.items():
            for t in targets:
                if t == lang:
                    continue
                tgt_rows = valid.rows[t]
                lengths = np.maximum(tokens.lengths[rows], tokens.lengths[tgt_rows])
                for batch in plan_batches(lengths, vcfg["max_tokens"]):
                    src = [tokens.get(r) for r in rows[batch]]
                    tgt = [tokens.get(r) for r in tgt_rows[batch]]
                    ids = pad_rows(src, model.config.pad_token_id).to(device)
                    labels = pad_rows(tgt, -100).to(device)
                    lang_ids = torch.full((len(batch),), target_languages.index(t), device=device)
                    with accelerator.autocast():
                        out = model(input_ids=ids, attention_mask=ids.ne(model.config.pad_token_id),
                                    labels=labels, target_lang_ids=lang_ids)
                    n = int(labels.ne(-100).sum())
                    loss_sum += float(out.loss) * n
                    n_tok += n
        result["valid_loss"] = loss_sum / max(n_tok, 1)
    model.train(was_training)
    return result


@torch.no_grad()
def validate_extra(model: LaserForPreTraining, sets: dict, target_languages: list[str], accelerator,
                   vcfg: dict) -> dict:
    """Similarity-search error on each extra validation set: `valid_extra_error_<set>` (mean over its non-target
    languages) and `valid_extra_error`, the mean over the sets."""
    per_set = {}
    for name, data in sets.items():
        result = validate(model, data, target_languages, accelerator, {**vcfg, "decoder_loss": False})
        if "valid_error" in result:
            per_set[name] = result["valid_error"]
    if not per_set:
        return {}
    return {"valid_extra_error": sum(per_set.values()) / len(per_set),
            **{f"valid_extra_error_{name}": e for name, e in per_set.items()}}


def param_fingerprint(model: torch.nn.Module) -> torch.Tensor:
    """Two float64 numbers per parameter (sum and a position-weighted sum) to compare replicas cheaply."""
    parts = []
    for p in model.parameters():
        flat = p.detach().double().flatten()
        weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64).remainder_(97)
        parts.append(torch.stack([flat.sum(), (flat * weights).sum()]))
    return torch.cat(parts)


# ---------------------------------------------------------------------------------------------- export
def training_summary(cfg: dict, data, state: TrainState, exported: str) -> str:
    stats = data.stats
    directions = ", ".join(f"{k} {v:,}" for k, v in stats["pairs_per_direction"].items())
    corpora = "\n".join(f"- `{c}`" for c in dict.fromkeys(
        e if isinstance(e, str) else e.get("path", e.get("dataset")) for e in cfg["data"]["corpora"]))
    tr, m, b = cfg["training"], cfg["model"], cfg["batching"]
    decoder = (f"LSTM decoder into {', '.join(cfg['data']['target_languages'])}, discarded after training"
               if uses_decoder(tr["objective"]) else "no decoder")
    ranking = (f", in-batch ranking with temperature {tr['ranking_temperature']} and margin {tr['ranking_margin']}"
               if tr["objective"] in ("ranking", "translation+ranking") else "")
    if tr["objective"] == "distillation":
        ranking = f", cosine distillation from the teacher `{cfg['distillation']['teacher']}`"
    return (
        f"Trained with `hf_laser`'s `training/train.py`: BiLSTM encoder, objective `{tr['objective']}`{ranking} "
        f"({decoder}); sentence pairs into {', '.join(cfg['data']['target_languages'])}.\n\n"
        f"Corpora:\n{corpora}\n\n"
        f"Sentence pairs: {stats['pairs']:,} ({directions}); skipped: "
        f"{', '.join(f'{k} {v:,}' for k, v in stats['skipped'].items())}; missing (multi-parallel): "
        f"{stats['missing']:,}.\n\n"
        f"Settings: encoder {m['num_layers']}×{m['hidden_size']} BiLSTM, embeddings {m['embed_dim']}; "
        + (f"decoder {m['decoder_num_layers']}×{m['decoder_hidden_size']} LSTM; " if uses_decoder(tr["objective"])
           else "") + f"Adam lr {tr['learning_rate']} "
        f"({tr['lr_scheduler']}), {b['max_tokens']} tokens per process and micro-batch, "
        f"{tr['gradient_accumulation_steps']} accumulation step(s), sampling {b['sampling']}"
        + (f" (corpus weights {b['corpus_weights']})" if b["corpus_weights"] else "") + f", dropout {m['dropout']}, "
        f"{state.step} updates ({state.epoch} full epochs). Exported encoder: {exported}."
    )


def export_final(accelerator, model, tokenizer, cfg, data, state, out: Path, last_valid: dict | None, log):
    final = out / "final"
    shutil.rmtree(final, ignore_errors=True)
    if cfg["training"]["final_model"] == "best" and (out / "best" / "config.json").is_file():
        shutil.copytree(out / "best", final)
        exported = (f"best validation error {state.best_error:.2f}% ({cfg['training']['best_metric']}) at step "
                    f"{state.best_step}")
    else:
        accelerator.unwrap_model(model).save_encoder(str(final))
        tokenizer.save_pretrained(str(final))
        (final / "training_state.json").write_text(json.dumps({
            "step": state.step, "valid_error": (last_valid or {}).get("valid_error")}))
        exported = f"last step ({state.step})"
    evaluation = None
    if last_valid:
        lines = [f"| {k.removeprefix('valid_error_')} | {v:.2f} |" for k, v in last_valid.items()
                 if k.startswith("valid_error_")]
        evaluation = (f"Similarity-search error (%) on `{cfg['validation']['path']}` at the last validation "
                      f"(step {state.step}), both directions against the target languages:\n\n"
                      "| language | error |\n|---|---|\n" + "\n".join(lines))
    write_model_card(final, model_name=f"LASER encoder {out.resolve().name}",
                     training=training_summary(cfg, data, state, exported), evaluation=evaluation,
                     tokenizer="Moses + fastBPE (LASER1), BPE learned on the training data")
    log(f"exported {exported} to {final}")


# ---------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in OUT")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    args = parser.parse_args(argv)
    launched_at = time.monotonic()
    cfg = load_config(args.config, args.set)
    out = Path(args.output_dir)
    tr, bcfg, vcfg = cfg["training"], cfg["batching"], cfg["validation"]

    accelerator = Accelerator(
        # Without an accelerator device, `cpu=True` makes processes started by torchrun / `accelerate launch
        # --multi_gpu` form a gloo (MULTI_CPU) group instead of running as unrelated single processes.
        cpu=not torch.accelerator.is_available(),
        mixed_precision=tr["mixed_precision"], log_with=tr["report_to"] or None,
        project_config=ProjectConfiguration(project_dir=str(out), logging_dir=str(out / "logs")),
    )
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != accelerator.num_processes:
        raise SystemExit(f"{launched} processes were launched but Accelerate sees {accelerator.num_processes}")
    is_main = accelerator.is_main_process

    def log(msg: str):
        if accelerator.is_local_main_process:
            tqdm.write(f"[laser-train] {msg}", file=sys.stderr)

    found = checkpoints(out)
    if found and not args.resume:
        print(f"train.py: error: {out} already has checkpoints ({found[-1].name}); pass --resume to continue that run "
              "or use a new --output-dir", file=sys.stderr)
        raise SystemExit(2)
    if found and tr["lr_schedule_over"] == "minutes":
        print(f"train.py: error: {out} has checkpoints, and a schedule over minutes cannot be continued (its decay "
              "depended on this machine's speed); resume with training.lr_schedule_over=steps and max_steps set, or "
              "use a new --output-dir", file=sys.stderr)
        raise SystemExit(2)
    saved_cfg = out / "config.yaml"
    if args.resume and saved_cfg.is_file():
        previous = yaml.safe_load(saved_cfg.read_text())
        changed = [f"{key} ({was!r} -> {now!r})" for key, was, now in config_differences(previous, cfg)]
        if changed:
            log(f"warning: config differs from the run being resumed in {', '.join(changed)}; the result will "
                "differ from an uninterrupted run")
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        saved_cfg.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    set_seed(cfg["seed"])

    with accelerator.main_process_first():
        tokenizer = get_tokenizer(cfg, out, log)
    targets = list(cfg["data"]["target_languages"])
    teacher = targets_of_teacher = None
    if tr["objective"] == "distillation":
        from training.distillation import TeacherTargets, load_teacher

        teacher = load_teacher(REPO / cfg["distillation"]["teacher"])
    with accelerator.local_main_process_first():
        # a student that never reads the target side (target_weight 0) has its length limits counted on it by the
        # teacher, which does
        data = prepare_training_data(
            cfg["data"], tokenizer, base_dir=REPO, log=log,
            target_tokenizer=teacher.tokenizer if teacher is not None and not cfg["distillation"]["target_weight"]
            else None)
        valid = None
        if vcfg["path"]:
            langs = vcfg["languages"] or sorted({s for s, _ in data.directions} | set(targets))
            valid = prepare_valid_data(vcfg, langs, tokenizer, cache_dir=cfg["data"]["cache_dir"], base_dir=REPO,
                                       num_proc=cfg["data"]["num_proc"], log=log)
        extra_valid = {}
        if vcfg["extra_path"]:
            langs = sorted({s for s, _ in data.directions} | set(targets))
            extra_valid = prepare_extra_valid_data(
                vcfg["extra_path"], langs, tokenizer, max_sentences=vcfg["extra_max_sentences"],
                cache_dir=cfg["data"]["cache_dir"], base_dir=REPO, num_proc=cfg["data"]["num_proc"], log=log)
    if is_main:
        (out / "data_stats.json").write_text(json.dumps(data.stats, indent=1, ensure_ascii=False))
    log(f"{len(data):,} training pairs in {len(data.directions)} directions; skipped {data.stats['skipped']}; "
        f"validation languages: {sorted(valid.rows) if valid else None}"
        + (f"; extra validation sets: {sorted(extra_valid)}" if extra_valid else ""))

    if tr["objective"] == "distillation":
        # (2 x hidden_size for a BiLSTM student, embed_dim for a transformer: `model.encoder_type: transformer`)
        student_dim = LaserConfig(**cfg["model"]).embedding_dim
        if student_dim != teacher.dim:
            what = "model.embed_dim" if cfg["model"].get("encoder_type") == "transformer" else "2 x model.hidden_size"
            raise ValueError(f"the student's embedding ({what} = {student_dim}) must have the teacher's dimension "
                             f"{teacher.dim}")
        with accelerator.main_process_first():  # one process computes the targets, the others reuse them
            targets_of_teacher = TeacherTargets.prepare(
                data, cfg["data"], teacher, Path(cfg["distillation"]["cache_dir"] or out / "teacher"), base_dir=REPO,
                log=log)

    vocab = tokenizer.get_vocab()
    model_config = LaserConfig(
        vocab_size=len(vocab), target_languages=targets, pad_token_id=vocab["<pad>"], bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"], unk_token_id=vocab["<unk>"], label_smoothing=tr["label_smoothing"],
        **{**cfg["model"], **({} if uses_decoder(tr["objective"]) else {"decoder_num_layers": 0})},
    )
    if tr["objective"] == "distillation":
        from hf_laser.text.languages import flores_codes

        # a student of one language records it, as hf-laser convert does for LASER3 students: a list of directories
        # (teacher, students) or a model set then routes that language's sentences to it
        sources = sorted({s for s, _ in data.directions})
        codes = flores_codes(sources[0]) if len(sources) == 1 else ()
        if len(codes) == 1:
            model_config.language = codes[0]
        else:
            log(f"the student's language is not recorded in its config (source languages {sources}): name it in "
                "the model set (hf_laser.model_set.write_model_set) to route to it")
    model = LaserForPreTraining(model_config)
    if tr["init_from"] and not (args.resume and found):  # a resumed run's checkpoint already holds these weights
        init_encoder_from(model, REPO / tr["init_from"], tokenizer, log, widen=tr["init_widen"], seed=cfg["seed"])
    optimizer = torch.optim.Adam(model.parameters(), lr=tr["learning_rate"], betas=tuple(tr["adam_betas"]),
                                 eps=tr["adam_eps"], weight_decay=tr["weight_decay"])
    world, rank, accum = accelerator.num_processes, accelerator.process_index, tr["gradient_accumulation_steps"]
    schedule = BatchSchedule(data, bcfg["max_tokens"], max_sentences=bcfg["max_sentences"],
                             sampling=bcfg["sampling"], temperature=bcfg["temperature"], seed=cfg["seed"],
                             corpus_weights=bcfg["corpus_weights"],
                             source_only=tr["objective"] == "distillation" and not cfg["distillation"]["target_weight"])
    if bcfg["corpus_weights"]:
        weighted, unweighted = schedule.weighted_corpora_share()
        log("corpus weights " + ", ".join(f"{k} x{v}" for k, v in bcfg["corpus_weights"].items())
            + f": their share of the batches {unweighted:.1%} -> {weighted:.1%}")
    if schedule.steps_in_epoch(0, world, accum) == 0:
        raise ValueError(f"an epoch has fewer batches ({len(schedule.epoch(0))}) than processes × accumulation "
                         f"steps ({world} × {accum}); lower batching.max_tokens or add data")
    max_steps = tr["max_steps"] or math.inf
    if tr["num_epochs"]:
        max_steps = min(max_steps, sum(schedule.steps_in_epoch(e, world, accum) for e in range(tr["num_epochs"])))
    time_progress = [0.0]  # of the time schedule: the share of the training time spent, the same on every process
    if tr["lr_schedule_over"] == "minutes":
        scheduler = time_linear_schedule(optimizer, tr["warmup_steps"], time_progress)
    else:
        if max_steps == math.inf and tr["lr_scheduler"] not in ("constant", "constant_with_warmup"):
            raise ValueError(f"lr_scheduler {tr['lr_scheduler']!r} needs a known length: set training.max_steps, "
                             "training.num_epochs or training.lr_schedule_over: minutes")
        scheduler = get_scheduler(tr["lr_scheduler"], optimizer, num_warmup_steps=tr["warmup_steps"],
                                  num_training_steps=max_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    state = TrainState()
    accelerator.register_for_checkpointing(scheduler, state)
    metrics_path = out / "metrics.jsonl"
    if args.resume and found:
        accelerator.load_state(str(found[-1]))
        log(f"resumed from {found[-1]} (step {state.step}, epoch {state.epoch})")
        if is_main and metrics_path.is_file():  # drop what the interrupted run logged after this checkpoint
            rows = [r for r in metrics_path.read_text().splitlines() if r and json.loads(r)["step"] <= state.step]
            metrics_path.write_text("".join(r + "\n" for r in rows))
    elif is_main:
        metrics_path.unlink(missing_ok=True)
    accelerator.init_trackers("laser", config=_flat(cfg))
    log(f"{world} process(es), {schedule.steps_in_epoch(0, world, accum)} steps per epoch, training to step "
        f"{max_steps}; {sum(p.numel() for p in model.parameters()):,} parameters")

    seconds_before = state.seconds

    def minutes() -> float:
        return (seconds_before + time.monotonic() - launched_at) / 60

    def record(row: dict):
        row["minutes"] = round(minutes(), 3)
        accelerator.log(row, step=row["step"])
        if is_main:
            with metrics_path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")

    unwrapped = accelerator.unwrap_model(model)
    last_valid: dict | None = None
    teacher_valid_cache: dict = {}  # the teacher's embeddings of the validation targets (distillation)

    def run_validation():
        nonlocal last_valid
        if valid is None and not extra_valid:
            return {}
        if is_main and teacher is not None:
            from training.distillation import validate_distillation

            last_valid = validate_distillation(unwrapped, valid, REPO / vcfg["path"], vcfg["max_sentences"], targets,
                                               teacher, accelerator, vcfg, teacher_valid_cache)
        elif is_main:
            last_valid = validate(unwrapped, valid, targets, accelerator, vcfg) if valid is not None else {}
        if is_main:
            if extra_valid:
                last_valid.update(validate_extra(unwrapped, extra_valid, targets, accelerator, vcfg))
                if "valid_error" in last_valid and "valid_extra_error" in last_valid:
                    last_valid["valid_mean"] = (last_valid["valid_error"] + last_valid["valid_extra_error"]) / 2
            # step 0 (the untrained model) is a baseline, never exported as the best encoder
            selected = last_valid.get(tr["best_metric"], math.inf)
            if state.step > 0 and selected < state.best_error:
                state.best_error, state.best_step = selected, state.step
                tmp = out / ".best.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                unwrapped.save_encoder(str(tmp))
                tokenizer.save_pretrained(str(tmp))
                (tmp / "training_state.json").write_text(json.dumps({"step": state.step,
                                                                     tr["best_metric"]: state.best_error}))
                shutil.rmtree(out / "best", ignore_errors=True)
                os.replace(tmp, out / "best")
            if tr["snapshot_encoders"]:
                snapshot = out / "encoders" / f"step-{state.step:08d}"
                unwrapped.save_encoder(str(snapshot))
                tokenizer.save_pretrained(str(snapshot))
                (snapshot / "training_state.json").write_text(json.dumps({
                    "step": state.step, "minutes": round(minutes(), 3),
                    **{k: last_valid.get(k) for k in BEST_METRICS if k in last_valid}}))
        accelerator.wait_for_everyone()
        return last_valid or {}

    if state.step == 0 and tr["save_untrained"] and is_main:
        shutil.rmtree(out / "untrained", ignore_errors=True)
        unwrapped.save_encoder(str(out / "untrained"))
        tokenizer.save_pretrained(str(out / "untrained"))
    if state.step == 0 and tr["eval_every"]:
        row = {"step": 0, **run_validation()}
        log(f"step 0 ({'start: ' + str(tr['init_from']) if tr['init_from'] else 'untrained'}): {_fmt(row)}")
        record(row)

    model.train()
    device = accelerator.device
    loss_options = {"temperature": tr["ranking_temperature"], "margin": tr["ranking_margin"],
                    "translation_weight": tr["translation_weight"], "ranking_weight": tr["ranking_weight"],
                    "target_weight": float(cfg["distillation"]["target_weight"])}
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss * tokens, target tokens, source tokens
    timer = time.perf_counter()
    progress = tqdm(total=None if max_steps == math.inf else max_steps, initial=state.step, desc="training",
                    disable=not accelerator.is_local_main_process)
    if targets_of_teacher is not None:
        from training.distillation import DistillationBatches

        dataset = DistillationBatches(data, targets, targets_of_teacher, pad_token_id=model_config.pad_token_id)
    else:
        dataset = PairBatches(data, targets, pad_token_id=model_config.pad_token_id)
    # the budget counts from the launch (data preparation included), like a cluster's time limit
    deadline = launched_at + 60 * tr["max_minutes"] if tr["max_minutes"] else None
    training_from = time.monotonic()

    def out_of_time() -> bool:
        # decided together, so that every process stops after the same step (and the time schedule's learning rate
        # is the same on all); only at logging steps, which synchronise anyway, so that no other step waits
        if deadline is None or state.step % tr["log_every"]:
            return False
        now = time.monotonic()
        clock = torch.tensor([float(now > deadline), (now - training_from) / max(deadline - training_from, 1e-9)],
                             device=device)
        late, progress_share = accelerator.reduce(clock, reduction="max").tolist()  # the slowest process decides
        time_progress[0] = min(progress_share, 1.0)
        return late > 0

    stopped = False
    while state.step < max_steps and not stopped:
        batches = schedule.shard(state.epoch, rank, world, accum)
        steps_per_epoch = len(batches) // accum
        loader = torch.utils.data.DataLoader(
            dataset, sampler=ListSampler(batches[state.epoch_step * accum:]), batch_size=None,
            num_workers=bcfg["num_workers"], pin_memory=device.type == "cuda",
            generator=torch.Generator().manual_seed(cfg["seed"]),  # keep the global RNG (dropout) untouched
        )
        micro = iter(loader)
        while state.epoch_step < steps_per_epoch and state.step < max_steps:
            for i in range(accum):
                batch = {k: v.to(device, non_blocking=True) for k, v in next(micro).items()}
                sync = contextlib.nullcontext() if i == accum - 1 else accelerator.no_sync(model)
                with sync:
                    loss, _ = training_loss(model, batch, tr["objective"], **loss_options)
                    accelerator.backward(loss / accum)
                n_tgt = batch["labels"].ne(-100).sum()
                sums += torch.stack([loss.detach().double() * n_tgt, n_tgt.double(),
                                     batch["attention_mask"].sum().double()])
            if tr["max_grad_norm"]:
                accelerator.clip_grad_norm_(model.parameters(), tr["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            state.step += 1
            state.epoch_step += 1
            progress.update(1)
            stopped = out_of_time()
            done = state.step == max_steps or stopped
            row = {}
            if state.step % tr["log_every"] == 0 or done:
                total = accelerator.reduce(sums, reduction="sum").tolist()
                elapsed = time.perf_counter() - timer
                row.update(loss=total[0] / max(total[1], 1), lr=scheduler.get_last_lr()[0],
                           epoch=state.epoch + state.epoch_step / steps_per_epoch,
                           tgt_tokens_per_s=total[1] / elapsed, src_tokens_per_s=total[2] / elapsed)
                sums.zero_()
                timer = time.perf_counter()
                progress.set_postfix(loss=f"{row['loss']:.3f}")
            if tr["check_sync_every"] and state.step % tr["check_sync_every"] == 0:
                prints = accelerator.gather(param_fingerprint(model).unsqueeze(0))
                row["param_sync_max_diff"] = float((prints - prints[0]).abs().max())
                row["loss_per_process"] = accelerator.gather(loss.detach().float().reshape(1)).tolist()
            if tr["eval_every"] and (state.step % tr["eval_every"] == 0 or done):
                row.update(run_validation())
                timer = time.perf_counter()
            epoch_done = state.epoch_step == steps_per_epoch
            if epoch_done:
                state.epoch, state.epoch_step = state.epoch + 1, 0
            if row:
                row = {"step": state.step, **row}
                if any(k in row for k in ("valid_error", "valid_extra_error", "valid_loss")):
                    log(f"step {state.step}: {_fmt(row)}")
                record(row)
            if state.step % tr["save_every"] == 0 or done:
                state.seconds = minutes() * 60
                save_checkpoint(accelerator, out, state.step, tr["keep_checkpoints"])
                timer = time.perf_counter()
            if epoch_done or stopped:
                break
        del micro, loader
    progress.close()
    if stopped:
        log(f"stopped at step {state.step}: training.max_minutes ({tr['max_minutes']}) reached; the checkpoint of "
            "this step is saved, " + ("--resume continues from it" if tr["lr_schedule_over"] == "steps" else
                                      "the schedule over minutes has ended (a run of it cannot be resumed)"))

    accelerator.wait_for_everyone()
    if is_main:
        export_final(accelerator, model, tokenizer, cfg, data, state, out, last_valid, log)
    accelerator.end_training()
    return 0


def time_linear_schedule(optimizer, warmup_steps: int, progress: list[float]):
    """Linear warm-up over `warmup_steps` steps, then a linear decay to 0 over time: the factor is
    `1 - progress[0]`, the share of the launch's training time spent (updated by the loop at logging steps)."""
    def factor(step: int) -> float:
        return min(1.0, step / warmup_steps if warmup_steps else 1.0) * max(0.0, 1.0 - progress[0])
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _fmt(row: dict) -> str:
    keys = [k for k in ("loss", "valid_error", "valid_extra_error", "valid_loss") if k in row]
    return ", ".join(f"{k} {row[k]:.3f}" for k in keys) or "-"


def save_checkpoint(accelerator, out: Path, step: int, keep: int):
    path = out / "checkpoints" / f"step-{step:08d}"
    accelerator.save_state(str(path))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (path / "COMPLETE").write_text(str(step))
        for old in checkpoints(out)[:-keep] if keep else []:
            (old / "COMPLETE").unlink()  # first, so that a half-deleted checkpoint is never taken for a complete one
            shutil.rmtree(old, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
