"""Errors and exit-status conventions, shared by the library and the command line (no heavy imports).

- [`UsageError`]: a mistake in what the user asked for (a missing file, not a model directory...); the command line
  reports it in one line with exit status 2.
- [`EmbeddingWriteError`]: a full disk or an I/O error while writing embeddings; the interrupted state is kept, so
  the same call resumes.
- [`run_cli`]: runs a command-line handler: user errors exit with 2, a full disk / I/O / network error or a missing
  optional dependency with 1, Ctrl-C with 130; anything else is a bug and keeps its traceback
  (`HF_LASER_TRACEBACK=1` shows the traceback of every error).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable

__all__ = ["UsageError", "EmbeddingWriteError", "DISK_ERRNOS", "one_line", "exit_status", "run_cli"]


class UsageError(ValueError):
    """A mistake in what the user asked for (missing file, not a model directory...): the command line reports it
    in one line and exits with status 2."""


class EmbeddingWriteError(OSError):
    """Disk full / I/O error while writing embeddings. The interrupted state is kept: the same call resumes."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


DISK_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EIO, errno.EFBIG,
                                    errno.EROFS) if e is not None)
# errors in what the user gave (a path): exit status 2; other OSErrors (network, disk) are the environment's: 1
_USER_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def one_line(err: BaseException) -> str:
    """An exception's message on one line (its type's name when it has none)."""
    text = " ".join(line.strip() for line in str(err).strip().splitlines() if line.strip())
    return text or type(err).__name__


def exit_status(err: BaseException) -> int:
    """1 for a full disk or an I/O error (`DISK_ERRNOS`), 2 for anything else (the user's mistake)."""
    return 1 if isinstance(err, OSError) and err.errno in DISK_ERRNOS else 2


def _caused_by_interrupt(err: BaseException) -> bool:
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def run_cli(who: str, fn: Callable[..., int], *args) -> int:
    """Runs a command-line handler, turning errors into one line on stderr: user errors (missing files, bad model
    directory, invalid values: `ValueError`, `FileNotFoundError`...) exit with 2; a full disk, an I/O or network
    error, or a missing optional dependency with 1; Ctrl-C with 130. Anything else is a bug and keeps its
    traceback. `HF_LASER_TRACEBACK=1` shows the traceback of every error."""
    if os.environ.get("HF_LASER_TRACEBACK"):
        return int(fn(*args) or 0)
    try:
        return int(fn(*args) or 0)
    except KeyboardInterrupt:
        print(f"{who}: interrupted (run the same command again to resume)", file=sys.stderr)
        return 130
    except ImportError as err:
        if _caused_by_interrupt(err):  # Ctrl-C inside a lazy import (transformers wraps it in an ImportError)
            print(f"{who}: interrupted (run the same command again to resume)", file=sys.stderr)
            return 130
        print(f"{who}: error: {one_line(err)}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"{who}: error: {one_line(err)}", file=sys.stderr)
        return 2 if isinstance(err, _USER_OS_ERRORS) and err.errno not in DISK_ERRNOS else 1
    except ValueError as err:  # UsageError and invalid values (empty input, bad language, unknown token ids...)
        print(f"{who}: error: {one_line(err)}", file=sys.stderr)
        return 2
