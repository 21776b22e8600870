"""Beam search of SONAR's decoder: what `sonar.inference_pipelines.text.EmbeddingToTextModelPipeline.predict` runs,
fairseq2 0.8's `BeamSearchSeq2SeqGenerator` with `StandardBeamSearchAlgorithm`, step for step, so that the same
weights give the same hypotheses, scores and texts (tests/test_sonar_decoder.py, against the original's output).

What fairseq2 does, and so this:
- the prompt is the target-language prefix `</s> __lang__`; its first id is fed, and the second's log-probability
  starts each hypothesis's score (the prompt is "prefilled");
- each step takes log-softmax in float32 (logits divided by `temperature` first); at the last possible step only
  `</s>` is allowed; otherwise `<unk>` loses `unk_penalty`, `<pad>` is never allowed, and `</s>` not before
  `min_gen_len` ids;
- per input, the best 2 x `beam_size` continuations over the whole beam (cumulative scores, `torch.topk` over the
  flattened (hypotheses x vocabulary) table); those among the first `beam_size` that are `</s>` end a hypothesis
  (its score divided by (its length - 1) ** `len_penalty` when `normalize_scores`, the length counting the prompt);
  an input is done once it has `beam_size` ended hypotheses; the first `beam_size` continuations that are not
  `</s>` carry on;
- the longest sequence, prompt included, is min(`max_seq_len`, prompt + int(a x S + b)) with (a, b) =
  `max_gen_len` and S the *sentence embedding's dimension* (fairseq2 reads a (batch, d) batch of embeddings as
  sequences of length d: with SONAR's defaults, 1,024 x 1 + 128, so the decoder's 512 positions bound it).
- the hypotheses of an input come back best first (a stable sort: equal scores keep the order they ended in); each
  holds the ids after the prompt, `</s>` included, its score and its per-step scores (the first of which is the
  cumulative score up to there, prompt included, as fairseq2 computes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .modeling_sonar_decoder import SonarDecoderModel, new_decoder_cache

__all__ = ["GenerationOptions", "Hypothesis", "beam_search"]


@dataclass(frozen=True)
class GenerationOptions:
    """fairseq2's `BeamSearchSeq2SeqGenerator` options, with its defaults (those SONAR's pipeline uses)."""

    beam_size: int = 5
    min_gen_len: int = 1
    max_gen_len: tuple[float, int] = (1.0, 128)
    max_seq_len: int | None = None  # None: the decoder's positions
    normalize_scores: bool = True
    temperature: float = 1.0
    unk_penalty: float = 0.0
    len_penalty: float = 1.0

    def __post_init__(self):
        if isinstance(self.beam_size, bool) or not isinstance(self.beam_size, int) or self.beam_size < 1:
            raise ValueError(f"beam_size must be an integer >= 1, got {self.beam_size!r}")
        if isinstance(self.min_gen_len, bool) or not isinstance(self.min_gen_len, int) or self.min_gen_len < 1:
            raise ValueError(f"min_gen_len must be an integer >= 1, got {self.min_gen_len!r}")
        if (not isinstance(self.max_gen_len, (tuple, list)) or len(self.max_gen_len) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.max_gen_len)):
            raise ValueError(f"max_gen_len must be a pair (a, b): a x input length + b, got {self.max_gen_len!r}")
        object.__setattr__(self, "max_gen_len", (float(self.max_gen_len[0]), int(self.max_gen_len[1])))
        if self.max_seq_len is not None and (isinstance(self.max_seq_len, bool)
                                             or not isinstance(self.max_seq_len, int) or self.max_seq_len < 2):
            raise ValueError(f"max_seq_len must be an integer >= 2 or None, got {self.max_seq_len!r}")
        if not isinstance(self.temperature, (int, float)) or not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")


@dataclass
class Hypothesis:
    """One generated sequence: `ids` after the prompt (ending with `</s>`), its `score` and `step_scores`."""

    ids: list[int]
    score: float
    step_scores: list[float] = field(repr=False)


def _limits(options: GenerationOptions, model: SonarDecoderModel, prompt_len: int, source_len: int) -> tuple[int, int]:
    """(shortest, longest) sequence, prompt included, as fairseq2 bounds them."""
    a, b = options.max_gen_len
    max_gen_len = int(a * source_len + b)
    if max_gen_len < 1:
        raise ValueError(f"max_gen_len gives {max_gen_len} ids for inputs of length {source_len}: at least 1 needed")
    if options.min_gen_len > max_gen_len:
        raise ValueError(f"min_gen_len ({options.min_gen_len}) is more than max_gen_len ({max_gen_len})")
    positions = model.config.max_position_embeddings
    max_seq_len = positions if options.max_seq_len is None else min(options.max_seq_len, positions)
    if prompt_len >= max_seq_len:
        raise ValueError(f"the prompt ({prompt_len} ids) must be shorter than max_seq_len ({max_seq_len})")
    return min(max_seq_len, prompt_len + options.min_gen_len), min(max_seq_len, prompt_len + max_gen_len)


@torch.inference_mode()
def beam_search(model: SonarDecoderModel, sentence_embeddings: torch.Tensor, prompt: list[int],
                options: GenerationOptions = GenerationOptions()) -> list[list[Hypothesis]]:
    """The hypotheses of each sentence embedding, best first (module docstring).

    Args:
        model: the decoder (in eval mode).
        sentence_embeddings: `(batch, d_model)`.
        prompt: the target-language prefix (`SonarTextTokenizer.target_prefix(lang)`), at least one id.
        options: the generator's options.
    """
    config = model.config
    eos, pad, unk = config.eos_token_id, config.pad_token_id, config.unk_token_id
    if sentence_embeddings.dim() != 2 or sentence_embeddings.shape[0] == 0:
        raise ValueError(f"sentence_embeddings must be (batch >= 1, d), got shape {tuple(sentence_embeddings.shape)}")
    if not prompt:
        raise ValueError("the prompt needs at least one id")
    device = model.embed_tokens.weight.device
    memory = sentence_embeddings.to(device=device, dtype=model.embed_tokens.weight.dtype)
    num_prompts, prompt_len = memory.shape[0], len(prompt)
    min_seq_len, max_seq_len = _limits(options, model, prompt_len, memory.shape[1])
    beam = options.beam_size

    cache = new_decoder_cache()
    seqs = torch.empty((num_prompts, max_seq_len), dtype=torch.int64, device=device)
    seqs[:, :prompt_len] = torch.tensor(prompt, dtype=torch.int64, device=device)
    step_scores = torch.zeros((num_prompts, max_seq_len), dtype=torch.float32, device=device)
    prompt_indices = torch.arange(num_prompts, device=device)
    beam_sizes = [1] * num_prompts
    output: list[list[Hypothesis]] = [[] for _ in range(num_prompts)]

    def next_lprobs(ids: torch.Tensor) -> torch.Tensor:
        logits = model(ids, memory, past_key_values=cache).logits
        if options.temperature != 1.0:
            logits = logits / options.temperature
        lprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
        if lprobs.isnan().any():
            raise FloatingPointError("the decoder's scores hold NaN (the weights or the embeddings)")
        return lprobs

    if prompt_len > 1:  # the prompt, prefilled: its scores start each hypothesis's
        lprobs = next_lprobs(seqs[:, :prompt_len - 1])
        prompt_scores = torch.gather(lprobs, dim=-1, index=seqs[:, 1:prompt_len].unsqueeze(-1)).squeeze(-1)
        step_scores[:, 1:prompt_len] = prompt_scores.cumsum(dim=-1) + step_scores[:, :1]

    for step in range(prompt_len, max_seq_len):
        lprobs = next_lprobs(seqs[:, step - 1:step]).squeeze(1)
        if step == max_seq_len - 1:  # the last possible step: </s>, whatever its score
            lprobs[:, :eos] = -torch.inf
            lprobs[:, eos + 1:] = -torch.inf
        else:
            if unk is not None:
                lprobs[:, unk] -= options.unk_penalty
            if pad is not None:
                lprobs[:, pad] = -torch.inf
            if step < min_seq_len - 1:
                lprobs[:, eos] = -torch.inf

        kept_rows, kept_ids, kept_scores, new_sizes = [], [], [], []
        offset = 0
        for size, beam_lprobs, beam_scores in zip(beam_sizes, lprobs.split(beam_sizes),
                                                  step_scores.split(beam_sizes)):
            vocab = beam_lprobs.shape[1]
            totals = (beam_lprobs + beam_scores[:, step - 1].unsqueeze(-1)).view(-1)
            top_scores, top_indices = torch.topk(totals, k=min(2 * beam, vocab))
            rows, ids = top_indices // vocab + offset, top_indices % vocab
            offset += size
            is_eos = ids == eos
            done = False
            for row, score in zip(rows[:beam][is_eos[:beam]], top_scores[:beam][is_eos[:beam]]):
                if _finish(output, seqs, step_scores, prompt_indices, int(row), score, step, prompt_len, eos,
                           options, beam):
                    done = True
                    break
            if done:
                continue
            if is_eos[:beam].any():
                keep = ~is_eos
                rows, ids, top_scores = rows[keep], ids[keep], top_scores[keep]
            rows, ids, top_scores = rows[:beam], ids[:beam], top_scores[:beam]
            kept_rows.append(rows)
            kept_ids.append(ids)
            kept_scores.append(top_scores)
            new_sizes.append(len(rows))
        if not new_sizes:
            break
        beam_sizes = new_sizes
        order = torch.cat(kept_rows)
        cache.reorder_cache(order)
        prompt_indices = prompt_indices.index_select(0, order)
        memory = memory.index_select(0, order)
        seqs = seqs.index_select(0, order)
        step_scores = step_scores.index_select(0, order)
        seqs[:, step] = torch.cat(kept_ids)
        step_scores[:, step] = torch.cat(kept_scores)

    for hypotheses in output:
        hypotheses.sort(key=lambda h: h.score, reverse=True)
    return output


def _finish(output, seqs, step_scores, prompt_indices, row: int, score: torch.Tensor, step: int, prompt_len: int,
            eos: int, options: GenerationOptions, beam: int) -> bool:
    """fairseq2's `_finish_sequence`: the hypothesis of `row` ends with `</s>` at `step`; True once its input has
    `beam` hypotheses."""
    seqs[row, step] = eos
    step_scores[row, step] = score
    seq_len = step + 1
    ids = seqs[row, prompt_len:seq_len].tolist()
    scores = step_scores[row, prompt_len:seq_len].clone()
    scores[1:] = scores[1:] - scores[:-1]
    if options.normalize_scores:
        score = score / (seq_len - 1) ** options.len_penalty
    hypotheses = output[int(prompt_indices[row])]
    hypotheses.append(Hypothesis(ids=ids, score=float(score), step_scores=scores.tolist()))
    return len(hypotheses) == beam
