"""The original LASER2 / LASER3 files, and SONAR's text encoder, fetched from where Meta publishes them, checked, and
converted once into a cache.

`fetch_models(["laser2", "wol_Latn"])` (`hf-laser download laser2 laser3 wol_Latn`) downloads into
`CACHE/originals/` the files laser_encoders downloads (`laser2.pt`, `laser2.spm`, `laser2.cvocab`;
`laser3-LANG.v1.pt` and, for the 35 students with their own, `laser3-LANG.v1.spm` / `.cvocab`), converts each model
into `CACHE/converted/NAME` (`hf_laser.checkpoints.convert`: the usual checked directory) and writes `CACHE/laser_model_set.json`
naming LASER2 and every converted student, so `LaserEncoder.from_pretrained(CACHE)` routes by language. A name given
to `from_pretrained` (`"laser2"`, `"laser3-wol_Latn"`) resolves to its converted directory the same way
([`resolve_named_model`]).

Checks: a file is written to `NAME.part` (an interrupted download resumes from there with an HTTP range request,
continued only when the answer is a 206 whose `Content-Range` starts where the part file ends; a 416, or a range
from elsewhere, sets the part file aside and fetches the file whole) and renamed only when its size is the one the
server announced, where the server's `ETag` is a plain MD5 (as the S3 bucket behind Meta's addresses gives for files
uploaded whole) its MD5 is that, and a `.spm` loads as a SentencePiece model, a `.cvocab` reads as whole
`piece count` lines; a `.pt` file's zip CRCs, and the three files together, are checked again by the converter. The
sha256 of each finished file is kept in `CACHE/originals/SHA256SUMS`, and a file found in the cache is checked
against it before it is used. A file that fails a check (the conversion's included) is moved to
`CACHE/originals/rejected/` (the last one refused per name), so the next run fetches it again.

Limits: a body larger than the size the server announced, or than `$HF_LASER_DOWNLOAD_MAX_BYTES` ([`MAX_BYTES`],
4 GiB) where it announces none or more, is refused; so is a transfer slower than `$HF_LASER_DOWNLOAD_MIN_RATE`
bytes a second on average ([`MIN_RATE`], 32 KiB/s) once `$HF_LASER_DOWNLOAD_TIMEOUT` seconds ([`TIMEOUT_S`], 60: also
the limit to connect and for the headers, and of a silence) have passed: by `t` seconds, `MIN_RATE * (t - TIMEOUT)`
bytes must have arrived (a slow transfer's part file stays: the next run resumes it).

Offline (or when the server cannot be reached), [`ModelsNotAvailable`] says which files to fetch, from where, and
into which directory to put them: the command then converts them without the network.

SONAR ([`fetch_sonar`], `hf-laser download sonar`, `from_pretrained("sonar")`): the two files of SONAR's card
`text_sonar_basic_encoder.yaml` ([`SONAR_FILES`]: `sonar_text_encoder.pt`, about 3.1 GB, and
`sentencepiece.source.256000.model`), fetched the same way into `CACHE/originals/` with the same checks and limits
(the SentencePiece model must load; the checkpoint must read as SONAR's before the conversion, and convert), then
converted once into `CACHE/converted/sonar` (`hf_laser.checkpoints.sonar.convert_sonar`, with the card's
architecture's 16 heads). Before anything is fetched, one line says that SONAR's weights are CC BY-NC 4.0
(non-commercial use only); the converted directory's model card says it too. Once converted, the directory is used
as it is: no request, no check of the originals (which may then be deleted).

`CACHE` is `$HF_LASER_DOWNLOAD_CACHE` or `~/.cache/hf_laser/laser`; the address is `$HF_LASER_DOWNLOAD_URL` or
`https://dl.fbaipublicfiles.com/nllb/laser` (laser_encoders' `LaserModelDownloader`), and for SONAR
`$HF_LASER_SONAR_DOWNLOAD_URL` or `https://dl.fbaipublicfiles.com/SONAR` (the card's addresses).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..defaults import DOWNLOAD_CACHE_ENV, cache_from_env
from ..errors import DISK_ERRNOS, UsageError
from ..text.bpe import read_fields
from ..text.languages import flores_codes, laser_languages

BASE_URL = "https://dl.fbaipublicfiles.com/nllb/laser"
CHUNK = 1 << 20
TIMEOUT_S = 60  # seconds of grace: to connect, for the headers, and before the minimum rate applies
# the largest file: SONAR's text encoder, 766,091,264 float32 parameters (24 x 1,024, ffn 8,192, 256,206 ids), about
# 3.07 GB (LASER's largest are under 1 GB); also the cap where the server announces no size
MAX_BYTES = 4 << 30
MIN_RATE = 32 << 10  # bytes a second on average, after the grace (a 1 GB file: at most 9 hours; SONAR's: 27)

SONAR_URL = "https://dl.fbaipublicfiles.com/SONAR"  # facebookresearch/SONAR: sonar/cards/text_sonar_basic_encoder.yaml
SONAR_CHECKPOINT = "sonar_text_encoder.pt"
SONAR_SPM = "sentencepiece.source.256000.model"
SONAR_FILES = [SONAR_CHECKPOINT, SONAR_SPM]
SONAR_HEADS = 16  # the card's model_arch "basic" (sonar.models.sonar_text.config): not in the weights
SONAR_LICENCE = ("SONAR's weights are published by Meta under CC BY-NC 4.0: non-commercial use only "
                 "(https://creativecommons.org/licenses/by-nc/4.0/)")


class ModelsNotAvailable(OSError):
    """The original files cannot be downloaded (offline, server error) and are not in the cache."""


class ServerUnreachable(ModelsNotAvailable):
    """The server cannot be reached at all (offline, no DNS, refused): no other file of it is tried."""

class DownloadCheckFailed(OSError):
    """A downloaded file is not what the server announced (size, MD5) or what the cache recorded (sha256)."""

def cache_dir() -> Path:
    """`$HF_LASER_DOWNLOAD_CACHE` or `~/.cache/hf_laser/laser` (the old `$HF_LASER_CACHE` with a FutureWarning)."""
    return Path(cache_from_env(DOWNLOAD_CACHE_ENV) or Path.home() / ".cache" / "hf_laser" / "laser")


def base_url() -> str:
    return (os.environ.get("HF_LASER_DOWNLOAD_URL") or BASE_URL).rstrip("/")


def sonar_base_url() -> str:
    return (os.environ.get("HF_LASER_SONAR_DOWNLOAD_URL") or SONAR_URL).rstrip("/")


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


def _limit(variable: str, default: float) -> float:
    value = os.environ.get(variable)
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number > 0:
        raise ValueError(f"${variable} is {value[:40]!r}: expected a positive number")
    return number


def limits() -> tuple[int, float, float]:
    """(largest file in bytes, minimum rate in bytes per second, seconds of grace): `$HF_LASER_DOWNLOAD_MAX_BYTES`,
    `$HF_LASER_DOWNLOAD_MIN_RATE`, `$HF_LASER_DOWNLOAD_TIMEOUT`, or [`MAX_BYTES`], [`MIN_RATE`], [`TIMEOUT_S`]."""
    return (int(_limit("HF_LASER_DOWNLOAD_MAX_BYTES", MAX_BYTES)), _limit("HF_LASER_DOWNLOAD_MIN_RATE", MIN_RATE),
            _limit("HF_LASER_DOWNLOAD_TIMEOUT", TIMEOUT_S))


class _Deadline:
    """Shuts the connection down once fewer than `min_rate * (elapsed - grace)` bytes have arrived: the headers and
    the first bytes within `grace` seconds, then on average at least `min_rate` bytes a second (a trickle that keeps
    the socket's own timeout from firing ends too)."""

    def __init__(self, min_rate: float, grace: float):
        self.min_rate, self.grace = min_rate, grace
        self.start = time.monotonic()
        self.received = 0
        self.sock = None  # the connection's socket, set when it connects
        self.expired = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hf-laser-download-deadline", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(min(0.25, self.grace / 4)):
            if self.received < self.min_rate * (time.monotonic() - self.start - self.grace):
                self.expired = True
                sock = self.sock
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def close(self) -> None:
        self._done.set()
        self._thread.join()


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies, redirects, TLS as usual) whose connections hand their socket to `deadline`."""

    def watched(base):
        class Watched(base):
            def connect(self):
                super().connect()
                deadline.sock = self.sock

        return Watched

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(watched(http.client.HTTPConnection), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(watched(http.client.HTTPSConnection), req, context=self._context)

    return urllib.request.build_opener(HTTP, HTTPS)


def _move_aside(path: Path, originals: Path, name: str) -> Path:
    """`path` moved to `originals/rejected/name` (one kept per name: the last one refused), its sha256 forgotten."""
    rejected = originals / "rejected"
    rejected.mkdir(exist_ok=True)
    os.replace(path, rejected / name)
    sums_file = originals / "SHA256SUMS"
    if name in _read_sums(sums_file):
        sums = _read_sums(sums_file)
        del sums[name]
        _write_sums(sums_file, sums)
    return rejected / name


class _Oversize(DownloadCheckFailed):
    """More bytes arrived than the file may have."""


class _Restart(Exception):
    """The answer to a range request does not continue the partial file: fetch the file whole."""


def _content_range(value: str | None) -> tuple[int, int, int | None] | None:
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (value or "").strip())
    if match is None:
        return None
    first, last, total = match.groups()
    return int(first), int(last), None if total == "*" else int(total)


def _transfer(url: str, part: Path, have: int, name: str) -> tuple[str, int | None]:
    """Writes the body of `url` (from byte `have` when the part file has that many) to `part`; (ETag, total size).
    Raises [`_Restart`] when a resume is not answered with the range asked for."""
    max_bytes, min_rate, grace = limits()
    deadline = _Deadline(min_rate, grace)
    slow = (f"{url}: fewer than {min_rate:,.0f} bytes a second arrived (after {grace:g} s of grace): the server or "
            "the network is too slow; run the command again (it resumes), or lower $HF_LASER_DOWNLOAD_MIN_RATE / "
            "raise $HF_LASER_DOWNLOAD_TIMEOUT")
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        try:
            response = _opener(deadline).open(request, timeout=grace)
        except urllib.error.HTTPError as err:
            err.close()
            if err.code == 416 and have:  # the range asked for is not in the file: whatever the part is, start over
                raise _Restart(f"answered {err.code} to a resume from byte {have:,}") from None
            raise ModelsNotAvailable(f"{url}: the server answered {err.code} {str(err.reason)[:200]}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            if deadline.expired:
                raise DownloadCheckFailed(slow) from None
            raise ServerUnreachable(f"{url} cannot be reached ({str(getattr(err, 'reason', err))[:200]})") from None
        with response:
            length = response.headers.get("Content-Length")
            length = int(length) if length and length.isdigit() else None
            if response.status == 206 and have:
                span = _content_range(response.headers.get("Content-Range"))
                if span is None or span[0] != have or (length is not None and length != span[1] - span[0] + 1):
                    raise _Restart(f"answered a resume from byte {have:,} with the range "
                                   f"{str(response.headers.get('Content-Range'))[:100]!r}")
                total = span[2] if span[2] is not None else (have + length if length is not None else None)
                mode = "ab"
            elif response.status == 200:
                have, total, mode = 0, length, "wb"
            else:
                raise ModelsNotAvailable(f"{url}: the server answered {response.status} to "
                                         f"{'a resume' if have else 'a download'}")
            if total is not None and total > max_bytes:
                raise DownloadCheckFailed(f"{url}: the server announces {total:,} bytes, more than any file "
                                          f"hf-laser downloads ({max_bytes:,}, $HF_LASER_DOWNLOAD_MAX_BYTES): refused")
            cap = total if total is not None else max_bytes
            etag = (response.headers.get("ETag") or "").strip('"')
            with open(part, mode) as out, _progress(total, name, have) as bar:
                try:
                    while chunk := response.read1(CHUNK):
                        out.write(chunk)
                        deadline.received += len(chunk)
                        bar.update(len(chunk))
                        if out.tell() > cap:
                            raise _Oversize(
                                f"more than {cap:,} bytes arrived ("
                                + ("the size the server announced" if total is not None else
                                   "$HF_LASER_DOWNLOAD_MAX_BYTES: the server did not announce a size")
                                + ")")
                except _Oversize:
                    raise
                except (http.client.HTTPException, OSError) as err:
                    if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
                        raise
                    # what arrived stays in the .part file; the next run asks for the rest
                    out.flush()
                    if deadline.expired:
                        raise DownloadCheckFailed(slow) from None
                    raise DownloadCheckFailed(f"{url}: the connection broke after {out.tell():,} of {total or '?'} "
                                              f"bytes ({type(err).__name__}): run the command again, it resumes"
                                              ) from None
            if deadline.expired:
                raise DownloadCheckFailed(slow)
            return etag, total
    finally:
        deadline.close()


def _check_content(name: str, path: Path) -> str | None:
    """Why the file cannot be what its name says (a SentencePiece model, a fairseq dictionary), or None."""
    if name.endswith((".spm", ".model")):
        # lazy: sentencepiece only for a downloaded .spm
        import sentencepiece

        try:
            sentencepiece.SentencePieceProcessor().LoadFromSerializedProto(path.read_bytes())
        except (RuntimeError, OSError) as err:
            return f"it is not a SentencePiece model ({str(err).splitlines()[0][:200]})"
    elif name.endswith(".cvocab"):
        try:
            text = path.read_text(encoding="utf-8")
            if not text.endswith("\n"):
                return "it is not a whole fairseq dictionary (its last line is cut)"
            for fields in read_fields(path, 2, "piece count"):
                int(fields[1])
        except (ValueError, UnicodeDecodeError) as err:
            return f"it is not a fairseq dictionary ('piece count' lines: {str(err)[:200]})"
    return None


def download_file(name: str, originals: Path, base: str | None = None) -> Path:
    """`originals/name`, downloaded from `base` ([`base_url`] when None) unless it is there with its recorded sha256
    (see the module docstring for the checks and the limits). Raises [`ModelsNotAvailable`] when the server cannot be
    reached or answers with an error, [`DownloadCheckFailed`] when the file is not what was announced, too large or
    too slow (a file that fails a check is moved to `originals/rejected/`: the next run fetches it again)."""
    originals.mkdir(parents=True, exist_ok=True)
    target, part, sums_file = originals / name, originals / f"{name}.part", originals / "SHA256SUMS"
    sums = _read_sums(sums_file)
    if target.is_file():
        if name in sums and _sha256(target) != sums[name]:
            aside = _move_aside(target, originals, name)
            raise DownloadCheckFailed(f"{target} has changed since it was downloaded (its sha256 is not the one "
                                      f"recorded in {sums_file}): moved to {aside}; run the command again, it is "
                                      "fetched again")
        if name not in sums:  # placed by hand (offline): recorded as it is
            _record(sums_file, name, _sha256(target))
        return target
    url = f"{base or base_url()}/{name}"

    def refuse(why: str) -> DownloadCheckFailed:
        aside = _move_aside(part, originals, name)
        return DownloadCheckFailed(f"{url}: {why}; moved to {aside}: run the command again, it is fetched again")

    try:
        try:
            etag, total = _transfer(url, part, part.stat().st_size if part.is_file() else 0, name)
        except _Restart as restart:  # the part file cannot be continued: set aside, the file fetched whole
            if part.is_file():
                _move_aside(part, originals, name)
            try:
                etag, total = _transfer(url, part, 0, name)
            except _Restart:  # not asked for a range: cannot happen
                raise DownloadCheckFailed(f"{url}: {restart}") from None
    except _Oversize as err:
        raise refuse(str(err)) from None
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
            raise refuse(f"the downloaded file's MD5 is not the server's ETag {etag}: it was damaged in transfer")
    why = _check_content(name, part)
    if why is not None:
        raise refuse(f"the downloaded file ({size:,} bytes) is refused: {why}")
    os.replace(part, target)
    _record(sums_file, name, _sha256(target))
    return target


def _record(sums_file: Path, name: str, digest: str) -> None:
    _write_sums(sums_file, {**_read_sums(sums_file), name: digest})


def _write_sums(sums_file: Path, sums: dict[str, str]) -> None:
    tmp = sums_file.with_suffix(".tmp")
    tmp.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())), encoding="utf-8")
    os.replace(tmp, sums_file)


AGAIN = "run the same command again"  # how the command line goes on once the files are in place


def _missing_message(missing: list[str], originals: Path, reason: str, *, what: str = "the original LASER files",
                     base: str | None = None, again: str = AGAIN) -> str:
    return (f"{what} cannot be downloaded ({reason}). Fetch them from {base or base_url()}/ "
            f"({', '.join(dict.fromkeys(missing))}), put them in {originals} and {again}: it converts them without "
            "the network")


def _again(name: str) -> str:
    """How to go on once the files are in place, for a name given to `from_pretrained` or `--model`."""
    return f"load {name!r} again (from_pretrained({name!r}), or --model {name})"


def _fetch_all(files: list[str], originals: Path, base: str | None = None) -> tuple[list[str], str]:
    """Downloads each of `files` once (where needed); `(the files that could not be, why)`. Once the server cannot
    be reached at all, the files not in the cache are not tried (each try would wait for the network again)."""
    missing, reason, unreachable = [], "", False
    for name in dict.fromkeys(files):
        if unreachable and not (originals / name).is_file():
            missing.append(name)
            continue
        try:
            download_file(name, originals, base)
        except ModelsNotAvailable as err:
            missing.append(name)
            reason = str(err)
            unreachable = unreachable or isinstance(err, ServerUnreachable)
    return missing, reason


def fetch_models(names: list[str], *, say=print, again: str = AGAIN) -> Path:
    """Downloads (where needed) and converts `names` (`"laser2"`, LASER3 FLORES codes) into the cache, updates the
    cache's model set, and returns the cache directory (a model set: `LaserEncoder.from_pretrained(it)`).
    [`ModelsNotAvailable`] names each file to fetch once, and how to go on (`again`)."""
    root = cache_dir()
    originals = root / "originals"
    wanted = {name: model_files(name) for name in names}
    missing, reason = _fetch_all([f for files in wanted.values() for f in files], originals)
    if missing:  # (said before torch is imported: offline, at once)
        raise ModelsNotAvailable(_missing_message(missing, originals, reason, again=again))
    # lazy: model_set imports numpy
    from ..model_set import read_model_set, write_model_set
    # lazy: checkpoints.convert imports numpy, torch, transformers
    from .convert import NotALaserCheckpoint, TokenizerMismatch, convert
    # lazy: fairseq_checkpoint imports torch
    from .fairseq_checkpoint import NotALaser3Checkpoint

    for name, (checkpoint, spm, cvocab) in wanted.items():
        out = root / "converted" / ("laser2" if name == "laser2" else f"laser3-{name}")
        if (out / "config.json").is_file():
            continue
        say(f"converting {checkpoint} -> {out}")
        try:
            # laser_encoders' pipeline (which this set is) normalises punctuation with English rules for LASER2 too
            convert(originals / checkpoint, out, spm_model=originals / spm, spm_vocab=originals / cvocab,
                    overwrite=True, language=None if name == "laser2" else name, laser2_punct_lang="en")
        except (NotALaserCheckpoint, NotALaser3Checkpoint, TokenizerMismatch) as err:
            raise _reject(originals, [checkpoint, spm, cvocab], name, err) from None
    default, students = (read_model_set(root) if (root / "laser_model_set.json").is_file() else (None, {}))
    laser2 = root / "converted" / "laser2"
    default = laser2 if (laser2 / "config.json").is_file() else default
    students = {**students, **{n: root / "converted" / f"laser3-{n}" for n in names if n != "laser2"}}
    write_model_set(root, default=default, students=students)
    return root


def _reject(originals: Path, files: list[str], what: str, err: Exception) -> DownloadCheckFailed:
    """The downloaded `files` passed every check a file can be given alone, and the conversion refuses them. Kept,
    they would be refused again on every run without a request: set aside, the next run fetches them again."""
    files = [f for f in files if (originals / f).is_file()]
    for f in files:
        _move_aside(originals / f, originals, f)
    return DownloadCheckFailed(
        f"{what}: the conversion refuses the downloaded files ({str(err)[:500]}); {', '.join(files)} moved "
        f"to {originals / 'rejected'}: run the command again, they are fetched again")


def sonar_dir() -> Path:
    """Where SONAR's text encoder is converted: `CACHE/converted/sonar`."""
    return cache_dir() / "converted" / "sonar"


def fetch_sonar(*, say=print, again: str = AGAIN) -> Path:
    """SONAR's text encoder, converted once into [`sonar_dir`] and returned; when it is not there, [`SONAR_LICENCE`]
    is said first, then [`SONAR_FILES`] are downloaded from [`sonar_base_url`] (where needed) and converted with
    the card's 16 heads. [`ModelsNotAvailable`] (what to fetch and where to put it) when they cannot be downloaded,
    [`DownloadCheckFailed`] when a file is refused (moved to `originals/rejected/`: the next run fetches it again)."""
    out = sonar_dir()
    if (out / "config.json").is_file():
        return out
    say(SONAR_LICENCE)
    originals = cache_dir() / "originals"
    missing, reason = _fetch_all(SONAR_FILES, originals, sonar_base_url())
    if missing:
        raise ModelsNotAvailable(_missing_message(missing, originals, reason, what="SONAR's text encoder",
                                                  base=sonar_base_url(), again=again))
    # lazy: checkpoints.sonar imports torch, transformers
    from .sonar import NotASonarCheckpoint, convert_sonar, load_sonar_state

    checkpoint, spm = originals / SONAR_CHECKPOINT, originals / SONAR_SPM
    try:  # read alone first (memory-mapped, cheap), so that a checkpoint at fault does not set the other file aside
        load_sonar_state(checkpoint)
    except NotASonarCheckpoint as err:
        raise _reject(originals, [SONAR_CHECKPOINT], "sonar", err) from None
    say(f"converting {SONAR_CHECKPOINT} -> {out}")
    try:
        convert_sonar(checkpoint, spm, out, num_attention_heads=SONAR_HEADS, overwrite=True)
    except NotASonarCheckpoint as err:  # names, shapes, or a vocabulary the two files disagree on
        raise _reject(originals, SONAR_FILES, "sonar", err) from None
    except UsageError as err:  # the tokenizer refuses the SentencePiece model
        raise _reject(originals, [SONAR_SPM], "sonar", err) from None
    return out


NAMED = re.compile(r"^(laser2|laser3-([a-z]{3}_[A-Z][a-z]{3})|sonar)$")


def resolve_named_model(name: str, *, download: bool = True) -> Path | None:
    """The converted directory of `"laser2"`, `"laser3-LANG"` or `"sonar"` (fetched and converted first when
    `download`), or None when `name` is not such a name."""
    match = NAMED.match(str(name))
    if match is None:
        return None
    if name == "sonar":
        if not (sonar_dir() / "config.json").is_file():
            if not download:
                raise ModelsNotAvailable(_missing_message(SONAR_FILES, cache_dir() / "originals", "not downloaded",
                                                          what="SONAR's text encoder", base=sonar_base_url(),
                                                          again=_again(name)))
            fetch_sonar(say=lambda m: print(f"hf_laser: {m}", file=sys.stderr), again=_again(name))
        return sonar_dir()
    key = match.group(2) or "laser2"
    out = cache_dir() / "converted" / ("laser2" if key == "laser2" else f"laser3-{key}")
    if not (out / "config.json").is_file():
        if not download:
            raise ModelsNotAvailable(_missing_message(model_files(key), cache_dir() / "originals", "not downloaded",
                                                      again=_again(name)))
        fetch_models([key], say=lambda m: print(f"hf_laser: {m}", file=sys.stderr), again=_again(name))
    return out
