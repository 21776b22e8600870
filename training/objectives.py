"""Training objectives of a LASER encoder: one function per loss, and `training_loss` that combines them.

- `translation` (the paper): the auxiliary LSTM decoder translates each sentence embedding into the target sentence;
  token-level cross-entropy (`LaserForPreTraining`'s loss).
- `ranking`: in-batch translation ranking (dual-encoder, as in LaBSE / Yang et al. 2019): both sides of the batch's
  pairs go through the encoder, cosine similarities are scaled by `1 / temperature`, an additive `margin` is
  subtracted from the true pairs' scores, and the loss is the symmetric cross-entropy of picking the true
  translation among the batch's sentences. The other pairs of the batch are the negatives, so larger batches
  give more of them. No decoder is built for this objective.
- `translation+ranking`: `translation_weight * translation + ranking_weight * ranking`.
- `distillation` (LASER3): the student's embedding of the source sentence against a fixed teacher's embedding of its
  translation, `1 - cosine` (training/distillation.py computes the teacher's side). No decoder.
"""

from __future__ import annotations

import torch
from torch import nn

from hf_laser.modeling.modeling_laser import shift_tokens_right

OBJECTIVES = ("translation", "ranking", "translation+ranking", "distillation")


def uses_decoder(objective: str) -> bool:
    check_objective(objective)
    return objective not in ("ranking", "distillation")


def check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise ValueError(f"training.objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")


def ranking_loss(source: torch.Tensor, target: torch.Tensor, temperature: float = 0.05,
                 margin: float = 0.0) -> torch.Tensor:
    """Symmetric in-batch translation-ranking loss.

    Args:
        source: `(batch, dim)` sentence embeddings of one side of the pairs.
        target: `(batch, dim)` sentence embeddings of the other side; row `i` translates `source[i]`.
        temperature: the cosine similarities are divided by it (0.05: a scale of 20).
        margin: subtracted from the cosine of each true pair before scaling (additive margin softmax).

    Returns:
        `()`: mean of the source→target and target→source cross-entropies over the batch.
    """
    if source.shape != target.shape or source.dim() != 2:
        raise ValueError(f"source and target must both be (batch, dim), got {tuple(source.shape)} and "
                         f"{tuple(target.shape)}")
    scores = nn.functional.normalize(source.float(), dim=-1) @ nn.functional.normalize(target.float(), dim=-1).T
    if margin:
        scores = scores - margin * torch.eye(len(scores), device=scores.device, dtype=scores.dtype)
    scores = scores / temperature
    truth = torch.arange(len(scores), device=scores.device)
    return (nn.functional.cross_entropy(scores, truth) + nn.functional.cross_entropy(scores.T, truth)) / 2


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Cosine distillation loss (Heffernan et al. 2022).

    Args:
        student: `(batch, dim)` the student's embeddings of the source sentences.
        teacher: `(batch, dim)` the teacher's embeddings of their translations (fixed targets).

    Returns:
        `()`: mean over the batch of `1 - cos(student_i, teacher_i)`.
    """
    if student.shape != teacher.shape:
        raise ValueError(f"student embeddings {tuple(student.shape)} and teacher embeddings {tuple(teacher.shape)} "
                         "differ: the student's embedding size (2 x hidden_size for a BiLSTM) must be the teacher's")
    return (1 - nn.functional.cosine_similarity(student.float(), teacher.float(), dim=-1)).mean()


def translation_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Token-level cross-entropy of the decoder.

    Args:
        logits: `(batch, target_length, vocab_size)` decoder scores.
        labels: `(batch, target_length)` target ids, `-100` where there is no token.

    Returns:
        `()`: mean over the target tokens.
    """
    return nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100,
                                       label_smoothing=label_smoothing)


def training_loss(model, batch: dict[str, torch.Tensor], objective: str, *, temperature: float = 0.05,
                  margin: float = 0.0, translation_weight: float = 1.0, ranking_weight: float = 1.0,
                  target_weight: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of one batch of `training.data.PairBatches` for `objective`, and its detached parts.

    `model` is a `LaserForPreTraining` (possibly wrapped by DDP: it is called, never unwrapped, so that gradients
    are synchronised). `batch`: `input_ids`/`attention_mask` `(batch, src_len)`, `labels` `(batch, tgt_len)` padded
    with -100, `target_lang_ids` `(batch,)`; for distillation also `teacher_embedding` `(batch, dim)`.
    `target_weight` > 0 (distillation only) puts the teacher on both sides: the student also embeds each target
    sentence (`labels`, in its own vocabulary) and learns the teacher's embedding of it, a term of that weight.
    """
    check_objective(objective)
    config = getattr(model, "module", model).config
    labels = batch["labels"]
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if objective == "distillation":
        if target_weight:
            target_mask = labels.ne(-100)
            inputs.update(paired_input_ids=labels.masked_fill(~target_mask, config.pad_token_id),
                          paired_attention_mask=target_mask.long())
        out = model(**inputs)
        parts = {"distillation": distillation_loss(out.sentence_embedding, batch["teacher_embedding"])}
        loss = parts["distillation"]
        if target_weight:
            parts["distillation_target"] = distillation_loss(out.paired_sentence_embedding, batch["teacher_embedding"])
            loss = loss + target_weight * parts["distillation_target"]
        return loss, {k: v.detach() for k, v in parts.items()}
    if objective != "ranking":
        inputs.update(decoder_input_ids=shift_tokens_right(labels, config.pad_token_id, config.eos_token_id),
                      target_lang_ids=batch["target_lang_ids"])
    if objective != "translation":
        target_mask = labels.ne(-100)
        inputs.update(paired_input_ids=labels.masked_fill(~target_mask, config.pad_token_id),
                      paired_attention_mask=target_mask.long())
    out = model(**inputs)
    parts = {}
    if objective != "ranking":
        smoothing = float(getattr(config, "label_smoothing", 0.0) or 0.0)
        parts["translation"] = translation_loss(out.logits, labels, smoothing)
    if objective != "translation":
        parts["ranking"] = ranking_loss(out.sentence_embedding, out.paired_sentence_embedding, temperature, margin)
    if objective == "translation+ranking":
        loss = translation_weight * parts["translation"] + ranking_weight * parts["ranking"]
    else:
        loss = parts[objective]
    return loss, {k: v.detach() for k, v in parts.items()}
