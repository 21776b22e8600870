"""`hf-laser download sonar` / `from_pretrained("sonar")` (issue #67, item 4) against a local HTTP server serving
SONAR's two files in the original layout (`sonar_text_encoder.pt`, `sentencepiece.source.256000.model`: here the
SONAR fixtures' small random encoder and stand-in SentencePiece model under the real names): download, conversion
into `CACHE/converted/sonar`, reuse without a request, the licence said before the first request, the offline
message, and files that fail a check moved aside and fetched again."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from hf_laser import LaserEncoder
from hf_laser.checkpoints.download import DownloadCheckFailed, ModelsNotAvailable, fetch_sonar
from hf_laser.checkpoints.sonar import convert_sonar
from hf_laser.cli import main as cli_main
from hf_laser.commands.download import parse_models
from hf_laser.models import resolve

FIXTURES = Path(__file__).parent / "fixtures" / "sonar"
CHECKPOINT, SPM = "sonar_text_encoder.pt", "sentencepiece.source.256000.model"
LINES = ["Bonjour le monde.", "Hello world."]


class Handler(SimpleHTTPRequestHandler):
    """Serves the directory with an MD5 ETag and byte ranges, as S3 does; `server.faults[name]` breaks the next answer
    for that file: `truncate` (the whole size announced, half sent: the connection breaks), `cut` (the first half
    announced and sent, no ETag: a short file nothing but its contents can refuse), `garbage` (as many bytes of junk,
    no ETag)."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        self.server.events.append(("request", self.path))
        self.server.ranges.append(self.headers.get("Range"))
        path = Path(self.server.root) / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        fault = self.server.faults.pop(path.name, None)
        if fault == "cut":
            data = data[: len(data) // 2]
        elif fault == "garbage":
            data = bytes(range(256)) * (len(data) // 256)
        start = int(self.headers["Range"].split("=")[1].split("-")[0]) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        if fault not in ("cut", "garbage"):
            self.send_header("ETag", f'"{hashlib.md5(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        self.wfile.write(body[: len(body) // 2] if fault == "truncate" else body)


class Events(io.TextIOBase):
    """A stderr that puts what is written in the server's list of events (requests and lines, in order)."""

    def __init__(self, events: list):
        self.events = events

    def write(self, text: str) -> int:
        self.events.append(("stderr", text))
        return len(text)

    def isatty(self) -> bool:
        return False


@pytest.fixture
def server(tmp_path, monkeypatch):
    root = tmp_path / "published"
    root.mkdir()
    shutil.copyfile(FIXTURES / "small.pt", root / CHECKPOINT)
    shutil.copyfile(FIXTURES / "stand-in.spm.model", root / SPM)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.root, httpd.events, httpd.ranges, httpd.faults = root, [], [], {}
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_LASER_SONAR_DOWNLOAD_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setenv("HF_LASER_DOWNLOAD_URL", "http://127.0.0.1:9")  # LASER's address is not SONAR's
    monkeypatch.setenv("HF_LASER_DOWNLOAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # no local directory named sonar
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def requests(server) -> list[str]:
    return [what for kind, what in server.events if kind == "request"]


def converted(tmp_path) -> Path:
    return tmp_path / "cache" / "converted" / "sonar"


def originals(tmp_path) -> Path:
    return tmp_path / "cache" / "originals"


@pytest.fixture
def reference(tmp_path):
    """The same two files converted by hand with the heads SONAR's card gives its architecture (16)."""
    out = tmp_path / "reference"
    convert_sonar(FIXTURES / "small.pt", FIXTURES / "stand-in.spm.model", out, num_attention_heads=16)
    return LaserEncoder.from_pretrained(out).encode(LINES, lang=["fr", "en"])


def test_download_sonar_converts_once_and_reuses_it_without_a_request(server, tmp_path, capsys, reference):
    assert cli_main(["download", "sonar"]) == 0
    err = capsys.readouterr().err
    assert f"ready: {converted(tmp_path)}" in err and "--model sonar" in err
    assert sorted(requests(server)) == [f"/{SPM}", f"/{CHECKPOINT}"]
    config = json.loads((converted(tmp_path) / "config.json").read_text())
    assert config["model_type"] == "sonar" and config["encoder_attention_heads"] == 16
    assert "license: cc-by-nc-4.0" in (converted(tmp_path) / "README.md").read_text()
    sums = (originals(tmp_path) / "SHA256SUMS").read_text()
    assert f"{hashlib.sha256((server.root / CHECKPOINT).read_bytes()).hexdigest()}  {CHECKPOINT}" in sums
    # a second run, and the name given to from_pretrained, send no request
    server.events.clear()
    assert cli_main(["download", "sonar"]) == 0
    assert resolve("sonar").kind == "download" and resolve("sonar").location == str(converted(tmp_path))
    encoder = LaserEncoder.from_pretrained("sonar")
    assert requests(server) == []
    np.testing.assert_allclose(encoder.encode(LINES, lang=["fra_Latn", "eng_Latn"]), reference, atol=1e-6, rtol=0)


def test_the_licence_is_said_before_the_first_request(server, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Events(server.events))
    assert cli_main(["download", "sonar"]) == 0
    first_request = next(i for i, (kind, _) in enumerate(server.events) if kind == "request")
    said = "".join(text for kind, text in server.events[:first_request] if kind == "stderr")
    assert said.count("\n") == 1 and "CC BY-NC 4.0" in said and "non-commercial use only" in said


def test_from_pretrained_sonar_downloads_on_first_use(server, tmp_path, capsys, reference):
    with pytest.raises(ModelsNotAvailable, match="not downloaded"):
        resolve("sonar", download=False)
    assert requests(server) == []
    encoder = LaserEncoder.from_pretrained("sonar")
    err = capsys.readouterr().err
    assert "hf_laser: SONAR's weights are published by Meta under CC BY-NC 4.0: non-commercial use only" in err
    assert sorted(requests(server)) == [f"/{SPM}", f"/{CHECKPOINT}"]
    np.testing.assert_allclose(encoder.encode(LINES, lang=["fr", "en"]), reference, atol=1e-6, rtol=0)


def test_the_command_line_takes_sonar_as_a_model(server, tmp_path, capsys, reference):
    text = tmp_path / "fr.txt"
    text.write_text("Bonjour le monde.\n", encoding="utf-8")
    assert cli_main(["embed", "--model", "sonar", "--lang", "fr", "-i", str(text), "-o", str(tmp_path / "fr.npy")]) \
        == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.load(tmp_path / "fr.npy"), reference[:1], atol=1e-6, rtol=0)


def test_offline_says_what_to_fetch_and_where_then_converts_without_network(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_LASER_SONAR_DOWNLOAD_URL", "http://127.0.0.1:9")  # nothing listens there
    assert cli_main(["download", "sonar"]) == 2
    licence, error = capsys.readouterr().err.strip().splitlines()  # the licence line, then the one-line error
    assert "non-commercial use only" in licence
    assert ("SONAR's text encoder cannot be downloaded" in error and "http://127.0.0.1:9/ " in error
            and f"({CHECKPOINT}, {SPM})" in error and f"put them in {originals(tmp_path)}" in error)
    with pytest.raises(ModelsNotAvailable, match="cannot be downloaded"):
        LaserEncoder.from_pretrained("sonar")
    for name in (CHECKPOINT, SPM):  # fetched by hand
        shutil.copyfile(server.root / name, originals(tmp_path) / name)
    assert cli_main(["download", "sonar"]) == 0
    assert (converted(tmp_path) / "model.safetensors").is_file() and requests(server) == []


def test_a_cut_checkpoint_is_moved_aside_and_fetched_again(server, tmp_path):
    """Announced and sent at half its size without an ETag, the checkpoint passes every check a file gets alone; the
    conversion's reading refuses it, and only it is set aside."""
    server.faults[CHECKPOINT] = "cut"
    with pytest.raises(DownloadCheckFailed, match=f"{CHECKPOINT} moved to .*rejected.*fetched again"):
        fetch_sonar(say=lambda m: None)
    assert (originals(tmp_path) / "rejected" / CHECKPOINT).is_file()
    assert not (originals(tmp_path) / CHECKPOINT).exists() and CHECKPOINT not in \
        (originals(tmp_path) / "SHA256SUMS").read_text()
    assert not converted(tmp_path).exists()
    server.events.clear()
    assert fetch_sonar(say=lambda m: None) == converted(tmp_path)
    assert requests(server) == [f"/{CHECKPOINT}"]  # the SentencePiece model was kept
    assert (originals(tmp_path) / CHECKPOINT).read_bytes() == (server.root / CHECKPOINT).read_bytes()


def test_a_poisoned_sentencepiece_model_is_moved_aside_and_fetched_again(server, tmp_path):
    server.faults[SPM] = "garbage"
    with pytest.raises(DownloadCheckFailed, match="not a SentencePiece model.*fetched again"):
        fetch_sonar(say=lambda m: None)
    assert (originals(tmp_path) / "rejected" / SPM).is_file() and not (originals(tmp_path) / SPM).exists()
    server.events.clear()
    fetch_sonar(say=lambda m: None)
    assert requests(server) == [f"/{SPM}"]
    assert (converted(tmp_path) / "config.json").is_file()


def test_a_broken_transfer_resumes(server, tmp_path):
    server.faults[CHECKPOINT] = "truncate"
    with pytest.raises(DownloadCheckFailed, match="the connection broke"):
        fetch_sonar(say=lambda m: None)
    part = originals(tmp_path) / f"{CHECKPOINT}.part"
    assert 0 < part.stat().st_size < (server.root / CHECKPOINT).stat().st_size
    have = part.stat().st_size
    server.events.clear()
    server.ranges.clear()
    fetch_sonar(say=lambda m: None)
    assert requests(server) == [f"/{CHECKPOINT}", f"/{SPM}"] and server.ranges == [f"bytes={have}-", None]
    assert not part.exists()
    assert (originals(tmp_path) / CHECKPOINT).read_bytes() == (server.root / CHECKPOINT).read_bytes()


def test_sonar_on_the_command_line():
    assert parse_models(["laser2", "laser3", "wolof", "sonar"]) == ["laser2", "wol_Latn", "sonar"]
    assert parse_models(["sonar"]) == ["sonar"]
    assert cli_main(["download", "laser3", "sonar"]) == 2  # laser3 without a language
