"""Dynamic batching for the embedding server: the token-id sequences of requests that arrive together are embedded
in one call of the model, and each caller gets its own rows back, in order.

The batcher is an asyncio task; the model runs in one worker thread, so the event loop keeps serving while a batch
is embedded. A batch is dispatched when the queued requests hold `max_batch_tokens` tokens, or `max_wait_ms` after
the oldest queued request arrived, whichever comes first; requests that arrive while the model is busy wait for the
next batch (so under load the batches fill up without any extra waiting). A request larger than the budget is cut
into parts, the batches `LaserEncoder.encode` would make of it (so each part is computed as `encode` computes it),
and a batch takes the next part of each waiting request in turn (round robin): a small request waits for one
batch, not for a large one's whole work (12 s of laser-mini for a request of 88,000 tokens, in one model call
before).

Only the composition of the model's batches differs from embedding each request's sentences alone with
`LaserEncoder.encode`, and LASER's packed BiLSTM does not depend on it beyond float round-off (measured ≤ 2e-7 for
laser-mini; `tests/test_serve.py` checks ≤ 1e-6 over real HTTP).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..defaults import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MAX_BATCH_TOKENS = DEFAULT_MAX_TOKENS  # LaserEncoder's default token budget per batch
DEFAULT_MAX_WAIT_MS = 2.0


@dataclass
class _Pending:
    """A request: its parts (indices into `ids`, each within the token budget), the next part to embed, and the
    rows of the parts done."""

    ids: Sequence[Sequence[int]]
    parts: list
    part_tokens: list[int]
    future: asyncio.Future
    arrived: float
    next_part: int = 0
    rows: list = field(default_factory=list)


def _parts(ids: Sequence[Sequence[int]], budget: int) -> tuple[list, list[int]]:
    """`ids` cut as `LaserEncoder.encode_ids` batches them with the token budget `budget` (distinct sequences,
    longest first, [`~hf_laser.encoder.plan_batches`]): index arrays into `ids` (a repeated sequence goes with its
    first occurrence) and their padded token counts. One part: the whole request (`[None]`)."""
    # lazy: `import hf_laser` and `hf-laser --help` run without NumPy
    import numpy as np

    # lazy: encoder imports numpy, tqdm
    from ..encoder import plan_batches

    lengths = [len(s) for s in ids]
    if len(ids) * max(lengths, default=0) <= budget:
        return [None], [sum(lengths)]
    first_seen: dict = {}
    inverse = np.fromiter((first_seen.setdefault(tuple(s), len(first_seen)) for s in ids), np.int64, len(ids))
    unique_lengths = [len(u) for u in first_seen]
    plan = plan_batches(unique_lengths, budget)
    if len(plan) == 1:
        return [None], [sum(lengths)]
    batch_of = np.empty(len(unique_lengths), dtype=np.int64)
    for b, batch in enumerate(plan):
        batch_of[batch] = b
    rows_batch = batch_of[inverse]
    parts = [np.flatnonzero(rows_batch == b) for b in range(len(plan))]
    return parts, [len(batch) * max(unique_lengths[i] for i in batch) for batch in plan]


@dataclass
class BatcherStats:
    """Counters of a [`DynamicBatcher`] (read by `GET /health`)."""

    requests: int = 0  # requests embedded
    sentences: int = 0  # sentences embedded (repeats included)
    batches: int = 0  # model calls
    largest_batch: int = 0  # most requests in one model call (a part of a request counts as one)
    dropped: int = 0  # requests whose caller went away before they were embedded (not computed) or before the answer
    queued: int = 0  # requests waiting now
    model_seconds: float = 0.0  # time spent in the model calls
    batch_requests: list = field(default_factory=list, repr=False)  # requests per batch (last 1000), for tests

    def as_dict(self) -> dict:
        return {"requests": self.requests, "sentences": self.sentences, "batches": self.batches,
                "largest_batch": self.largest_batch, "dropped": self.dropped, "queued": self.queued,
                "model_seconds": round(self.model_seconds, 3)}


class DynamicBatcher:
    """Collects token-id sequences from concurrent callers into batches for `embed_ids`.

    Args:
        embed_ids: `ids -> (len(ids), dim)` float32 array or CPU tensor (e.g.
            `partial(encoder.encode_ids, max_tokens=max_batch_tokens)`); called in the worker thread, one call at
            a time.
        max_batch_tokens: token budget of one call (`</s>` included), summed over the requests it serves.
        max_wait_ms: how long the oldest queued request may wait for others to join its batch.
    """

    def __init__(self, embed_ids: Callable[[list], object], *, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 max_wait_ms: float = DEFAULT_MAX_WAIT_MS):
        if max_batch_tokens <= 0:
            raise ValueError(f"max_batch_tokens must be positive, got {max_batch_tokens}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.embed_ids = embed_ids
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.stats = BatcherStats()
        self._queue: deque[_Pending] = deque()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closing = False
        self._executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Starts the batching task on the running event loop."""
        if self._task is not None:
            raise RuntimeError("the batcher is already running")
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-laser-model")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="hf-laser-batcher")

    async def close(self) -> None:
        """Embeds what is queued, then stops the task and the worker thread."""
        if self._task is None:
            return
        self._closing = True
        self._wakeup.set()
        try:
            await self._task
        finally:
            self._executor.shutdown(wait=True)
            self._task = None

    # ------------------------------------------------------------------ callers
    async def embed(self, ids: Sequence[Sequence[int]]) -> np.ndarray:
        """The embeddings of `ids` (`(len(ids), dim)` float32), computed in a batch with whatever else is queued.
        Cancelling the awaiting task (a client that went away) drops the request: it is not computed if its batch
        has not started, and its rows are discarded otherwise."""
        if self._task is None or self._closing:
            raise RuntimeError("the batcher is not running")
        future = asyncio.get_running_loop().create_future()
        item = _Pending(ids, *_parts(ids, self.max_batch_tokens), future, time.monotonic())
        self._queue.append(item)
        self.stats.queued = len(self._queue)
        self._wakeup.set()
        try:
            return await future
        except asyncio.CancelledError:
            if not future.done() or future.cancelled():
                self.stats.dropped += 1
            future.cancel()
            raise

    # ------------------------------------------------------------------ the batching task
    def _queued_tokens(self) -> int:
        return sum(sum(p.part_tokens[p.next_part:]) for p in self._queue if not p.future.done())

    def _take_batch(self) -> list[_Pending]:
        """The next part of the waiting requests, oldest first, within the token budget (at least one part); a
        request with parts left goes to the back of the queue (round robin)."""
        batch, tokens, again = [], 0, []
        while self._queue:
            item = self._queue[0]
            if item.future.done():  # cancelled while queued
                self._queue.popleft()
                continue
            part_tokens = item.part_tokens[item.next_part]
            if batch and tokens + part_tokens > self.max_batch_tokens:
                break
            self._queue.popleft()
            batch.append(item)
            tokens += part_tokens
            if item.next_part + 1 < len(item.parts):
                again.append(item)
        self._queue.extend(again)
        self.stats.queued = len(self._queue)
        return batch

    async def _run(self) -> None:
        # lazy: `import hf_laser` and `hf-laser --help` run without NumPy
        import numpy as np  # (see _embed)

        loop = asyncio.get_running_loop()
        model_free = 0.0
        while True:
            while not self._queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
            # Others may join until max_wait after the batch could have started (the oldest request's arrival, or the
            # end of the previous batch: its callers send their next requests then), unless the budget is met.
            deadline = max(self._queue[0].arrived, model_free) + self.max_wait
            while not self._closing and self._queued_tokens() < self.max_batch_tokens:
                delay = deadline - time.monotonic()
                if delay <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), delay)
                except TimeoutError:
                    break
            batch = self._take_batch()
            if not batch:
                continue
            parts = [item.parts[item.next_part] for item in batch]
            for item in batch:
                item.next_part += 1
            ids = [s for item, part in zip(batch, parts)
                   for s in (item.ids if part is None else [item.ids[i] for i in part])]
            t0 = time.perf_counter()
            try:
                emb = await loop.run_in_executor(self._executor, self._embed, ids)
            except Exception as err:  # noqa: BLE001 (handed to every caller of the batch)
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(err)
                self._queue = deque(p for p in self._queue if not p.future.done())  # (their parts left: dropped)
                continue
            finally:
                model_free = time.monotonic()
            stats = self.stats
            stats.model_seconds += time.perf_counter() - t0
            stats.batches += 1
            stats.largest_batch = max(stats.largest_batch, len(batch))
            stats.batch_requests = stats.batch_requests[-999:] + [len(batch)]
            start = 0
            for item, part in zip(batch, parts):
                n = len(item.ids) if part is None else len(part)
                rows = emb[start:start + n]
                start += n
                if item.future.done():  # its caller went away while the batch ran
                    continue
                item.rows.append(rows)
                if item.next_part < len(item.parts):
                    continue
                if part is None:
                    item.future.set_result(rows)
                else:
                    out = np.empty((len(item.ids), emb.shape[1]), dtype=emb.dtype)
                    for done_part, done_rows in zip(item.parts, item.rows):
                        out[done_part] = done_rows
                    item.future.set_result(out)
                stats.requests += 1
                stats.sentences += len(item.ids)

    def _embed(self, ids: list) -> np.ndarray:
        # lazy: `import hf_laser` and `hf-laser --help` run without NumPy
        import numpy as np  # not at module level: `hf-laser serve --help` reads this module's defaults

        emb = self.embed_ids(ids)
        emb = emb.numpy() if hasattr(emb, "numpy") else np.asarray(emb)
        if emb.shape[0] != len(ids):
            raise RuntimeError(f"embed_ids returned {emb.shape[0]} rows for {len(ids)} sentences")
        return emb
