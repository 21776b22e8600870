"""Resumable embedding outputs: the one implementation behind every `.npy` of embeddings hf_laser writes
(`LaserEncoder.encode_file` / `hf-laser embed`, the files and shards of `hf_laser.mining`, the evaluation cache).

* **Identity**: what an output was computed from ([`embedding_identity`]: the input's content, the language, the
  model and tokenizer hashes [`model_sha256`] / [`tokenizer_sha256`], the options, the hf-laser version), and what
  differs between two of them ([`identity_changes`]).
* **Files** of an output `OUT` ([`OutputFiles`]): `OUT` (complete), `OUT.manifest.json` (its identity and what was
  written), `OUT.partial` + `OUT.partial.json` (a run in progress and how far it got). [`OutputFiles.start`] gives a
  [`ResumableWriter`]: rows are written at their offsets with plain positioned writes and fsynced before the
  progress record says so; `OUT` appears only by the final rename, its manifest right after.
* **One writer at a time** ([`output_lock`]): every writer of `OUT` holds an exclusive lock on `OUT.lock`
  (`filelock`, an OS-level lock released by the kernel when its process dies) from before it reads or deletes
  anything until `OUT` and its manifest are written; a second writer stops at once with an [`OutputBusyError`]
  naming the process that holds it, or waits (`wait=True`).
* **Low level**: [`NpyFile`] (a `.npy` written row by row, its disk space reserved up front, so a full disk fails
  with ENOSPC instead of a SIGBUS), [`write_json_atomic`], [`write_npy_atomic`], [`npy_header`].

A full disk or an I/O error becomes an [`EmbeddingWriteError`] that says what was kept; the same call resumes.
torch is imported only to hash a model.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import __version__
from .defaults import DEFAULT_CHUNK_LINES, DEFAULT_MAX_SENTENCE_TOKENS, DEFAULT_MAX_TOKENS
from .errors import DISK_ERRNOS, EmbeddingWriteError, UsageError
from .modeling.plain_config import LASER_CONFIG_DEFAULTS
from .text.langid import detector_version, is_auto

__all__ = [
    "MANIFEST_FORMAT",
    "scan_input",
    "model_sha256",
    "tokenizer_sha256",
    "embedding_identity",
    "identity_changes",
    "read_json",
    "write_json_atomic",
    "write_npy_atomic",
    "npy_header",
    "NpyFile",
    "OutputFiles",
    "ResumableWriter",
    "OutputBusyError",
    "output_lock",
]

MANIFEST_FORMAT = "hf-laser-embeddings/1"


# ---------------------------------------------------------------------------------------------------------------
# Identity: what an output was computed from
# ---------------------------------------------------------------------------------------------------------------


def scan_input(path: str | os.PathLike, *, sha256: bool = True) -> dict:
    """One pass over a text file: `{"path", "size", "mtime_ns", "lines", "sha256"}`, `lines` counted as
    `hf_laser.encoder.read_lines` yields them (split on `'\\n'` only; a last line without newline counts) and
    `sha256` over the file's bytes (None with `sha256=False`)."""
    path = Path(path)
    digest, count, last = hashlib.sha256() if sha256 else None, 0, b"\n"
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        while block := f.read(1 << 24):
            if digest is not None:
                digest.update(block)
            count += block.count(b"\n")
            last = block[-1:]
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "lines": count + (last != b"\n"), "sha256": digest.hexdigest() if digest is not None else None}


def _package_version() -> str:
    return __version__


_CONFIG_METADATA = {"architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "use_cache"}


def config_identity(config) -> dict:
    """The config values a model's identity covers. A LASER config (`LaserConfig` or the transformers-free
    `PlainLaserConfig`, which give the same): its own parameters, not the generic attributes transformers adds,
    whose set changes with transformers' version. Another config: all its values but metadata such as its path."""

    values = config.to_dict()
    if values.get("model_type") == "laser":
        return {"model_type": "laser", **{k: values.get(k, v) for k, v in LASER_CONFIG_DEFAULTS.items()}}
    return {k: v for k, v in values.items() if not k.startswith("_") and k not in _CONFIG_METADATA}


def model_sha256(model) -> str:
    """sha256 of a model's config (without metadata such as its path) and of every tensor of its state dict
    (name, dtype, shape, bytes). A full hash: ~0.2 s for the 93-language LASER's weights. NumPy arrays (the NumPy
    engine's state dict) hash like the torch tensors of the same values, and import no torch."""
    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        digest.update(json.dumps(config_identity(config), sort_keys=True, default=str).encode())
    state = model.state_dict()
    for name in sorted(state):
        value = state[name]
        if isinstance(value, np.ndarray):
            digest.update(f"{name}|torch.{value.dtype.name}|{tuple(value.shape)}".encode())
            if value.size:
                digest.update(np.ascontiguousarray(value).reshape(-1).view(np.uint8).data)
            continue
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        if not isinstance(value, torch.Tensor):
            digest.update(f"{name}|{type(value).__qualname__}".encode())
            continue
        t = value.detach()
        if t.is_quantized:
            t = t.int_repr()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        if t.device.type == "meta" or not t.numel():
            continue
        t = t.cpu().contiguous().reshape(-1)
        digest.update((t if t.dtype in (torch.uint8, torch.int8, torch.bool) else t.view(torch.uint8)).numpy().data)
    return digest.hexdigest()


def tokenizer_sha256(tokenizer, vocab: dict | None) -> str | None:
    """sha256 of what turns text into ids: the vocabulary and the subword files (BPE codes / SentencePiece model)
    of a `LaserTokenizer`, or the vocabulary alone for a dictionary-only model. None when there is neither."""
    if tokenizer is None and vocab is None:
        return None
    digest = hashlib.sha256()
    if tokenizer is not None:
        vocab = tokenizer.get_vocab()
        name = getattr(tokenizer, "identity_name", type(tokenizer).__qualname__)  # LaserTokenizer or the class under it
        digest.update(f"{name}|{getattr(tokenizer, 'mode', None)}|"
                      f"{getattr(tokenizer, 'laser2_punct_lang', None)}".encode())
        for key, content in sorted((getattr(tokenizer, "_files", None) or {}).items()):
            digest.update(key.encode() + b"|" + hashlib.sha256(content).digest())
    digest.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def model_identity(encoder) -> dict:
    """`encoder.model_identity()` ([`hf_laser.LaserEncoder.model_identity`]); for another object, the hashes of its
    `model` and `tokenizer` / `vocab` when it has a `model`, else its class name."""
    get = getattr(encoder, "model_identity", None)
    if callable(get):
        return get()
    model = getattr(encoder, "model", None)
    if model is None:
        return {"model": f"{type(encoder).__module__}.{type(encoder).__qualname__}", "tokenizer": None,
                "model_dtype": None, "quantize": None}
    return {"model": model_sha256(model),
            "tokenizer": tokenizer_sha256(getattr(encoder, "tokenizer", None), getattr(encoder, "vocab", None)),
            "model_dtype": None, "quantize": None}


def _member_identity(encoder, lang) -> dict:
    """[`model_identity`] of what embeds text in `lang`: for a model set, the member of that language (a set has no
    identity of its own: two sets with other students must not share an output), per language for a list."""
    model_for = getattr(encoder, "model_for", None)
    if not callable(model_for):
        return model_identity(encoder)
    if isinstance(lang, str):
        return model_identity(model_for(lang))
    members = {code: model_identity(model_for(code)) for code in sorted(set(lang or [None]))}
    # (members on different engines have different keys: the NumPy engine's `engine`, `engine_revision`)
    keys = list(dict.fromkeys(key for identity in members.values() for key in identity))
    return {key: {code: identity.get(key) for code, identity in members.items()} for key in keys}


def embedding_identity(encoder, input_info: dict, *, lang, pretokenized: bool = False, fp16: bool = False,
                       normalize: bool = False, max_tokens: int | None = DEFAULT_MAX_TOKENS,
                       batch_size: int | None = None, chunk_lines: int = DEFAULT_CHUNK_LINES,
                       max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS) -> dict:
    """Everything that determines the embeddings of a file (compared before resuming or reusing them): the input's
    content (sha256, size, lines), language (None for pre-tokenized input), model and tokenizer (hashes, dtype,
    quantisation), the output options, the batching (which decides float round-off), the sentence-length limit when
    it is not the default, and the hf-laser version. The input's path and mtime and the device are not part of it
    (recorded in the manifest for information only)."""
    return {
        "hf_laser": _package_version(),
        "input_sha256": input_info["sha256"], "input_size": input_info["size"], "lines": input_info["lines"],
        # pre-tokenized input does not go through the language-specific preprocessing; "auto" depends on the detector
        "lang": None if pretokenized else _lang_identity(lang) if isinstance(lang, str) or lang is None
        else [_lang_identity(x) for x in lang],
        "pretokenized": bool(pretokenized),
        **_member_identity(encoder, lang),
        "output_dtype": "float16" if fp16 else "float32", "normalize": bool(normalize),
        "max_tokens": max_tokens, "batch_size": batch_size, "chunk_lines": chunk_lines,
        # Only a non-default limit is recorded, so that outputs written before the limit existed stay valid: they
        # can differ only on a sentence over the limit, which those versions embedded whole (or died on).
        **({} if max_sentence_tokens == DEFAULT_MAX_SENTENCE_TOKENS else {"max_sentence_tokens": max_sentence_tokens}),
    }


def _lang_identity(lang: str | None) -> str | None:
    """The language as recorded in an embedding identity: `"auto"` with the detector's name and version."""
    return f"auto ({detector_version()})" if is_auto(lang) else lang


_IDENTITY_LABELS = {
    "hf_laser": "hf-laser version", "input_sha256": "input content (sha256)", "input_size": "input size",
    "lines": "input lines", "lang": "language", "pretokenized": "pretokenized", "model": "model (sha256)",
    "tokenizer": "tokenizer (sha256)", "model_dtype": "model dtype", "quantize": "quantisation",
    "output_dtype": "output dtype", "normalize": "normalize", "max_tokens": "max_tokens",
    "batch_size": "batch_size", "chunk_lines": "chunk_lines", "max_sentence_tokens": "max_sentence_tokens",
    "engine": "engine", "engine_revision": "NumPy engine revision",
}


def identity_changes(old: dict, new: dict) -> list[str]:
    """What differs between two [`embedding_identity`] dicts, as `"language fr -> de"` items (empty: the same)."""
    def show(v):
        return f"{v[:12]}…" if isinstance(v, str) and len(v) == 64 else json.dumps(v)

    new = json.loads(json.dumps(new))
    return [f"{_IDENTITY_LABELS.get(k, k)} {show(old.get(k))} -> {show(new.get(k))}"
            for k in list(new) + [k for k in old if k not in new] if old.get(k) != new.get(k)]


# ---------------------------------------------------------------------------------------------------------------
# Low level: whole files by rename, .npy files row by row
# ---------------------------------------------------------------------------------------------------------------


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_json_atomic(path: Path, obj) -> None:
    """Writes JSON to a temporary file next to `path`, then renames it: `path` is always whole."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_npy_atomic(path: Path, array: np.ndarray) -> None:
    """`np.save` into a temporary file next to `path`, then renames it: `path` is always whole."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp.npy")
    try:
        np.save(tmp, array)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def npy_header(path: Path) -> tuple[tuple, np.dtype, int]:
    """`(shape, dtype, header_length)` of a C-order `.npy` file; ValueError when it is not one."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is None:
            raise ValueError(f"unsupported .npy version {version}")
        shape, fortran, dtype = read(f)
        if fortran:
            raise ValueError("Fortran-order array")
        return tuple(shape), np.dtype(dtype), f.tell()


def _preallocate(fd: int, offset: int, length: int) -> None:
    """Reserves the disk blocks of `[offset, offset + length)`, so that a full disk fails here (ENOSPC), not later.
    Where the file system cannot (no `posix_fallocate`), the file is extended sparse and writes report ENOSPC."""
    if length <= 0:
        return
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, offset, length)
            return
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", -1)):
                raise
    if os.fstat(fd).st_size < offset + length:
        os.ftruncate(fd, offset + length)


def _write_at(fd: int, offset: int, data) -> None:
    """Plain positioned writes (no memory map: a full disk raises ENOSPC here instead of killing with SIGBUS)."""
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class NpyFile:
    """A C-order `.npy` file of a known `shape` / `dtype` written row by row at the rows' offsets.

    `create=True` writes a new file (the header `np.save` writes; a failure leaves no file), otherwise an existing
    one of that shape is reopened. [`reserve`] claims the disk space of all rows up front."""

    def __init__(self, path: str | os.PathLike, shape: tuple, dtype, *, create: bool = True):
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        if create:
            try:
                with open(self.path, "wb") as f:
                    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                             "fortran_order": False, "shape": self.shape})
                    self.header = f.tell()
            except OSError:
                self.path.unlink(missing_ok=True)
                raise
        else:
            self.header = npy_header(self.path)[2]
        self.fd: int | None = os.open(self.path, os.O_RDWR)

    def reserve(self) -> None:
        _preallocate(self.fd, self.header, self.shape[0] * self.row_bytes)

    def write_at(self, offset: int, data: np.ndarray, *, sync: bool = False) -> None:
        """Writes the bytes of `data` as they are at byte `offset` of the file (in the reserved space)."""
        _write_at(self.fd, offset, np.ascontiguousarray(data))
        if sync:
            os.fsync(self.fd)

    def write_rows(self, start: int, rows: np.ndarray, *, sync: bool = False) -> None:
        """Writes `rows` (converted to the file's dtype) as rows `start, start + 1, ...`; `sync`: fsync after."""
        _write_at(self.fd, self.header + start * self.row_bytes,
                  np.ascontiguousarray(np.asarray(rows).astype(self.dtype, copy=False)))
        if sync:
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> NpyFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------------------------
# One writer at a time
# ---------------------------------------------------------------------------------------------------------------


class OutputBusyError(UsageError):
    """Another process is writing this output (its lock is held): the command line says so in one line, exit 2."""

def lock_path(output: str | os.PathLike) -> Path:
    """`OUT.lock`, the lock file of the output `OUT` (it exists while a run holds it)."""
    output = Path(output)
    return output.with_name(output.name + ".lock")


def _lock_holder(path: Path) -> str:
    """Who holds the lock file `path`, as its holder wrote it ("process 1234 on host")."""
    try:
        pid, _, host = path.read_text(encoding="utf-8").strip().partition(" ")
    except OSError:
        pid = host = ""
    if not pid.isdigit():
        return "another process"
    return f"process {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")


@contextmanager
def output_lock(output: str | os.PathLike, *, wait: bool = False,
                say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Holds the exclusive lock of the output `output` (`OUT.lock`, a `filelock.FileLock`: an OS lock, released
    when its process ends however it ends) for the duration of the block. Reentrant within a process (an
    `embed_shards` shard locks the `.npy` that `encode_file` locks again). When another process holds it: an
    [`OutputBusyError`] naming that process, or with `wait=True` a line through `say` and a wait until it is free.
    The directory of `output` must exist."""
    # lazy: writers only
    from filelock import FileLock, Timeout

    path = lock_path(output)
    try:  # filelock reads a lock file it cannot create as one another process holds (and --wait waits forever)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o666))
    except OSError as err:
        raise UsageError(f"cannot create the lock file {path} of {output} ({err.strerror or err}): write the output "
                         "into a directory where files can be created") from None
    lock = FileLock(path, is_singleton=True, thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = _lock_holder(path)
        if not wait:
            raise OutputBusyError(f"{output} is being written by {holder} (lock {path}); wait until it is done "
                                  "(--wait / wait=True waits for it), or write to another output") from None
        if say is not None:
            say(f"waiting for {holder}, which is writing {output}")
        lock.acquire()
    try:
        if lock.lock_counter == 1:
            path.write_text(f"{os.getpid()} {socket.gethostname()}\n", encoding="utf-8")
        yield
    finally:
        if lock.lock_counter == 1:
            # removed while still held (filelock's waiters notice an unlinked lock file and take the new one), so
            # that no OUT.lock is left next to the output
            path.unlink(missing_ok=True)
        lock.release()


# ---------------------------------------------------------------------------------------------------------------
# The files of one output, and writing it resumably
# ---------------------------------------------------------------------------------------------------------------


class OutputFiles:
    """The files of one output `OUT`: `OUT` (complete), `OUT.manifest.json` (what `OUT` was computed from),
    `OUT.partial` + `OUT.partial.json` (a run in progress and how far it got), and `OUT.progress.json`
    (an interrupted run of hf-laser <= 0.1.0, which wrote `OUT` in place)."""

    def __init__(self, output: str | os.PathLike):
        output = Path(output)
        self.output = output
        self.manifest = output.with_name(output.name + ".manifest.json")
        self.partial = output.with_name(output.name + ".partial")
        self.progress = output.with_name(output.name + ".partial.json")
        # where an older hf-laser kept the saved part of the chunk in progress (now inside OUT.partial): removed
        self.chunk = output.with_name(output.name + ".partial.chunk")
        self.chunk_state: dict | None = None
        self.legacy_progress = output.with_name(output.name + ".progress.json")
        self.lock = lock_path(output)

    def complete_status(self, identity: dict, shape: tuple, dtype: np.dtype) -> str | None:
        """None when `OUT` is complete and was computed from `identity`; otherwise why it cannot be used ("" when
        there is no `OUT`). Raises when `OUT` exists but is no `.npy` file (never overwritten without asking)."""
        if not self.output.exists():
            return ""
        try:
            out_shape, out_dtype, _ = npy_header(self.output)
        except (ValueError, OSError, EOFError) as err:
            raise UsageError(f"{self.output} exists and is not a .npy file of embeddings ({err}); "
                             "remove it, or pass --overwrite / resume=False to replace it") from None
        if not self.manifest.exists():
            if self.legacy_progress.exists():
                return "it holds an interrupted run of an older hf-laser (no manifest), which cannot be checked"
            return "it has no manifest (written by an older hf-laser or another program), so what it holds " \
                   "cannot be checked"
        try:
            manifest = read_json(self.manifest)
            old, recorded = manifest["identity"], manifest["output"]
            if not isinstance(old, dict) or not isinstance(recorded, dict):
                raise TypeError("identity / output are not objects")
        except (ValueError, KeyError, TypeError, OSError) as err:
            return f"its manifest {self.manifest.name} is unreadable ({type(err).__name__})"
        if manifest.get("format") != MANIFEST_FORMAT:
            return f"its manifest has format {manifest.get('format')!r}, this hf-laser writes {MANIFEST_FORMAT!r}"
        st = self.output.stat()
        if (st.st_size, st.st_mtime_ns) != (recorded.get("size"), recorded.get("mtime_ns")):
            return "it was modified or replaced after its manifest was written (size/mtime differ)"
        if changes := identity_changes(old, identity):
            return "it was computed from something else: " + "; ".join(changes)
        if out_shape != shape or out_dtype != dtype:
            return f"it holds {out_shape} {out_dtype}, expected {shape} {dtype}"
        # size and mtime can be kept by an edit (or restored): the content is checked against its checksum
        if not isinstance(recorded.get("sha256"), str):
            return "its manifest records no checksum of its content (written by an older hf-laser), so it cannot be " \
                   "checked"
        if file_sha256(self.output) != recorded["sha256"]:
            return "its content changed after it was written (sha256 differs from its manifest)"
        return None

    def resumable_lines(self, identity: dict, shape: tuple, dtype: np.dtype, say) -> int | None:
        """Lines already done by an interrupted run of the same computation; None (and the reason said) when there
        is none to resume or it cannot be trusted. The rows it keeps are checked against the checksums the
        progress record holds (per chunk, and for the part of a chunk saved by time): a changed byte starts over.
        What was saved of the chunk in progress is left in `self.chunk_state` for [`start`]."""
        self.chunk_state = None
        if not self.partial.exists() and not self.progress.exists():
            return None
        why = None
        if not self.progress.exists():
            why = f"{self.partial.name} has no progress record (a run killed before its first chunk was saved)"
        elif not self.partial.exists():
            why = f"{self.progress.name} has no {self.partial.name} to go with it"
        else:
            try:
                state = read_json(self.progress)
                if not isinstance(state, dict) or state.get("format") != MANIFEST_FORMAT:
                    fmt = state.get("format") if isinstance(state, dict) else None
                    why = f"its progress record has format {fmt!r}, not {MANIFEST_FORMAT!r} (another hf-laser version)"
                else:
                    old, done = state["identity"], state["lines_done"]
                    if not isinstance(old, dict):
                        raise TypeError("identity is not an object")
            except (ValueError, KeyError, TypeError, OSError) as err:
                why = f"its progress record {self.progress.name} is unreadable ({type(err).__name__})"
            if why is None and (changes := identity_changes(old, identity)):
                why = "it was computing something else: " + "; ".join(changes)
            if why is None and (not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= shape[0]):
                why = f"its progress record claims {done!r} lines done, the input has {shape[0]}"
            if why is None:
                try:
                    p_shape, p_dtype, header = npy_header(self.partial)
                    if (p_shape, p_dtype) != (shape, dtype):
                        why = f"{self.partial.name} holds {p_shape} {p_dtype}, expected {shape} {dtype}"
                    elif self.partial.stat().st_size < header + done * shape[1] * dtype.itemsize:
                        why = f"{self.partial.name} is truncated"
                    else:
                        why = self._check_rows(state, done, shape, dtype, header)
                except (ValueError, OSError, EOFError) as err:
                    why = f"{self.partial.name} is not a valid .npy file ({err})"
            if why is None:
                return done
        say(f"not resuming the interrupted run for {self.output} ({why}): starting over")
        self.discard_partial()
        return None

    def _check_rows(self, state: dict, done: int, shape: tuple, dtype: np.dtype, header: int) -> str | None:
        """None when the rows `[0, done)` of `OUT.partial` (and the saved part of the chunk in progress, in the
        rows after them) still have the checksums the progress record gives them; otherwise what differs."""
        chunks = state.get("chunks")
        if not (isinstance(chunks, list) and all(isinstance(c, list) and len(c) == 2 and isinstance(c[0], int)
                                                 and isinstance(c[1], str) for c in chunks)):
            return "its progress record has no valid checksums (written by an older hf-laser)"
        if [c[0] for c in chunks] != sorted({c[0] for c in chunks}) or (chunks[-1][0] if chunks else 0) != done:
            return "its progress record's checksums do not cover the lines it claims done"
        row_bytes = shape[1] * dtype.itemsize
        start = 0
        with open(self.partial, "rb") as f:
            for end, digest in chunks:
                f.seek(header + start * row_bytes)
                if _sha256_of(f, (end - start) * row_bytes) != digest:
                    return (f"lines {start + 1:,}-{end:,} of {self.partial.name} changed since they were written "
                            "(checksum)")
                start = end
        current = state.get("current")
        if current is None:
            return None
        try:
            rows, batches, digest = int(current["rows"]), int(current["batches"]), str(current["sha256"])
            if current.get("in") != "partial":  # an older hf-laser's OUT.partial.chunk: redone
                raise ValueError("an older hf-laser's chunk file")
            with open(self.partial, "rb") as f:
                f.seek(header + done * row_bytes)
                ok = 0 < rows * shape[1] * 4 <= (shape[0] - done) * row_bytes and \
                    _sha256_of(f, rows * shape[1] * 4) == digest
        except (KeyError, TypeError, ValueError, AttributeError, OSError):
            ok = False
        self.chunk.unlink(missing_ok=True)
        if not ok:  # only the part of one chunk is lost: resume at the chunk's start
            return None
        self.chunk_state = {"rows": rows, "batches": batches, "sha256": digest}
        return None

    def discard_partial(self) -> None:
        self.progress.unlink(missing_ok=True)
        self.partial.unlink(missing_ok=True)
        self.chunk.unlink(missing_ok=True)

    def start(self, identity: dict, input_info: dict, shape: tuple, dtype, done: int | None) -> ResumableWriter:
        """A [`ResumableWriter`] of `OUT.partial`: a new one (`done=None`: any partial state is discarded), or the
        interrupted run that [`resumable_lines`] found `done` lines into."""
        return ResumableWriter(self, identity, input_info, shape, dtype, done)


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a whole file (the finished output's checksum in its manifest)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _sha256_of(f, length: int) -> str:
    """sha256 of the next `length` bytes of the open file `f` (fewer when it ends first)."""
    digest = hashlib.sha256()
    while length > 0 and (block := f.read(min(length, 1 << 24))):
        digest.update(block)
        length -= len(block)
    return digest.hexdigest()


class ResumableWriter:
    """Writes an output's rows in order into `OUT.partial`, each chunk fsynced before the progress record
    (`OUT.partial.json`) counts it, with its sha256, so a killed run resumes where its last record says and a
    changed byte of the rows it keeps is noticed; [`commit`] renames it to `OUT` and writes the manifest.

    Within a chunk, [`save_chunk_part`] keeps what is computed so far (the encoder's float32 rows of the batches
    done, with their checksum in the record) every few seconds of work, so that an interrupt loses seconds, not a
    chunk. They are written into `OUT.partial` itself, in the rows not written yet (the chunk's own rows come next
    and overwrite them), so the space reserved for the output is all a run needs: a disk with room for the output
    lets it finish. A full disk or an I/O error raises an [`EmbeddingWriteError`] that keeps the state reached (the
    space of all rows is reserved first, so a full disk fails before any work)."""

    def __init__(self, files: OutputFiles, identity: dict, input_info: dict, shape: tuple, dtype,
                 done: int | None):
        self.files, self.identity, self.input_info = files, identity, input_info
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        fresh = done is None
        self.chunks: list[list] = []
        self.chunk_state: dict | None = None  # {"rows", "batches", "sha256", "in"} of the chunk's saved part
        self._chunk_hash = None  # sha256 of the chunk's saved part so far
        if fresh:
            files.discard_partial()
        else:
            self.chunks = read_json(files.progress)["chunks"]
            self.chunk_state = files.chunk_state
        self.done = self.saved = done or 0
        self.resumed_at = self.done
        try:
            self.file = NpyFile(files.partial, self.shape, self.dtype, create=fresh)
        except OSError as err:
            raise self.error(err, "creating") from err
        try:
            self.file.reserve()
        except OSError as err:
            if fresh:
                self.file.close()
                files.partial.unlink(missing_ok=True)
            raise self.error(err, f"reserving {self.shape[0] * self.file.row_bytes / 1e6:,.1f} MB for") from err
        if fresh:
            self._save_progress()

    def error(self, err: OSError, doing: str) -> OSError:
        """A full disk / I/O error as an [`EmbeddingWriteError`] saying what was kept (the lines the progress record
        on disk counts: where the same command resumes); other errors unchanged."""
        if err.errno not in DISK_ERRNOS:
            return err
        return EmbeddingWriteError(err.errno, (
            f"{os.strerror(err.errno)} while {doing} {self.files.partial} ({self.saved:,} of {self.shape[0]:,} "
            "lines saved); free some space and run the same command again: it resumes from there"))

    def _save_progress(self) -> None:
        try:
            write_json_atomic(self.files.progress, {
                "format": MANIFEST_FORMAT, "lines_done": self.done, "identity": self.identity,
                "chunks": self.chunks, "current": self.chunk_state,
                "input": {"path": self.input_info["path"], "mtime_ns": self.input_info["mtime_ns"]}})
        except OSError as err:
            raise self.error(err, "saving the progress of") from err
        self.saved = self.done

    def append(self, rows: np.ndarray) -> None:
        """Writes the next `len(rows)` rows (a whole chunk), on disk before the progress record counts them with
        their checksum; the chunk's saved part is no longer needed."""
        rows = np.ascontiguousarray(np.asarray(rows).astype(self.dtype, copy=False))
        try:
            self.file.write_rows(self.done, rows, sync=True)
        except OSError as err:
            raise self.error(err, "writing") from err
        self.done += len(rows)
        self.chunks.append([self.done, hashlib.sha256(rows.data).hexdigest()])
        self.chunk_state = self._chunk_hash = None
        self._save_progress()

    def _part_offset(self) -> int:
        """Where the saved part of the chunk in progress is: the first row of `OUT.partial` not written yet."""
        return self.file.header + self.done * self.file.row_bytes

    def save_chunk_part(self, batches: int, rows: np.ndarray) -> bool:
        """Appends `rows` (float32, the encoder's rows of the chunk's batches up to `batches`, in batch order) to
        the chunk's saved part, fsynced, then records `batches` and the part's checksum in the progress record.
        False (nothing saved) when the part would not fit in the rows left: a float16 output's last chunks, whose
        float32 rows take twice the room (an interrupt then redoes the chunk)."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        kept = self.chunk_state["rows"] if self.chunk_state else 0
        size = kept * rows.shape[1] * 4
        if size + rows.nbytes > (self.shape[0] - self.done) * self.file.row_bytes:
            return False
        offset = self._part_offset()
        try:
            if self._chunk_hash is None or not kept:  # (a resumed run: the hash of what it kept)
                self._chunk_hash = hashlib.sha256()
                with open(self.files.partial, "rb") as f:
                    f.seek(offset)
                    self._chunk_hash.update(f.read(size))
            self.file.write_at(offset + size, rows, sync=True)
        except OSError as err:
            raise self.error(err, "saving the chunk in progress of") from err
        self._chunk_hash.update(rows.data)
        digest = self._chunk_hash.hexdigest()
        self.chunk_state = {"rows": kept + len(rows), "batches": batches, "sha256": digest, "in": "partial"}
        self._save_progress()
        return True

    def chunk_part(self, dim: int) -> tuple[int, np.ndarray] | None:
        """`(batches, rows)` of the chunk in progress as the interrupted run saved it (None when nothing was)."""
        if not self.chunk_state:
            return None
        rows = np.fromfile(self.files.partial, dtype=np.float32, count=self.chunk_state["rows"] * dim,
                           offset=self._part_offset())
        return self.chunk_state["batches"], rows.reshape(-1, dim)

    def close(self) -> None:
        self.file.close()

    def commit(self, **info) -> None:
        """`OUT.partial` becomes `OUT` by a rename, then its manifest is written (a kill in between leaves an `OUT`
        without manifest, which the next run recomputes); `info` (device, timing...) goes into the manifest."""
        self.close()
        files = self.files
        files.manifest.unlink(missing_ok=True)
        digest = file_sha256(files.partial)  # read back: what is on disk is what a later run checks
        os.replace(files.partial, files.output)
        st = files.output.stat()
        try:
            write_json_atomic(files.manifest, {
                "format": MANIFEST_FORMAT, "identity": self.identity,
                "output": {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "shape": list(self.shape),
                           "dtype": self.dtype.name, "sha256": digest},
                "input": {"path": self.input_info["path"], "mtime_ns": self.input_info["mtime_ns"]},
                **info, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            })
        except OSError as err:
            raise self.error(err, "writing the manifest of") from err
        files.progress.unlink(missing_ok=True)
        files.chunk.unlink(missing_ok=True)
        files.legacy_progress.unlink(missing_ok=True)
