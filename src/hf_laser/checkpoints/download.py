"""The original LASER2 / LASER3 files fetched from where Meta publishes them, checked, and converted once into a cache.

`fetch_models(["laser2", "wol_Latn"])` (`hf-laser download laser2 laser3 wol_Latn`) downloads into
`CACHE/originals/` the files laser_encoders downloads (`laser2.pt`, `laser2.spm`, `laser2.cvocab`;
`laser3-LANG.v1.pt` and, for the 35 students with their own, `laser3-LANG.v1.spm` / `.cvocab`), converts each model
into `CACHE/converted/NAME` (`hf_laser.checkpoints.convert`: the usual checked directory) and writes `CACHE/laser_model_set.json`
naming LASER2 and every converted student, so `LaserEncoder.from_pretrained(CACHE)` routes by language. A name given
to `from_pretrained` (`"laser2"`, `"laser3-wol_Latn"`) resolves to its converted directory the same way
([`resolve_named_model`]).

Checks: a file is written to `NAME.part` (an interrupted download resumes from there with an HTTP range request) and
renamed only when its size is the `Content-Length` the server announced and, where the server's `ETag` is a plain
MD5 (as the S3 bucket behind Meta's addresses gives for files uploaded whole), its MD5 is that; a `.pt` file's zip
CRCs are checked again by the converter. The sha256 of each finished file is kept in `CACHE/originals/SHA256SUMS`,
and a file found in the cache is checked against it before it is used.

Offline (or when the server cannot be reached), [`ModelsNotAvailable`] says which files to fetch, from where, and
into which directory to put them: the command then converts them without the network.

`CACHE` is `$HF_LASER_CACHE` or `~/.cache/hf_laser/laser`; the address is `$HF_LASER_DOWNLOAD_URL` or
`https://dl.fbaipublicfiles.com/nllb/laser` (laser_encoders' `LaserModelDownloader`).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import DISK_ERRNOS
from ..text.languages import flores_codes, laser_languages

BASE_URL = "https://dl.fbaipublicfiles.com/nllb/laser"
CHUNK = 1 << 20
TIMEOUT_S = 60


class ModelsNotAvailable(OSError):
    """The original files cannot be downloaded (offline, server error) and are not in the cache."""

class DownloadCheckFailed(OSError):
    """A downloaded file is not what the server announced (size, MD5) or what the cache recorded (sha256)."""

def cache_dir() -> Path:
    return Path(os.environ.get("HF_LASER_CACHE") or Path.home() / ".cache" / "hf_laser" / "laser")


def base_url() -> str:
    return (os.environ.get("HF_LASER_DOWNLOAD_URL") or BASE_URL).rstrip("/")


def model_files(name: str) -> list[str]:
    """The original files of `"laser2"` or a LASER3 student's FLORES code (`"wol_Latn"`), as laser_encoders
    downloads them: the checkpoint, then the SentencePiece model and its `.cvocab` (LASER2's for a student without
    its own)."""

    if name == "laser2":
        return ["laser2.pt", "laser2.spm", "laser2.cvocab"]
    language = laser_languages().get(name)
    if language is None or not language.laser3:
        raise ValueError(f"{name!r} is not a LASER3 student's FLORES-200 code")
    spm = f"laser3-{name}.v1" if language.own_spm else "laser2"
    return [f"laser3-{name}.v1.pt", f"{spm}.spm", f"{spm}.cvocab"]


def student_code(lang: str) -> str:
    """The FLORES-200 code of the LASER3 student for `lang` (code, ISO 639-3/1 or name); ValueError naming the
    choices when it names several students or none."""

    codes = [c for c in flores_codes(lang) if laser_languages()[c].laser3]
    if len(codes) == 1:
        return codes[0]
    if codes:
        raise ValueError(f"{lang!r} names {len(codes)} LASER3 students ({', '.join(codes)}): give one of these codes")
    known = flores_codes(lang)
    raise ValueError(f"no LASER3 student for {lang!r}" + (
        f" ({', '.join(known)} {'is' if len(known) == 1 else 'are'} covered by LASER2: download laser2)" if known
        else ": give a FLORES-200 code (wol_Latn), an ISO 639 code or an English name"))


def _read_sums(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        if name:
            sums[name] = digest
    return sums


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _progress(total: int | None, name: str, initial: int):
    # lazy: progress bars only
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, desc=name, leave=False,
                disable=not sys.stderr.isatty())


def download_file(name: str, originals: Path) -> Path:
    """`originals/name`, downloaded from [`base_url`] unless it is there with its recorded sha256 (see the module
    docstring for the checks). Raises [`ModelsNotAvailable`] when the server cannot be reached or answers with an
    error, [`DownloadCheckFailed`] when the file is not what was announced."""
    originals.mkdir(parents=True, exist_ok=True)
    target, part, sums_file = originals / name, originals / f"{name}.part", originals / "SHA256SUMS"
    sums = _read_sums(sums_file)
    if target.is_file():
        if name in sums and _sha256(target) != sums[name]:
            raise DownloadCheckFailed(f"{target} has changed since it was downloaded (its sha256 is not the one "
                                      f"recorded in {sums_file}): delete it and download again")
        if name not in sums:  # placed by hand (offline): recorded as it is
            _record(sums_file, name, _sha256(target))
        return target
    url = f"{base_url()}/{name}"
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)  # noqa: S310 - an https URL of our own
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the part file is already whole: its checks below decide
            response = None
        else:
            raise ModelsNotAvailable(f"{url}: the server answered {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        raise ModelsNotAvailable(f"{url} cannot be reached ({getattr(err, 'reason', err)})") from None
    etag = total = None
    if response is not None:
        with response:
            resumed = response.status == 206
            if not resumed:
                have = 0
            length = response.headers.get("Content-Length")
            total = int(length) + have if length and length.isdigit() else None
            etag = (response.headers.get("ETag") or "").strip('"')
            with open(part, "ab" if resumed else "wb") as out, _progress(total, name, have) as bar:
                try:
                    while chunk := response.read(CHUNK):
                        out.write(chunk)
                        bar.update(len(chunk))
                except (http.client.HTTPException, OSError) as err:
                    if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
                        raise
                    # what arrived stays in the .part file; the next run asks for the rest
                    out.flush()
                    raise DownloadCheckFailed(f"{url}: the connection broke after {out.tell():,} of {total or '?'} bytes "
                                              f"({type(err).__name__}): run the command again, it resumes") from None
    size = part.stat().st_size
    if total is not None and size != total:
        raise DownloadCheckFailed(f"{url}: got {size:,} bytes, the server announced {total:,} (the connection "
                                  "broke): run the command again, it resumes")
    if etag and re.fullmatch(r"[0-9a-f]{32}", etag):
        md5 = hashlib.md5(usedforsecurity=False)
        with open(part, "rb") as f:
            while chunk := f.read(CHUNK):
                md5.update(chunk)
        if md5.hexdigest() != etag:
            part.unlink()
            raise DownloadCheckFailed(f"{url}: the downloaded file's MD5 is not the server's ETag {etag}: it was "
                                      "damaged in transfer; run the command again")
    os.replace(part, target)
    _record(sums_file, name, _sha256(target))
    return target


def _record(sums_file: Path, name: str, digest: str) -> None:
    sums = {**_read_sums(sums_file), name: digest}
    tmp = sums_file.with_suffix(".tmp")
    tmp.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())), encoding="utf-8")
    os.replace(tmp, sums_file)


def _missing_message(missing: list[str], originals: Path, reason: str) -> str:
    return (f"the original LASER files cannot be downloaded ({reason}). Fetch them from {base_url()}/ "
            f"({', '.join(missing)}), put them in {originals} and run the same command again: it converts them "
            "without the network")


def fetch_models(names: list[str], *, say=print) -> Path:
    """Downloads (where needed) and converts `names` (`"laser2"`, LASER3 FLORES codes) into the cache, updates the
    cache's model set, and returns the cache directory (a model set: `LaserEncoder.from_pretrained(it)`)."""
    # lazy: checkpoints.convert imports numpy, torch, transformers
    # lazy: model_set imports numpy
    from ..model_set import read_model_set, write_model_set
    from .convert import convert

    root = cache_dir()
    originals = root / "originals"
    wanted = {name: model_files(name) for name in names}
    missing, reason = [], ""
    for files in wanted.values():
        for name in files:
            try:
                download_file(name, originals)
            except ModelsNotAvailable as err:
                missing.append(name)
                reason = str(err)
    if missing:
        raise ModelsNotAvailable(_missing_message(missing, originals, reason))
    for name, (checkpoint, spm, cvocab) in wanted.items():
        out = root / "converted" / ("laser2" if name == "laser2" else f"laser3-{name}")
        if (out / "config.json").is_file():
            continue
        say(f"converting {checkpoint} -> {out}")
        convert(originals / checkpoint, out, spm_model=originals / spm, spm_vocab=originals / cvocab, overwrite=True,
                language=None if name == "laser2" else name)
    default, students = (read_model_set(root) if (root / "laser_model_set.json").is_file() else (None, {}))
    laser2 = root / "converted" / "laser2"
    default = laser2 if (laser2 / "config.json").is_file() else default
    students = {**students, **{n: root / "converted" / f"laser3-{n}" for n in names if n != "laser2"}}
    write_model_set(root, default=default, students=students)
    return root


NAMED = re.compile(r"^(laser2|laser3-([a-z]{3}_[A-Z][a-z]{3}))$")


def resolve_named_model(name: str, *, download: bool = True) -> Path | None:
    """The converted directory of `"laser2"` or `"laser3-LANG"` (fetched and converted first when `download`), or
    None when `name` is not such a name."""
    match = NAMED.match(str(name))
    if match is None:
        return None
    key = match.group(2) or "laser2"
    out = cache_dir() / "converted" / ("laser2" if key == "laser2" else f"laser3-{key}")
    if not (out / "config.json").is_file():
        if not download:
            raise ModelsNotAvailable(_missing_message(model_files(key), cache_dir() / "originals", "not downloaded"))
        fetch_models([key], say=lambda m: print(f"hf_laser: {m}", file=sys.stderr))
    return out
