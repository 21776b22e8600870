"""The LASER encoder's sentence embeddings computed with NumPy alone: no torch import, for fast CPU start-up.

[`NumpyLaserBiLSTM`] computes what [`~bilstm.LaserBiLSTM`] computes (token embeddings → (Bi)LSTM from zero states →
max-pool over each sentence's tokens) in float32 on the CPU, to float round-off (measured against PyTorch: at most
1.2e-6 apart on laser-mini's embeddings of 10,000 Tatoeba lines; tests/test_numpy_engine.py holds it to the original
encoder's reference embeddings within 1e-5, like the PyTorch model). Importing torch takes 1.3-3 s on a small machine, about as long as embedding 5,000
short sentences, so `hf-laser embed` uses this engine where it can (`--engine`, docs/measured/laser-mini-cli.md).

How it is fast, exactly:

- the first layer's input projection `W_ih x + b` is computed once per distinct token, not once per token
  occurrence (a third of the arithmetic of a 1-layer model): of the batch, or of every batch of a call at once
  ([`token_table`], which `LaserEncoder` computes for each chunk of sentences it batches: 2,982 rows instead of
  13,312 for 10,000 Tatoeba lines in 10 batches);
- a batch sorted by length shrinks step by step to the sentences still running (what packing does), both
  directions alike: the backward direction reads each sentence from its last token;
- `tanh(x) = 2 sigmoid(2x) - 1`, so one `exp` pass serves the four gates; the weights are stored negated, and the
  cell-gate rows doubled, so that the `exp` reads the products directly (`sigmoid(x) = 1 / (1 + exp(-x))`), and the
  cell state is kept as `-2c`, what the `exp` of `tanh(c)` reads (scalings by powers of two: exact, the same bits
  as the textbook order of operations);
- the two directions run in two threads with single-threaded BLAS (threadpoolctl), so the element-wise work of one
  overlaps the matrix products of the other; the numbers do not depend on the number of threads. The threads are
  kept for the model's life (starting threads between batches costs more than it seems on a busy small machine).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from functools import partial
from typing import NamedTuple

import numpy as np

from .plain_weights import read_plain_weights


def _blas_single_thread():
    """A context in which NumPy's BLAS uses one thread (each direction's thread does its own products), or a no-op
    where threadpoolctl cannot set it (then the directions run one after the other, with BLAS's own threads)."""
    try:
        # lazy: the NumPy engine only
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    try:
        return threadpool_limits(limits=1, user_api="blas")
    except Exception:  # noqa: BLE001 - an unknown BLAS: run without the direction threads
        return None


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _Direction:
    """One direction of one layer: gate order i, f, g, o (PyTorch's); the weights negated and the g rows doubled
    (see the module): `project` and the recurrent product give `-x` for the i, f, o gates and `-2x` for g."""

    def __init__(self, weight_ih, weight_hh, bias_ih, bias_hh, hidden: int):
        scale = np.full((4 * hidden, 1), -1.0, np.float32)
        scale[2 * hidden:3 * hidden] = -2.0
        self.weight_ih_t = np.ascontiguousarray((weight_ih * scale).T)  # (inputs, 4H)
        self.weight_hh_t = np.ascontiguousarray((weight_hh * scale).T)  # (H, 4H)
        self.bias = (bias_ih + bias_hh) * scale[:, 0]  # (4H,); PyTorch adds the two biases too
        self.hidden = hidden

    def project(self, x: np.ndarray) -> np.ndarray:
        """`(rows, 4H)` input projections `x W_ih^T + b` (scaled as the class says) of the `(rows, inputs)` `x`."""
        table = x @ self.weight_ih_t
        table += self.bias
        return table

    def run(self, table: np.ndarray, index: np.ndarray, active: np.ndarray, pooled_out: np.ndarray,
            pool_skip: np.ndarray | None, outputs: np.ndarray | None) -> None:
        """The recurrence over a batch sorted by length (longest first).

        Args:
            table: `(rows, 4H)` input projections (bias included); step `t` of sentence `b` reads `table[index[b, t]]`.
            index: `(batch, steps)` rows of `table`, in this direction's reading order.
            active: `(steps,)` sentences still running at each step (a prefix of the batch).
            pooled_out: `(batch, H)` written with the max over each sentence's steps.
            pool_skip: `(batch, steps)` True where a step is left out of the max (a literal `<pad>` token), or None.
            outputs: `(steps, batch, H)` written with every step's hidden state (for the next layer), or None.
        """
        hidden = self.hidden
        batch, steps = index.shape
        index = np.ascontiguousarray(index.T)  # (steps, batch): each step's rows side by side
        h = np.zeros((batch, hidden), np.float32)
        c = np.zeros((batch, hidden), np.float32)  # the cell state times -2
        pooled_out.fill(-np.inf)
        gates = np.empty((batch, 4 * hidden), np.float32)
        recurrent = np.empty((batch, 4 * hidden), np.float32)
        scratch = np.empty((batch, hidden), np.float32)
        with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x < -88: sigmoid(x) = 1 / inf = 0, exact
            for t in range(steps):
                n = int(active[t])
                g, r, s = gates[:n], recurrent[:n], scratch[:n]
                np.take(table, index[t, :n], axis=0, out=g)
                if t:  # h is 0 at the first step
                    np.matmul(h[:n], self.weight_hh_t, out=r)
                    g += r
                np.exp(g, out=g)  # sigmoid(x) = 1 / (1 + exp(-x)), on all four gates at once (g holds -x)
                g += 1.0
                np.reciprocal(g, out=g)
                i, f, cell, o = g[:, :hidden], g[:, hidden:2 * hidden], g[:, 2 * hidden:3 * hidden], g[:, 3 * hidden:]
                cell *= -4.0
                cell += 2.0  # -2 tanh of the cell-gate input: -2 (2 sigmoid(2x) - 1), its weights doubled
                cc = c[:n]
                cc *= f
                np.multiply(i, cell, out=s)
                cc += s  # -2c
                np.exp(cc, out=s)  # tanh(c) = 2 / (1 + exp(-2c)) - 1
                s += 1.0
                np.reciprocal(s, out=s)
                s *= 2.0
                s -= 1.0
                hh = h[:n]
                np.multiply(o, s, out=hh)
                if outputs is not None:
                    outputs[t, :n] = hh
                if pool_skip is not None and pool_skip[:n, t].any():
                    keep = ~pool_skip[:n, t]
                    pooled_out[:n][keep] = np.maximum(pooled_out[:n][keep], hh[keep])
                else:
                    np.maximum(pooled_out[:n], hh, out=pooled_out[:n])


class TokenTable(NamedTuple):
    """The first layer's input projections of some distinct tokens ([`NumpyLaserBiLSTM.token_table`])."""

    tokens: np.ndarray  # (rows,) sorted distinct token ids
    projections: list  # one (rows, 4H) float32 array per direction of the first layer


class NumpyLaserBiLSTM:
    """The LASER encoder's inference in NumPy: the sentence embeddings ([`pooled`]) of a plain model directory.

    Not a `torch.nn.Module`: no hidden states, no devices, no training. [`~encoder.LaserEncoder`] drives it like the
    PyTorch model (`engine="numpy"`). `state_dict()` gives the weights as loaded (float32 arrays under nn.LSTM's
    names), which is what the model hash of an embedding manifest is computed from.

    Args:
        config: a [`~plain_config.PlainLaserConfig`] (or any object with the LASER config attributes).
        state: the encoder's weights, float32 arrays under the names of [`~plain_weights.parameter_shapes`].
        threads: threads for the two directions (default: 2 where two CPUs are available); the embeddings are the
            same bits with 1 or 2.
    """

    # Which arithmetic this engine does: raised whenever a change moves its last bits (2: the first layer's projections
    # shared by a chunk's batches; 3: the deeper layers project real tokens only, in products of other shapes). Part
    # of an embedding's identity, so that a file is never resumed with rows of another revision.
    numerics_revision = 3

    def __init__(self, config, state: dict[str, np.ndarray], threads: int | None = None):
        self.config = config
        self._state = state
        hidden = config.hidden_size
        self.embed_tokens = state["embed_tokens.weight"]
        self.layers = [
            [_Direction(state[f"lstm.weight_ih_l{layer}{suffix}"], state[f"lstm.weight_hh_l{layer}{suffix}"],
                        state[f"lstm.bias_ih_l{layer}{suffix}"], state[f"lstm.bias_hh_l{layer}{suffix}"], hidden)
             for suffix in ("", "_reverse")[:2 if config.bidirectional else 1]]
            for layer in range(config.num_layers)]
        self.threads = threads if threads is not None else min(8, _cpu_count())
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self._pool = None  # the worker threads, started at the first call that uses them
        self._pool_lock = threading.Lock()

    def __getstate__(self):  # (threads and locks do not pickle)
        return {k: v for k, v in self.__dict__.items() if k not in ("_pool", "_pool_lock")}

    def __setstate__(self, state):
        self.__dict__.update(state, _pool=None, _pool_lock=threading.Lock())

    @classmethod
    def from_directory(cls, path: str | os.PathLike, threads: int | None = None) -> NumpyLaserBiLSTM | None:
        """The model of a plain local LASER directory, or None for anything else (see [`~plain_weights`])."""
        read = read_plain_weights(path)
        return None if read is None else cls(*read, threads=threads)

    @property
    def name_or_path(self) -> str:
        """Where the model was read from (as a transformers model's `name_or_path`)."""
        return str(getattr(self.config, "name_or_path", ""))

    def state_dict(self) -> dict[str, np.ndarray]:
        return dict(self._state)

    def token_table_bytes(self, rows: int) -> int:
        """Memory of a [`token_table`] of `rows` distinct tokens."""
        return rows * 4 * self.config.hidden_size * len(self.layers[0]) * 4

    def token_table(self, token_ids) -> TokenTable:
        """The first layer's input projections of the distinct tokens of `token_ids` (any shape of int ids), for
        [`pooled`] to read instead of projecting each batch's tokens again: a caller that embeds many batches
        computes it once for all of them ([`token_table_bytes`] of memory). A row is computed in one matrix product
        with the table's other rows, so its last bits can depend on them: the same sentences give the same bits
        with the same table."""
        tokens = np.unique(np.asarray(token_ids, dtype=np.int64))
        if len(tokens) and (tokens[0] < 0 or tokens[-1] >= len(self.embed_tokens)):
            raise ValueError(f"token ids outside the vocabulary [0, {len(self.embed_tokens)})")
        x = self.embed_tokens[tokens]
        limits = _blas_single_thread()
        with limits if limits is not None else nullcontext():
            projections = self._parallel([partial(direction.project, x) for direction in self.layers[0]],
                                         self.threads if limits is not None else 1)
        return TokenTable(tokens, projections)

    def pooled(self, input_ids: np.ndarray, lengths: np.ndarray, table: TokenTable | None = None) -> np.ndarray:
        """Sentence embeddings of a right-padded batch.

        Args:
            input_ids: `(batch, seq_len)` int token ids, each row's tokens first (what follows is ignored).
            lengths: `(batch,)` tokens of each row, at least 1 (`</s>` included).
            table: a [`token_table`] holding every token of the batch (None: the batch's own tokens are projected).

        Returns:
            `(batch, embedding_dim)` float32: the max over each sentence's tokens of the last layer's outputs, both
            directions concatenated; a token equal to `pad_token_id` is left out of the max, like the original
            (a sentence of nothing else gives -inf).
        """
        input_ids = np.asarray(input_ids)
        lengths = np.asarray(lengths, dtype=np.int64)
        batch = len(lengths)
        if input_ids.ndim != 2 or input_ids.shape[0] != batch or batch == 0:
            raise ValueError(f"input_ids must be (batch, seq_len) with batch = len(lengths) > 0, got "
                             f"{input_ids.shape} and {batch} lengths")
        if lengths.min() < 1 or lengths.max() > input_ids.shape[1]:
            raise ValueError("every length must be between 1 and seq_len")
        order = np.argsort(-lengths, kind="stable")
        ids, lengths = input_ids[order, :lengths.max()], lengths[order]
        steps = int(lengths[0])
        positions = np.arange(steps)
        running = positions[None, :] < lengths[:, None]  # (batch, steps)
        # backward reading order: step s of sentence b is its token lengths[b] - 1 - s (clipped where b has stopped)
        backward = np.where(running, lengths[:, None] - 1 - positions[None, :], 0)
        forward = np.broadcast_to(positions, ids.shape)
        tokens = np.where(running, ids, 0).astype(np.int64)
        is_pad = tokens == self.config.pad_token_id
        pad_skip = is_pad & running if bool((is_pad & running).any()) else None
        # the first layer reads the projection of each distinct token (its row of `table`, or of the batch's own)
        if table is None:
            vocab, local = np.unique(tokens, return_inverse=True)
            local = local.reshape(tokens.shape)
            x = self.embed_tokens[vocab]
        else:
            local = np.zeros_like(tokens)
            local[running] = np.searchsorted(table.tokens, tokens[running])
            if not len(table.tokens) or not np.array_equal(
                    table.tokens[np.minimum(local, len(table.tokens) - 1)][running], tokens[running]):
                raise ValueError("the token table does not hold every token of the batch")
        reading = [(forward, local), (backward, np.take_along_axis(local, backward, axis=1))]
        hidden = self.config.hidden_size
        result = np.empty((batch, hidden * len(self.layers[0])), np.float32)
        directions = len(self.layers[0])
        # jobs: each direction, over `parts` interleaved slices of the batch (each still sorted by length)
        parts = max(1, min(self.threads // directions, batch // 64))
        slices = [np.arange(k, batch, parts) for k in range(parts)]
        limits = _blas_single_thread()  # one BLAS thread per job: the same bits whatever the number of threads
        with limits if limits is not None else nullcontext():
            for number, layer in enumerate(self.layers):
                last = number == len(self.layers) - 1
                outputs = [None if last else np.zeros((steps, batch, hidden), np.float32) for _ in layer]
                threads = self.threads if limits is not None else 1
                if number == 0 and table is not None:
                    tables = table.projections
                else:
                    tables = self._parallel([partial(direction.project, x) for direction in layer], threads)
                jobs = []
                for d, direction in enumerate(layer):
                    order_in_sentence, rows = reading[d]
                    skip = None
                    if pad_skip is not None:
                        skip = np.take_along_axis(pad_skip, order_in_sentence, axis=1) & running
                    for part in slices:
                        jobs.append(partial(self._recur, direction, tables[d], rows[part], lengths[part],
                                            None if skip is None else skip[part], outputs[d], part, d, result))
                self._parallel(jobs, threads)
                if not last:  # next layer's input, one row per real token: [forward output; backward output]
                    # (only the real tokens are projected: a batch's padding can be most of its grid, e.g. one long
                    # sentence among short ones)
                    sentence, position = np.nonzero(running)
                    row_of = np.zeros((batch, steps), np.int64)
                    row_of[sentence, position] = np.arange(len(sentence))
                    x = np.empty((len(sentence), hidden * len(layer)), np.float32)
                    x[:, :hidden] = outputs[0][position, sentence]
                    if len(layer) > 1:  # step s of the backward direction read position lengths - 1 - s
                        x[:, hidden:] = outputs[1][lengths[sentence] - 1 - position, sentence]
                    reading = [(forward, np.take_along_axis(row_of, forward, axis=1)),
                               (backward, np.take_along_axis(row_of, backward, axis=1))]
        out = np.empty_like(result)
        out[order] = result
        return out

    def _recur(self, direction, table, rows, lengths, skip, outputs, part, d, result) -> None:
        """One job: `direction` over the batch rows `part` (sorted by length), into `result` and `outputs`."""
        hidden = self.config.hidden_size
        steps = int(lengths[0])
        active = (np.arange(steps)[:, None] < lengths[None, :]).sum(axis=1)
        pooled = np.empty((len(rows), hidden), np.float32)
        mine = None if outputs is None else np.zeros((steps, len(rows), hidden), np.float32)
        direction.run(table, rows[:, :steps], active, pooled, None if skip is None else skip[:, :steps], mine)
        result[part, d * hidden:(d + 1) * hidden] = pooled
        if mine is not None:
            outputs[:steps, part] = mine


    def _parallel(self, calls, threads: int) -> list:
        """The results of `calls` (no-argument callables), run by up to `threads` of the model's threads (in order
        with 1)."""
        if threads <= 1 or len(calls) == 1:
            return [call() for call in calls]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="hf_laser-numpy")
        futures = [self._pool.submit(call) for call in calls]
        return [future.result() for future in futures]  # (re-raises a call's error here)
