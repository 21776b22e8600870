"""A Hub repository (`owner/name`, at a revision) as a local directory: what `LaserEncoder.from_pretrained("owner/name")`,
`--model owner/name` and `hf-laser download owner/name` open, a model directory or a whole model set (its
`laser_model_set.json` and every member), SONAR's included.

`huggingface_hub.snapshot_download` fetches it into the Hub cache (`$HF_HOME`, `HF_ENDPOINT` honoured), file by file,
resumable, every file checked by the Hub client; a revision already there is used without a request when offline.
What it fetches is bounded: the repository's files are listed first and their total size must be within
`$HF_LASER_DOWNLOAD_MAX_BYTES` (the original models' cap, 4 GiB); a model set's members must lie inside the
repository (a set file from the Hub never points elsewhere on this machine). Failures are one line: an unknown
repository or revision, no network and nothing cached, a set that points outside.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import UsageError, one_line
from .download import limits as download_limits

__all__ = ["HubModelUnavailable", "hub_snapshot"]

SET_FILE = "laser_model_set.json"


class HubModelUnavailable(UsageError, OSError):
    """The Hub repository cannot be had (unknown, unreachable and not cached, too large, or unsafe)."""


def hub_snapshot(repo_id: str, *, revision: str | None = None, token=None, cache_dir=None) -> Path:
    """The local directory of `repo_id` at `revision` (default: its main branch), fetched when needed
    (module docstring)."""
    # lazy: the Hub client, needed for Hub ids only
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo_id}" + (f" (revision {revision})" if revision else "")
    try:
        local = _cached(repo_id, revision, cache_dir)
        if local is None:
            api = HfApi()
            info = api.model_info(repo_id, revision=revision, files_metadata=True, token=token)
            _check_size(info, where)
            # by the revision asked for (a branch is recorded in the cache, so that it is found offline later)
            local = Path(snapshot_download(repo_id, revision=revision, token=token, cache_dir=cache_dir))
            if local.name != info.sha:  # the branch moved on between the listing and the download
                _check_size(api.model_info(repo_id, revision=local.name, files_metadata=True, token=token), where)
    except HubModelUnavailable:
        raise
    except RepositoryNotFoundError:
        raise HubModelUnavailable(f"{where}: no such model on the Hub (or it is private and no token allows it)"
                                  ) from None
    except RevisionNotFoundError:
        raise HubModelUnavailable(f"{where}: the repository has no such revision") from None
    except (OfflineModeIsEnabled, LocalEntryNotFoundError) as err:
        raise HubModelUnavailable(f"{where}: not in the Hub cache, and the Hub is not reachable "
                                  f"({one_line(err).split('. ')[0]})") from None
    except (HfHubHTTPError, OSError) as err:
        raise HubModelUnavailable(f"{where}: the Hub could not be reached or refused it ({one_line(err)})") from None
    except Exception as err:  # noqa: BLE001 - the HTTP client's own errors (connection refused, timeouts...)
        if type(err).__module__.split(".")[0] not in ("httpx", "httpx2", "httpcore", "httpcore2", "requests",
                                                      "urllib3", "huggingface_hub"):
            raise
        raise HubModelUnavailable(f"{where}: the Hub could not be reached ({type(err).__name__}: "
                                  f"{one_line(err)})") from None
    _check_set(local, where)
    return local


def _check_size(info, where: str) -> None:
    limit = download_limits()[0]
    unknown = [s.rfilename for s in (info.siblings or []) if s.size is None]
    if unknown:  # (the Hub gives every size with files_metadata; without them nothing bounds the download)
        raise HubModelUnavailable(f"{where}: the Hub did not give the size of {len(unknown)} file(s) "
                                  f"({', '.join(unknown[:3])}); hf_laser fetches only what it can bound")
    total = sum(int(s.size) for s in (info.siblings or []))
    if total > limit:
        raise HubModelUnavailable(f"{where}: {total:,} bytes, more than the {limit:,} a download may take "
                                  f"($HF_LASER_DOWNLOAD_MAX_BYTES)")


def _cached(repo_id: str, revision: str | None, cache_dir) -> Path | None:
    """The cached snapshot of a commit id, or of any revision when offline (`HF_HUB_OFFLINE`); None otherwise (a
    branch is looked up again when online: it may have moved)."""
    # lazy: the Hub client, needed for Hub ids only
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    is_commit = revision is not None and len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)
    if not (is_commit or constants.HF_HUB_OFFLINE):
        return None
    try:
        local = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True))
    except LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise
        return None
    if not is_commit:  # a branch as it was when fetched: say so, the Hub may hold a newer one
        print(f"hf_laser: offline (HF_HUB_OFFLINE): {repo_id} is the cached snapshot {local.name} of "
              f"{revision or 'main'}, not checked against the Hub", file=sys.stderr)
    return local


def _check_set(local: Path, where: str) -> None:
    """A model set from the Hub names members inside its own repository only."""
    set_file = local / SET_FILE
    if not set_file.is_file():
        return
    if set_file.stat().st_size > 1_000_000:
        raise HubModelUnavailable(f"{where}: {SET_FILE} is {set_file.stat().st_size:,} bytes; a set file is small")
    try:
        content = json.loads(set_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise HubModelUnavailable(f"{where}: {SET_FILE} is not valid JSON ({one_line(err)})") from None
    members = [content.get("default")] + list((content.get("students") or {}).values()) \
        if isinstance(content, dict) and isinstance(content.get("students") or {}, dict) else []
    root = os.path.realpath(local)
    for member in members:
        if member is None:
            continue
        if not isinstance(member, str) or os.path.isabs(member) or not os.path.realpath(
                os.path.join(root, member)).startswith(root + os.sep):
            raise HubModelUnavailable(f"{where}: {SET_FILE} names a member outside the repository ({member!r}); a "
                                      f"model set from the Hub holds its members")
