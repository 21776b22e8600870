"""PyTorch LASER model: the BiLSTM sentence encoder of Artetxe & Schwenk (2019).

This file only depends on `torch`, `transformers`, `configuration_laser.py` and `bilstm.py` (the encoder's computation
in plain PyTorch), so that it can be shipped next to the weights and loaded with `trust_remote_code=True` where
`hf_laser` is not installed.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPooling, ModelOutput, SequenceClassifierOutput
from transformers.utils import cached_file
from transformers.utils.generic import can_return_tuple

from ..checkpoints.integration_files import write_integration_files
from .bilstm import (  # noqa: F401 (re-exported)
    BiLSTMEncoderMixin,
    cpu_autocast_lstm,
    ieee_fp32_lstm,
    right_align,
    vocab_problems,
)
from .configuration_laser import LaserConfig
from .transformer import TransformerEncoderMixin


class _DropLoadReport(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in str(record.msg)


@contextmanager
def _without_load_report():
    """transformers' load report (a multi-line table on its log) left out for the duration."""
    log = logging.getLogger("transformers.modeling_utils")
    drop = _DropLoadReport()
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)

class LaserPreTrainedModel(PreTrainedModel):
    """Base class: holds the config class, the weight initialisation and the loading conventions."""

    config_class = LaserConfig
    base_model_prefix = "laser"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules = ["LaserEncoderLSTM"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        if getattr(self.config, "encoder_type", "bilstm") == "transformer":
            # fairseq's transformer: Xavier-uniform projections with zero biases, N(0, dim^-1/2) embeddings with a
            # zero <pad> row, unit layer norms
            if isinstance(module, nn.Linear):
                init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                init.normal_(module.weight, mean=0.0, std=module.embedding_dim ** -0.5)
                if module.padding_idx is not None:
                    init.zeros_(module.weight[module.padding_idx])
            elif isinstance(module, nn.LayerNorm):
                init.ones_(module.weight)
                init.zeros_(module.bias)
            return
        # fairseq's LSTM models (which LASER was trained with) draw every weight from U(-0.1, 0.1).
        r = self.config.init_range
        if isinstance(module, (nn.LSTM, nn.Linear, nn.Embedding)):
            for _, param in module.named_parameters(recurse=False):
                init.uniform_(param, -r, r)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            init.zeros_(module.weight[module.padding_idx])

    # Top-level submodules that may be absent from a checkpoint as a whole: a new task head, initialised on loading
    # (e.g. the classifier when `LaserForSequenceClassification` loads an encoder directory). Never partly absent.
    _laser_new_head_modules: tuple[str, ...] = ()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, strict: bool = True, **kwargs):
        r"""
        `PreTrainedModel.from_pretrained`, strict by default: the weights must match the config.

        With `strict=True` (default) loading raises a `ValueError` naming the offending tensors when the checkpoint
        - lacks tensors the config asks for (transformers would initialise them randomly), except a whole new task
          head (`_laser_new_head_modules`: `classifier` of [`LaserForSequenceClassification`], `decoder` of
          [`LaserForPreTraining`]);
        - holds tensors the model does not have (other than those in `_keys_to_ignore_on_load_unexpected`, e.g. the
          decoder of a `LaserForPreTraining` checkpoint loaded as a [`LaserModel`]);
        - holds tensors of another shape than the config gives (unless `ignore_mismatched_sizes=True` is passed:
          those are then re-initialised, as in transformers);
        - stores a weight with a non-floating-point dtype (transformers would cast it silently);
        - holds NaN or infinite values (after the cast to the requested `dtype`);
        - sits next to a `vocab.json` whose `<pad>` / `</s>` / `<unk>` / `<s>` ids or size disagree with the config
          (`pad_token_id`, `eos_token_id`, `unk_token_id`, `bos_token_id`, `vocab_size`).

        `strict=False` is the escape hatch for people who know what they are doing: plain transformers behaviour
        (a load report on the log, missing or mis-shaped tensors newly initialised, no value checks).
        `output_loading_info=True` returns `(model, loading_info)` as in transformers.
        """
        if not strict:
            return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        output_loading_info = kwargs.pop("output_loading_info", False)
        allow_mismatched = bool(kwargs.pop("ignore_mismatched_sizes", False))
        source = "the given state_dict" if kwargs.get("state_dict") is not None else str(pretrained_model_name_or_path)
        # Ask transformers for the report (and not to raise its own generic error on shape mismatches); its
        # multi-line LOAD REPORT table is not logged: the problems are raised below in one message.
        try:
            with _without_load_report():
                model, info = super().from_pretrained(
                    pretrained_model_name_or_path, *model_args, output_loading_info=True,
                    ignore_mismatched_sizes=True, **kwargs,
                )
        except Exception as err:
            if type(err).__name__ != "SafetensorError":  # safetensors' own error type (no OSError / ValueError)
                raise
            detail = " ".join(str(err).split()) or type(err).__name__
            raise OSError(f"{source}: its weights file (model.safetensors) is damaged: truncated, empty or not a "
                          f"safetensors file ({detail}); download or convert the model again") from err
        problems = model._laser_key_problems(info, allow_mismatched)
        problems += _laser_dtype_problems(pretrained_model_name_or_path, kwargs)
        problems += model._laser_value_problems()
        problems += model._laser_vocab_problems(pretrained_model_name_or_path, kwargs.get("subfolder", ""))
        if problems:
            raise ValueError(
                f"{source}: the weights do not match this {cls.__name__}'s config: " + "; ".join(problems)
                + ". Fix the directory (config.json / weights), or pass strict=False to load it anyway "
                "(missing or mis-shaped tensors are then newly initialised, unexpected ones dropped)."
            )
        return (model, info) if output_loading_info else model

    def save_pretrained(self, save_directory, *args, is_main_process: bool = True, push_to_hub: bool = False,
                        **kwargs):
        r"""
        `PreTrainedModel.save_pretrained`, plus the files that make the directory work without hf_laser
        (`integration_files.py`): the full `auto_map` and, for a [`LaserModel`], the `feature-extraction` pipeline
        that takes `lang=` and (once the tokenizer is saved too) the sentence-transformers configuration.
        """
        if push_to_hub:
            # transformers uploads from inside save_pretrained, before the files below exist: save, then push
            # (`push_to_hub` saves again, into a temporary directory, and uploads all of it)
            hub_kwargs = {k: kwargs.pop(k) for k in ("commit_message", "commit_description", "private", "revision",
                                                     "create_pr", "tags") if k in kwargs}
            repo_id = kwargs.pop("repo_id", os.path.basename(os.path.normpath(save_directory)))
            self.save_pretrained(save_directory, *args, is_main_process=is_main_process, **kwargs)
            if is_main_process:
                self.push_to_hub(repo_id, token=kwargs.get("token"), **hub_kwargs)
            return
        super().save_pretrained(save_directory, *args, is_main_process=is_main_process, **kwargs)
        if is_main_process:
            write_integration_files(save_directory)

    def _laser_key_problems(self, info: dict, allow_mismatched: bool) -> list[str]:
        problems = []
        missing = set(info.get("missing_keys") or ())
        params = [name for name, _ in self.named_parameters()]
        for head in self._laser_new_head_modules:
            head_params = {n for n in params if n.startswith(head + ".")}
            if head_params and head_params <= missing:
                missing -= head_params  # a new head, initialised: the legitimate case
        if missing:
            problems.append(f"missing tensors {_laser_names(missing)}")
        unexpected = set(info.get("unexpected_keys") or ())
        if unexpected:
            problems.append(f"unexpected tensors {_laser_names(unexpected)}")
        mismatched = info.get("mismatched_keys") or ()
        if mismatched and not allow_mismatched:
            shapes = sorted((k, tuple(a), tuple(b)) for k, a, b in mismatched)
            shown = ", ".join(f"{k} {a} in the checkpoint vs {b} from the config" for k, a, b in shapes[:6])
            more = f" and {len(shapes) - 6} more" if len(shapes) > 6 else ""
            problems.append(f"mis-shaped tensors: {shown}{more}")
        for msg in info.get("error_msgs") or ():
            problems.append(str(msg).splitlines()[0])
        return problems

    def _laser_value_problems(self) -> list[str]:
        bad = []
        for name, tensor in self.state_dict().items():
            if tensor.is_floating_point() and tensor.device.type != "meta" and not bool(torch.isfinite(tensor).all()):
                bad.append(name)
        if not bad:
            return []
        return [f"NaN or infinite values in {_laser_names(bad)} (a corrupted checkpoint, or a dtype too narrow for "
                "the weights)"]

    def _laser_vocab_problems(self, path, subfolder: str = "") -> list[str]:
        return vocab_problems(self.config, path, subfolder)

def _laser_names(names, limit: int = 8) -> str:
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


_SAFETENSORS_FLOAT = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2"}


def _laser_weight_files(path, kwargs: dict) -> list[str]:
    """The weight files `from_pretrained` read (local directory, or the Hub cache it just filled); [] if unknown."""
    if path is None or kwargs.get("gguf_file"):
        return []
    subfolder = kwargs.get("subfolder", "") or ""
    path = str(path)
    if os.path.isfile(path):
        return [path]
    variant = kwargs.get("variant")

    def name(base, ext):
        return f"{base}.{variant}.{ext}" if variant else f"{base}.{ext}"

    candidates = [name("model", "safetensors"), name("model", "safetensors") + ".index.json",
                  name("pytorch_model", "bin"), name("pytorch_model", "bin") + ".index.json"]

    def locate(filename):
        if os.path.isdir(path):
            full = os.path.join(path, subfolder, filename)
            return full if os.path.isfile(full) else None
        try:
            return cached_file(path, filename, subfolder=subfolder, cache_dir=kwargs.get("cache_dir"),
                               revision=kwargs.get("revision"), token=kwargs.get("token"), local_files_only=True,
                               _raise_exceptions_for_missing_entries=False,
                               _raise_exceptions_for_connection_errors=False)
        except Exception:  # noqa: BLE001 - best effort: the check is skipped when the file cannot be found
            return None

    for filename in candidates:
        found = locate(filename)
        if found is None:
            continue
        if not found.endswith(".index.json"):
            return [found]
        with open(found, encoding="utf-8") as f:
            shards = sorted(set(json.load(f).get("weight_map", {}).values()))
        located = [locate(shard) for shard in shards]
        return [s for s in located if s is not None]
    return []


def _laser_dtype_problems(path, kwargs: dict) -> list[str]:
    """Weights stored with a non-floating-point dtype (transformers casts them to the model dtype silently)."""
    bad = []
    state_dict = kwargs.get("state_dict")
    if state_dict is not None:
        bad = [f"{k} ({v.dtype})" for k, v in state_dict.items() if torch.is_tensor(v) and not v.is_floating_point()]
    else:
        for file in _laser_weight_files(path, kwargs):
            try:
                if file.endswith(".safetensors"):
                    with open(file, "rb") as f:
                        (size,) = struct.unpack("<Q", f.read(8))
                        header = json.loads(f.read(size))
                    bad += [f"{k} ({v.get('dtype')})" for k, v in header.items()
                            if k != "__metadata__" and v.get("dtype") not in _SAFETENSORS_FLOAT]
                elif file.endswith(".bin"):
                    state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
                    bad += [f"{k} ({v.dtype})" for k, v in state.items()
                            if torch.is_tensor(v) and not v.is_floating_point()]
            except Exception:  # noqa: BLE001 - transformers has read the file already; nothing more to say here
                continue
    if not bad:
        return []
    return [f"non-floating-point weights {_laser_names(bad)}"]


class LaserModel(BiLSTMEncoderMixin, TransformerEncoderMixin, LaserPreTrainedModel):
    r"""
    The LASER encoder: token embeddings → multi-layer (Bi)LSTM from zero states → max-pool over time; or, with
    `config.encoder_type == "transformer"`, a LASER3 transformer student (fairseq's `TransformerEncoder`, see
    `transformer.py`) → max-pool or `<s>`.

    `pooler_output` is the LASER sentence embedding. Padding can be on either side and the batch need not be sorted:
    sequences are packed by their true lengths (from `attention_mask`), exactly like the original
    `SentenceEncoder`, so the embeddings do not depend on the batch composition.

    On a CUDA device an fp32 model runs its LSTM in IEEE fp32, although PyTorch lets cuDNN use TF32 for RNNs by
    default (see [`ieee_fp32_lstm`]); set `model.allow_tf32 = True` to trade that exactness (~1e-3) for speed.
    """

    # A LaserForPreTraining checkpoint also holds the decoder; loading the encoder alone ignores it.
    _keys_to_ignore_on_load_unexpected = [r"^decoder\."]

    def __init__(self, config: LaserConfig):
        super().__init__(config)
        if config.encoder_type == "transformer":
            self.build_transformer_encoder(config)
        else:
            self.build_encoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                LASER dictionary ids, each sentence ending with `</s>` (id 2), padded with `<pad>` (id 1) on any side.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding. When omitted, positions holding `<pad>` are padding.

        Returns:
            [`~modeling_outputs.BaseModelOutputWithPooling`] with `last_hidden_state` of shape
            `(batch_size, sequence_length, 2 * hidden_size)`, the top-layer BiLSTM outputs at the input positions
            (padded positions hold `config.padding_value`; for a transformer `(batch_size, sequence_length (+ 1 with
            prepend_bos, <s> first), embed_dim)`, the last layer's outputs), and `pooler_output` of shape
            `(batch_size, config.embedding_dim)`, the sentence embeddings (max over time, or the output at `<s>`
            for a transformer with `pooling="cls"`).
        """
        if self.config.encoder_type == "transformer":
            out, pooled = self.encode_transformer_tokens(input_ids, attention_mask)
            return BaseModelOutputWithPooling(last_hidden_state=out, pooler_output=pooled)
        out, pooled = self.encode_tokens(input_ids, attention_mask)
        return BaseModelOutputWithPooling(last_hidden_state=out, pooler_output=pooled)


class LaserClassificationHead(nn.Module):
    r"""
    The MLP that LASER's paper trains on sentence embeddings (`source/sent_classif.py` / `source/nli.py` of the
    original): `[dropout] → (Linear → tanh → dropout) × len(hidden) → Linear`, on the features of one sentence or of a
    sentence pair.

    It is a plain `nn.Module` built from a [`LaserConfig`], so it can be trained alone on pre-computed embeddings
    (embed once, train many heads) and then loaded into [`LaserForSequenceClassification`]`.classifier`.

    Config fields used: `embedding_dim`, `num_labels`, `classifier_mode` (`"single"`: features = `x`; `"pair"`:
    features = `[p, h, p * h, |p - h|]`, 4 × `embedding_dim`), `classifier_hidden_sizes`, `classifier_dropout`, and
    two optional attributes (stored in `config.json` when set): `classifier_activation` (`"tanh"` default, or
    `"relu"`) and `classifier_normalize` (L2-normalise the sentence embeddings first; default: `True` in pair mode,
    as LASER's XNLI classifier, `False` in single mode, as its MLDoc classifier).
    """

    def __init__(self, config: LaserConfig):
        super().__init__()
        self.mode = config.classifier_mode
        if self.mode not in ("single", "pair"):
            raise ValueError(f"classifier_mode must be 'single' or 'pair', got {self.mode!r}")
        normalize = getattr(config, "classifier_normalize", None)
        self.normalize = (self.mode == "pair") if normalize is None else bool(normalize)
        activation = getattr(config, "classifier_activation", "tanh")
        activations = {"tanh": nn.Tanh, "relu": nn.ReLU}
        if activation not in activations:
            raise ValueError(f"classifier_activation must be one of {sorted(activations)}, got {activation!r}")
        if config.num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {config.num_labels}")
        self.embedding_dim = config.embedding_dim
        in_dim = self.embedding_dim * (4 if self.mode == "pair" else 1)
        dropout = config.classifier_dropout or 0.0
        layers: list[nn.Module] = []
        hidden = [int(h) for h in config.classifier_hidden_sizes if int(h) > 0]
        if hidden and dropout > 0:
            layers.append(nn.Dropout(dropout))
        prev = in_dim
        for size in hidden:
            layers += [nn.Linear(prev, size), activations[activation]()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            prev = size
        layers.append(nn.Linear(prev, config.num_labels))
        for layer in layers:
            if isinstance(layer, nn.Linear):
                # Marks the layers initialised like PyTorch's default nn.Linear (as the original classifier was),
                # not with the encoder's U(-init_range, init_range).
                layer._laser_head_linear = True
        self.mlp = nn.Sequential(*layers)

    def features(self, embeddings: torch.Tensor, pair_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """Classifier input: `(batch, dim)` in single mode, `(batch, 4 * dim)` = `[p, h, p*h, |p-h|]` in pair mode."""
        if embeddings.dim() != 2 or embeddings.shape[-1] != self.embedding_dim:
            raise ValueError(
                f"sentence embeddings must have shape (batch, {self.embedding_dim}), got {tuple(embeddings.shape)}"
            )
        embeddings = embeddings.to(self.mlp[-1].weight.dtype)
        if self.normalize:
            embeddings = nn.functional.normalize(embeddings, dim=-1)
        if self.mode == "single":
            if pair_embeddings is not None:
                raise ValueError("classifier_mode is 'single' but a second sentence was given")
            return embeddings
        if pair_embeddings is None:
            raise ValueError("classifier_mode is 'pair': the second sentence (pair_*) is required")
        if pair_embeddings.shape != embeddings.shape:
            raise ValueError(
                f"pair embeddings shape {tuple(pair_embeddings.shape)} != first sentence {tuple(embeddings.shape)}"
            )
        pair_embeddings = pair_embeddings.to(embeddings.dtype)
        if self.normalize:
            pair_embeddings = nn.functional.normalize(pair_embeddings, dim=-1)
        p, h = embeddings, pair_embeddings
        return torch.cat([p, h, p * h, (p - h).abs()], dim=-1)

    def forward(self, embeddings: torch.Tensor, pair_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """`(batch, dim)` sentence embeddings (+ `(batch, dim)` second sentences) → `(batch, num_labels)` logits."""
        return self.mlp(self.features(embeddings, pair_embeddings))


def classification_loss(config, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The transformers convention: MSE for `num_labels == 1`, cross-entropy for integer labels, BCE for float
    multi-hot labels (`config.problem_type` is set from the first batch when unset)."""
    num_labels = config.num_labels
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return nn.functional.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(-1))
    if config.problem_type == "single_label_classification":
        labels = labels.view(-1).long()
        valid = labels != -100
        if bool(((labels[valid] < 0) | (labels[valid] >= num_labels)).any()):
            bad = sorted(set(labels[valid & ((labels < 0) | (labels >= num_labels))].tolist()))
            raise ValueError(f"labels {bad} outside the label set [0, {num_labels})")
        return nn.functional.cross_entropy(logits.view(-1, num_labels).float(), labels)
    return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.to(torch.float32))


class LaserClassificationCollator:
    r"""
    `data_collator` for `transformers.Trainer` (or a `DataLoader`) with [`LaserForSequenceClassification`]: pads
    the variable-length id lists `input_ids` and `pair_input_ids` of a batch with `<pad>` and builds
    `attention_mask` / `pair_attention_mask`; stacks `sentence_embeddings`, `pair_embeddings` and `labels`
    (`label` is renamed `labels`). Other keys are dropped.

    Args:
        pad_token_id (`int`, *optional*, defaults to 1): id of `<pad>` (`config.pad_token_id`).
        left_pad (`bool`, *optional*, defaults to `False`): pad on the left (the model accepts either side).
    """

    def __init__(self, pad_token_id: int = 1, left_pad: bool = False):
        self.pad_token_id = pad_token_id
        self.left_pad = left_pad

    def _pad(self, seqs):
        longest = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), longest), dtype=torch.long)
        for i, s in enumerate(seqs):
            if len(s) == 0:
                raise ValueError(f"example {i} has no token; every LASER sentence ends with </s>")
            span = slice(longest - len(s), longest) if self.left_pad else slice(0, len(s))
            ids[i, span] = torch.as_tensor(s, dtype=torch.long)
            mask[i, span] = 1
        return ids, mask

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = {}
        for key, mask_key in (("input_ids", "attention_mask"), ("pair_input_ids", "pair_attention_mask")):
            if key in features[0]:
                batch[key], batch[mask_key] = self._pad([f[key] for f in features])
        for key in ("sentence_embeddings", "pair_embeddings"):
            if key in features[0]:
                batch[key] = torch.stack([torch.as_tensor(f[key], dtype=torch.float32) for f in features])
        label_key = "labels" if "labels" in features[0] else "label" if "label" in features[0] else None
        if label_key is not None:
            batch["labels"] = torch.as_tensor([f[label_key] for f in features])
        return batch


class LaserForSequenceClassification(LaserPreTrainedModel):
    r"""
    LASER encoder + [`LaserClassificationHead`]: the zero-shot cross-lingual classifier of Artetxe & Schwenk (2019).
    The encoder is frozen by default (`config.freeze_encoder`): it stays in eval mode and gets no gradients, so a head
    trained on English embeddings applies unchanged to every language the encoder knows.

    Paper settings: XNLI — `classifier_mode="pair"`, `classifier_hidden_sizes=[512, 384]`, `num_labels=3`, Adam
    (lr 1e-3; dropout 0.3, batch 128 in LASER's script); MLDoc — `classifier_mode="single"`,
    `classifier_hidden_sizes=[10]`, `num_labels=4`, Adam.

    Inputs (any of, per sentence):
    - token ids: `input_ids` / `attention_mask` (first sentence) and, in pair mode, `pair_input_ids` /
      `pair_attention_mask` (second sentence, e.g. the hypothesis). The two may have different lengths and padding.
    - pre-computed sentence embeddings (fast path, no encoder run): `sentence_embeddings` and, in pair mode,
      `pair_embeddings`, each `(batch, embedding_dim)`, e.g. from `LaserEncoder.encode`.

    Example:

    ```python
    >>> from hf_laser import LaserConfig
    >>> from hf_laser.modeling.modeling_laser import LaserForSequenceClassification
    >>> config = LaserConfig(vocab_size=100, embed_dim=8, hidden_size=8, num_layers=1, num_labels=3,
    ...                      classifier_mode="pair")
    >>> model = LaserForSequenceClassification(config)
    >>> emb = torch.randn(2, 16)
    >>> model(sentence_embeddings=emb, pair_embeddings=emb, labels=torch.tensor([0, 2])).logits.shape
    torch.Size([2, 3])
    ```
    """

    def __init__(self, config: LaserConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.laser = LaserModel(config)
        self.classifier = LaserClassificationHead(config)
        self.post_init()
        self.set_encoder_frozen(config.freeze_encoder)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        if getattr(module, "_laser_head_linear", False):
            # PyTorch's nn.Linear default, which LASER's classifier used.
            init.kaiming_uniform_(module.weight, a=5 ** 0.5)
            if module.bias is not None:
                bound = 1.0 / module.in_features ** 0.5
                init.uniform_(module.bias, -bound, bound)
            return
        super()._init_weights(module)

    # Loading an encoder directory (LaserModel / LaserForPreTraining) gives a new, initialised classifier.
    _laser_new_head_modules = ("classifier",)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        # Loading swaps in new parameter objects: apply `freeze_encoder` again.
        model.set_encoder_frozen(model.config.freeze_encoder)
        return loaded

    def set_encoder_frozen(self, frozen: bool = True) -> None:
        """Freezes (no gradients, always eval mode: no dropout) or unfreezes the encoder; updates the config."""
        self.config.freeze_encoder = bool(frozen)
        self.laser.requires_grad_(not frozen)
        self.laser.train(self.training and not frozen)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.config.freeze_encoder:
            self.laser.eval()
        return self

    def get_input_embeddings(self) -> nn.Embedding:
        return self.laser.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        self.laser.set_input_embeddings(value)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Sentence embeddings `(batch, embedding_dim)` of token ids (no gradient when the encoder is frozen)."""
        if self.config.freeze_encoder:
            with torch.no_grad():
                return self.laser(input_ids, attention_mask=attention_mask).pooler_output
        return self.laser(input_ids, attention_mask=attention_mask).pooler_output

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pair_input_ids: torch.Tensor | None = None,
        pair_attention_mask: torch.Tensor | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        pair_embeddings: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Token ids of the (first) sentence, as for [`LaserModel`]. Exclusive with `sentence_embeddings`.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens of `input_ids`, 0 for padding.
            pair_input_ids (`torch.LongTensor` of shape `(batch_size, pair_sequence_length)`, *optional*):
                Pair mode: token ids of the second sentence (hypothesis). Exclusive with `pair_embeddings`.
            pair_attention_mask (`torch.Tensor` of shape `(batch_size, pair_sequence_length)`, *optional*):
                Mask of `pair_input_ids`.
            sentence_embeddings (`torch.FloatTensor` of shape `(batch_size, embedding_dim)`, *optional*):
                Pre-computed LASER embeddings of the (first) sentences: the encoder is skipped.
            pair_embeddings (`torch.FloatTensor` of shape `(batch_size, embedding_dim)`, *optional*):
                Pair mode: pre-computed embeddings of the second sentences.
            labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                Class indices in `[0, num_labels)` (-100 = ignored) → cross-entropy loss. With `num_labels == 1`, float
                targets and an MSE loss; float multi-hot `(batch_size, num_labels)` targets → BCE.

        Returns:
            [`~modeling_outputs.SequenceClassifierOutput`] with `loss` (when `labels` is given) and `logits`
            `(batch_size, num_labels)`.
        """
        def sentence(ids, mask, emb, name):
            if emb is not None and ids is not None:
                raise ValueError(f"give either {name} token ids or {name} embeddings, not both")
            if emb is not None:
                return emb
            if ids is not None:
                return self.embed(ids, mask)
            return None

        first = sentence(input_ids, attention_mask, sentence_embeddings, "first-sentence")
        if first is None:
            raise ValueError("input_ids or sentence_embeddings is required")
        second = sentence(pair_input_ids, pair_attention_mask, pair_embeddings, "pair")
        if second is not None and second.shape[0] != first.shape[0]:
            raise ValueError(f"batch sizes differ: {first.shape[0]} first sentences, {second.shape[0]} pair sentences")
        logits = self.classifier(first, second)
        loss = None
        if labels is not None:
            labels = labels.to(logits.device)
            if labels.shape[0] != logits.shape[0]:
                raise ValueError(f"got {labels.shape[0]} labels for a batch of {logits.shape[0]}")
            loss = classification_loss(self.config, logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)




@dataclass
class LaserForPreTrainingOutput(ModelOutput):
    r"""
    Output of [`LaserForPreTraining`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `labels` are given):
            Token-level cross-entropy of the decoder (mean over the non-ignored target tokens, label smoothing
            applied when `config.label_smoothing > 0`).
        logits (`torch.FloatTensor` of shape `(batch_size, target_length, vocab_size)`):
            Scores of the decoder's output projection for every target position.
        sentence_embedding (`torch.FloatTensor` of shape `(batch_size, 2 * hidden_size)`):
            The encoder's sentence embeddings (`LaserModel`'s `pooler_output`), the only input of the decoder.
        encoder_last_hidden_state (`torch.FloatTensor` of shape `(batch_size, source_length, 2 * hidden_size)`):
            Top-layer BiLSTM outputs of the encoder.
        paired_sentence_embedding (`torch.FloatTensor` of shape `(batch_size, 2 * hidden_size)`, *optional*):
            Sentence embeddings of `paired_input_ids` (the other side of each pair) by the same encoder, for the
            translation-ranking objective.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    sentence_embedding: torch.FloatTensor | None = None
    encoder_last_hidden_state: torch.FloatTensor | None = None
    paired_sentence_embedding: torch.FloatTensor | None = None


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher-forcing decoder inputs from `labels` `(batch, tgt_len)`: `[start] + labels[:-1]`, `-100` → `<pad>`.

    LASER (fairseq) starts decoding with `</s>`, so `decoder_start_token_id` is the eos id.
    """
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class LaserDecoder(nn.Module):
    r"""
    The auxiliary decoder of the LASER paper, used for training only: an LSTM whose initial hidden and cell states
    are a linear projection of the sentence embedding, and whose input at every step is
    `[embedding of the previous target token; sentence embedding; target-language embedding]`. There is no attention:
    the sentence embedding is the only path from the encoder to the decoder.
    """

    def __init__(self, config: LaserConfig):
        super().__init__()
        if not config.target_languages:
            raise ValueError("config.target_languages is empty: the decoder needs at least one target language")
        self.hidden_size = config.decoder_hidden_size
        self.num_layers = config.decoder_num_layers
        self.embed_tokens = nn.Embedding(config.vocab_size, config.decoder_embed_dim, padding_idx=config.pad_token_id)
        self.embed_langs = nn.Embedding(len(config.target_languages), config.lang_embed_dim)
        self.init_state = nn.Linear(config.embedding_dim, 2 * self.num_layers * self.hidden_size)
        self.lstm = nn.LSTM(
            input_size=config.decoder_embed_dim + config.embedding_dim + config.lang_embed_dim,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            dropout=config.dropout if self.num_layers > 1 else 0.0,
            batch_first=True,
        )
        self.output_projection = nn.Linear(self.hidden_size, config.vocab_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, decoder_input_ids: torch.Tensor, sentence_embedding: torch.Tensor,
                target_lang_ids: torch.Tensor) -> torch.Tensor:
        r"""
        Args:
            decoder_input_ids (`torch.LongTensor` of shape `(batch_size, target_length)`):
                Previous target tokens (teacher forcing), right-padded with `<pad>`.
            sentence_embedding (`torch.FloatTensor` of shape `(batch_size, embedding_dim)`):
                The encoder's sentence embeddings.
            target_lang_ids (`torch.LongTensor` of shape `(batch_size,)`):
                Index of each target language in `config.target_languages`.

        Returns:
            `torch.FloatTensor` of shape `(batch_size, target_length, vocab_size)`: the logits.
        """
        batch_size, target_length = decoder_input_ids.shape
        tokens = self.dropout(self.embed_tokens(decoder_input_ids))
        context = torch.cat([sentence_embedding.to(tokens.dtype), self.embed_langs(target_lang_ids)], dim=-1)
        x = torch.cat([tokens, context.unsqueeze(1).expand(-1, target_length, -1)], dim=-1)
        # (batch, 2 * layers * hidden) -> h0, c0 of shape (layers, batch, hidden)
        state = self.init_state(sentence_embedding).to(x.dtype)
        state = state.view(batch_size, 2, self.num_layers, self.hidden_size).permute(1, 2, 0, 3)
        # Right padding only follows the real tokens, so the unpacked LSTM gives the same outputs for them.
        with cpu_autocast_lstm(x):
            out, _ = self.lstm(x, (state[0].contiguous(), state[1].contiguous()))
        return self.output_projection(self.dropout(out))


class LaserForPreTraining(LaserPreTrainedModel):
    r"""
    LASER as trained in the paper: the [`LaserModel`] encoder (attribute `laser`) and the auxiliary
    [`LaserDecoder`], which translates each sentence embedding into a target language (English and Spanish in the
    paper). Only the encoder is kept after training: [`~LaserForPreTraining.save_encoder`] writes it as a
    `LaserModel` directory that loads with `AutoModel`, and `LaserModel.from_pretrained` also loads the encoder out of
    a saved `LaserForPreTraining` directory.

    The loss is the token-level cross-entropy of the decoder, ignoring positions where `labels` is `-100` or `<pad>`,
    with label smoothing `config.label_smoothing` (0 unless set, as in the paper).

    Example:

    ```python
    >>> import torch
    >>> from hf_laser import LaserConfig, LaserForPreTraining
    >>> config = LaserConfig(vocab_size=100, embed_dim=16, hidden_size=32, num_layers=1, decoder_embed_dim=16,
    ...                      decoder_hidden_size=64, target_languages=["en", "es"])
    >>> model = LaserForPreTraining(config)
    >>> src = torch.tensor([[5, 6, 7, 2]])          # source ids, </s> appended
    >>> tgt = torch.tensor([[8, 9, 2]])             # target ids, </s> appended
    >>> out = model(input_ids=src, labels=tgt, target_lang_ids=torch.tensor([0]))
    >>> out.logits.shape, out.sentence_embedding.shape
    (torch.Size([1, 3, 100]), torch.Size([1, 64]))
    ```
    """

    # Loading an encoder directory gives a new, initialised decoder (to go on training from a trained encoder).
    _laser_new_head_modules = ("decoder",)

    def __init__(self, config: LaserConfig):
        super().__init__(config)
        self.laser = LaserModel(config)
        # `decoder_num_layers=0`: encoder only, for objectives that do not decode (translation ranking)
        self.decoder = LaserDecoder(config) if config.decoder_num_layers > 0 else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.laser.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.laser.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear | None:
        return None if self.decoder is None else self.decoder.output_projection

    def set_output_embeddings(self, value: nn.Linear):
        self.decoder.output_projection = value

    def get_encoder(self) -> LaserModel:
        return self.laser

    def save_encoder(self, save_directory, **kwargs):
        """Saves the encoder alone as a [`LaserModel`] directory (config, weights, modeling code for remote loading).

        The directory loads with `AutoModel.from_pretrained` (or `trust_remote_code=True` without `hf_laser`).
        `kwargs` go to `save_pretrained` (e.g. `safe_serialization`, `push_to_hub`).
        """
        architectures = self.config.architectures
        try:
            self.laser.save_pretrained(save_directory, **kwargs)
        finally:
            self.config.architectures = architectures  # the encoder shares this model's config object
        return save_directory

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        target_lang_ids: torch.Tensor | None = None,
        paired_input_ids: torch.Tensor | None = None,
        paired_attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> LaserForPreTrainingOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, source_length)`):
                Source sentences (LASER dictionary ids ending with `</s>`), padded with `<pad>` on any side.
            attention_mask (`torch.Tensor` of shape `(batch_size, source_length)`, *optional*):
                1 for real source tokens, 0 for padding.
            labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
                Target sentences (ids ending with `</s>`), right-padded with `-100` (or `<pad>`). Gives `loss`, and
                `decoder_input_ids` when those are omitted (`</s>` + labels shifted right).
            decoder_input_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
                Teacher-forcing decoder inputs; required when `labels` is not given.
            target_lang_ids (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                Index of each sentence's target language in `config.target_languages`; may be omitted when there is
                only one target language.
            paired_input_ids (`torch.LongTensor` of shape `(batch_size, paired_length)`, *optional*):
                The other side of each pair (e.g. the target sentences as encoder input), padded with `<pad>`; gives
                `paired_sentence_embedding`. Both sides go through the encoder in one call.
            paired_attention_mask (`torch.Tensor` of shape `(batch_size, paired_length)`, *optional*):
                1 for real tokens of `paired_input_ids`, 0 for padding.

        Without `labels` and `decoder_input_ids` the decoder does not run (`logits` and `loss` are `None`); a model
        built with `config.decoder_num_layers=0` has no decoder at all.

        Returns:
            [`LaserForPreTrainingOutput`].
        """
        paired_sentence_embedding = None
        if paired_input_ids is None:
            encoder_outputs = self.laser(input_ids, attention_mask=attention_mask, return_dict=True)
            sentence_embedding = encoder_outputs.pooler_output
            encoder_last_hidden_state = encoder_outputs.last_hidden_state
        else:
            # one encoder call over both sides (one LSTM launch instead of two); padding becomes right padding
            pad = self.config.pad_token_id
            mask_a = input_ids.ne(pad) if attention_mask is None else attention_mask.bool()
            mask_b = paired_input_ids.ne(pad) if paired_attention_mask is None else paired_attention_mask.bool()
            length = max(input_ids.shape[1], paired_input_ids.shape[1])
            ids = torch.cat([nn.functional.pad(input_ids.masked_fill(~mask_a, pad), (0, length - input_ids.shape[1]),
                                               value=pad),
                             nn.functional.pad(paired_input_ids.masked_fill(~mask_b, pad),
                                               (0, length - paired_input_ids.shape[1]), value=pad)])
            mask = torch.cat([nn.functional.pad(mask_a, (0, length - mask_a.shape[1])),
                              nn.functional.pad(mask_b, (0, length - mask_b.shape[1]))])
            encoder_outputs = self.laser(ids, attention_mask=mask, return_dict=True)
            batch_size = input_ids.shape[0]
            sentence_embedding, paired_sentence_embedding = encoder_outputs.pooler_output.split(
                [batch_size, paired_input_ids.shape[0]])
            encoder_last_hidden_state = encoder_outputs.last_hidden_state[:batch_size, :input_ids.shape[1]]
        if labels is None and decoder_input_ids is None and (paired_input_ids is not None or self.decoder is None):
            # the sentence embeddings alone (ranking: both sides; distillation: the student's side)
            return LaserForPreTrainingOutput(sentence_embedding=sentence_embedding,
                                             encoder_last_hidden_state=encoder_last_hidden_state,
                                             paired_sentence_embedding=paired_sentence_embedding)
        if self.decoder is None:
            raise ValueError("this model has no decoder (config.decoder_num_layers=0): call it without labels / "
                             "decoder_input_ids (for the sentence embeddings, and paired_input_ids for the other side)")
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("give labels (target ids) or decoder_input_ids")
            decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.eos_token_id)
        if target_lang_ids is None:
            if len(self.config.target_languages) != 1:
                raise ValueError(
                    f"target_lang_ids is required with several target languages ({self.config.target_languages})"
                )
            target_lang_ids = decoder_input_ids.new_zeros(decoder_input_ids.shape[0])
        if target_lang_ids.shape != (decoder_input_ids.shape[0],):
            raise ValueError(
                f"target_lang_ids must have shape (batch_size,) = ({decoder_input_ids.shape[0]},), "
                f"got {tuple(target_lang_ids.shape)}"
            )
        logits = self.decoder(decoder_input_ids, sentence_embedding, target_lang_ids)

        loss = None
        if labels is not None:
            if labels.shape != decoder_input_ids.shape:
                raise ValueError(
                    f"labels shape {tuple(labels.shape)} != decoder_input_ids shape {tuple(decoder_input_ids.shape)}"
                )
            targets = labels.masked_fill(labels == self.config.pad_token_id, -100)
            loss = nn.functional.cross_entropy(
                logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100,
                label_smoothing=float(getattr(self.config, "label_smoothing", 0.0) or 0.0),
            )
        return LaserForPreTrainingOutput(
            loss=loss, logits=logits, sentence_embedding=sentence_embedding,
            encoder_last_hidden_state=encoder_last_hidden_state, paired_sentence_embedding=paired_sentence_embedding,
        )


__all__ = [
    "LaserPreTrainedModel",
    "LaserModel",
    "LaserClassificationHead",
    "LaserClassificationCollator",
    "LaserForSequenceClassification",
    "LaserDecoder",
    "LaserForPreTraining",
    "LaserForPreTrainingOutput",
]
