"""`hf-laser download` / `from_pretrained("laser3-LANG")` against a local HTTP server serving files in the original
layout (`laser2.pt`, `laser2.spm`, `laser2.cvocab`, `laser3-LANG.v1.pt`, `laser3-LANG.v1.spm`, ...): download,
checks (size, the server's MD5 ETag, the recorded sha256), resume, conversion into a model set, and the offline
message."""

from __future__ import annotations

import hashlib
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from laser3_helpers import CVOCAB, SHARED, SPM, require_shared, tiny_namespace_checkpoint

from hf_laser import LaserEncoder
from hf_laser.cli import main as cli_main
from hf_laser.checkpoints.download import DownloadCheckFailed, ModelsNotAvailable, fetch_models, student_code
from hf_laser.model_set import RoutedLaserEncoder


class Handler(SimpleHTTPRequestHandler):
    """Serves the directory with an MD5 ETag and byte ranges, as S3 does; `server.faults` breaks answers on purpose."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        path = Path(self.server.root) / self.path.lstrip("/")
        self.server.requests.append(self.path)
        self.server.ranges.append(self.headers.get("Range"))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        fault = self.server.faults.pop(path.name, None)
        start = 0
        if self.headers.get("Range"):
            start = int(self.headers["Range"].split("=")[1].split("-")[0])
        self.send_response(206 if start else 200)
        if start:  # as S3 does (a 206 without it is refused: it might not continue the part file)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        etag = "0" * 32 if fault == "etag" else hashlib.md5(data).hexdigest()
        self.send_header("ETag", f'"{etag}"')
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        self.wfile.write(body[: len(body) // 2] if fault == "truncate" else body)


@pytest.fixture
def server(tmp_path, monkeypatch):
    require_shared()
    root = tmp_path / "published"
    root.mkdir()
    shutil.copyfile(SHARED / "reference" / "laser2" / "laser2-ref-tiny.pt", root / "laser2.pt")
    shutil.copyfile(SPM, root / "laser2.spm")
    shutil.copyfile(CVOCAB, root / "laser2.cvocab")
    tiny_namespace_checkpoint(root / "laser3-wol_Latn.v1.pt", width=96)
    # amh_Ethi has its own SentencePiece model: here a copy of the reference one under the student's name
    tiny_namespace_checkpoint(root / "laser3-amh_Ethi.v1.pt", width=96)
    shutil.copyfile(SPM, root / "laser3-amh_Ethi.v1.spm")
    shutil.copyfile(CVOCAB, root / "laser3-amh_Ethi.v1.cvocab")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.root, httpd.requests, httpd.ranges, httpd.faults = root, [], [], {}
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_LASER_DOWNLOAD_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setenv("HF_LASER_DOWNLOAD_CACHE", str(tmp_path / "cache"))
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_download_converts_into_a_model_set(server, tmp_path, capsys):
    assert cli_main(["download", "laser2", "laser3", "wolof", "amh"]) == 0
    assert f"ready: {tmp_path / 'cache'}" in capsys.readouterr().err
    assert sorted(server.requests) == sorted(f"/{n}" for n in [
        "laser2.pt", "laser2.spm", "laser2.cvocab", "laser3-wol_Latn.v1.pt", "laser3-amh_Ethi.v1.pt",
        "laser3-amh_Ethi.v1.spm", "laser3-amh_Ethi.v1.cvocab"])
    routed = LaserEncoder.from_pretrained(tmp_path / "cache")
    assert isinstance(routed, RoutedLaserEncoder)
    # LASER2 in the set follows laser_encoders: English punctuation rules whatever the sentence's language
    laser2 = LaserEncoder.from_pretrained(tmp_path / "cache" / "converted" / "laser2")
    assert laser2.tokenizer.laser2_punct_lang == "en"
    quote = ['"Что это там за люди?" - "Это зеркало".']
    np.testing.assert_array_equal(routed.encode(quote, lang="ru"), laser2.encode(quote, lang="en"))
    assert routed.route("wolof") == "wol_Latn" and routed.route("amharic") == "amh_Ethi"
    assert routed.route("fr") == "default"
    student = LaserEncoder.from_pretrained(tmp_path / "cache" / "converted" / "laser3-wol_Latn")
    np.testing.assert_array_equal(routed.encode(["Naka nga def?"], lang="wo"),
                                  student.encode(["Naka nga def?"], lang="wol_Latn"))
    sums = (tmp_path / "cache" / "originals" / "SHA256SUMS").read_text()
    digest = hashlib.sha256((server.root / "laser2.pt").read_bytes()).hexdigest()
    assert f"{digest}  laser2.pt" in sums
    # a second run downloads nothing; a name loads from the cache
    server.requests.clear()
    assert cli_main(["download", "laser3", "wol_Latn"]) == 0
    assert server.requests == []
    named = LaserEncoder.from_pretrained("laser3-wol_Latn")
    np.testing.assert_array_equal(named.encode(["Jërëjëf."], lang="wo"), student.encode(["Jërëjëf."], lang="wo"))


def test_a_file_changed_in_the_cache_is_refused(server, tmp_path):
    fetch_models(["laser2"], say=lambda m: None)
    with open(tmp_path / "cache" / "originals" / "laser2.spm", "ab") as f:
        f.write(b"x")
    with pytest.raises(DownloadCheckFailed, match="has changed since it was downloaded.*fetched again"):
        fetch_models(["laser2"], say=lambda m: None)
    # set aside, not kept: the next run fetches it again (a poisoned cache stuck: no request, the same error)
    assert (tmp_path / "cache" / "originals" / "rejected" / "laser2.spm").is_file()
    server.requests.clear()
    fetch_models(["laser2"], say=lambda m: None)
    assert server.requests == ["/laser2.spm"]
    assert (tmp_path / "cache" / "originals" / "laser2.spm").read_bytes() == (server.root / "laser2.spm").read_bytes()


def test_damaged_and_broken_transfers(server, tmp_path):
    server.faults["laser2.spm"] = "etag"
    with pytest.raises(DownloadCheckFailed, match="MD5 is not the server's ETag"):
        fetch_models(["laser2"], say=lambda m: None)
    assert not (tmp_path / "cache" / "originals" / "laser2.spm").exists()
    server.faults["laser2.cvocab"] = "truncate"
    with pytest.raises(DownloadCheckFailed, match="the connection broke"):
        fetch_models(["laser2"], say=lambda m: None)
    part = tmp_path / "cache" / "originals" / "laser2.cvocab.part"
    assert 0 < part.stat().st_size < (server.root / "laser2.cvocab").stat().st_size
    server.requests.clear()
    fetch_models(["laser2"], say=lambda m: None)  # resumes with a range request
    assert server.requests == ["/laser2.cvocab"] and server.ranges[-1].startswith("bytes=") and not part.exists()
    assert (tmp_path / "cache" / "originals" / "laser2.cvocab").read_bytes() == \
        (server.root / "laser2.cvocab").read_bytes()


def test_offline_says_what_to_fetch_and_where_then_converts_without_network(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_LASER_DOWNLOAD_URL", "http://127.0.0.1:9")  # nothing listens there
    originals = tmp_path / "cache" / "originals"
    assert cli_main(["download", "laser3", "wol_Latn"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "laser3-wol_Latn.v1.pt, laser2.spm, laser2.cvocab" in err and f"put them in {originals}" in err
    with pytest.raises(ModelsNotAvailable, match="cannot be downloaded"):
        LaserEncoder.from_pretrained("laser3-wol_Latn")
    for name in ("laser3-wol_Latn.v1.pt", "laser2.spm", "laser2.cvocab"):  # fetched by hand
        shutil.copyfile(server.root / name, originals / name)
    assert cli_main(["download", "laser3", "wol_Latn"]) == 0
    assert LaserEncoder.from_pretrained(tmp_path / "cache").route("wol") == "wol_Latn"


def test_offline_tries_the_server_once_and_names_each_file_once(tmp_path, monkeypatch, capsys):
    """#71: `download laser2 laser3 wol_Latn` offline listed laser2.spm and laser2.cvocab twice, tried every file
    (each try waiting for the network), and imported torch first; in Python it said "run the same command"."""
    import sys

    from hf_laser.checkpoints import download

    monkeypatch.setenv("HF_LASER_DOWNLOAD_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HF_LASER_DOWNLOAD_CACHE", str(tmp_path / "cache"))
    tried = []
    transfer = download._transfer
    monkeypatch.setattr(download, "_transfer", lambda url, *a, **k: (tried.append(url), transfer(url, *a, **k))[1])
    monkeypatch.delitem(sys.modules, "hf_laser.checkpoints.convert", raising=False)
    assert cli_main(["download", "laser2", "laser3", "wol_Latn"]) == 2
    err = capsys.readouterr().err
    assert "(laser2.pt, laser2.spm, laser2.cvocab, laser3-wol_Latn.v1.pt), put them in" in err, err
    assert "run the same command again" in err
    assert tried == ["http://127.0.0.1:9/laser2.pt"]
    assert "hf_laser.checkpoints.convert" not in sys.modules  # (nothing to convert: torch is not waited for)
    # a file already in the cache is used, the others are named
    originals = tmp_path / "cache" / "originals"
    (originals / "laser2.cvocab").write_text("a 1\n", encoding="utf-8")
    tried.clear()
    with pytest.raises(ModelsNotAvailable) as raised:
        LaserEncoder.from_pretrained("laser2")
    message = str(raised.value)
    assert "(laser2.pt, laser2.spm), put them in" in message and "same command" not in message
    assert "load 'laser2' again (from_pretrained('laser2'), or --model laser2)" in message
    assert tried == ["http://127.0.0.1:9/laser2.pt"]


def test_language_arguments():
    assert student_code("Wolof") == "wol_Latn" and student_code("am") == "amh_Ethi"
    with pytest.raises(ValueError, match="covered by LASER2: download laser2"):
        student_code("fr")
    with pytest.raises(ValueError, match="no LASER3 student for 'klingon'"):
        student_code("klingon")
    assert cli_main(["download", "wolof"]) == 2
    assert cli_main(["download", "laser3"]) == 2


def test_the_command_line_takes_the_names_python_takes(server, tmp_path, capsys):
    """`LaserEncoder.from_pretrained("laser3-wol_Latn")` fetched and converted the student, but `--model
    laser3-wol_Latn` on the command line said "model directory not found"."""
    text = tmp_path / "wo.txt"
    text.write_text("Naka nga def?\nJërëjëf.\n", encoding="utf-8")
    assert cli_main(["embed", "--model", "laser3-wol_Latn", "--lang", "wo", "-i", str(text),
                     "-o", str(tmp_path / "wo.npy")]) == 0, capsys.readouterr().err
    named = LaserEncoder.from_pretrained("laser3-wol_Latn")
    np.testing.assert_array_equal(np.load(tmp_path / "wo.npy"), named.encode(["Naka nga def?", "Jërëjëf."], lang="wo"))


def test_one_environment_variable_per_cache(tmp_path, monkeypatch, recwarn):
    """#71: `HF_LASER_CACHE` named both the download cache and the evaluation's embedding cache. Now one name each;
    the old one is still read by both, with a FutureWarning naming the variable to set."""
    import warnings

    from evaluation.cache import default_cache_dir
    from hf_laser import defaults
    from hf_laser.checkpoints.download import cache_dir

    monkeypatch.delenv("HF_LASER_CACHE", raising=False)
    monkeypatch.setenv("HF_LASER_DOWNLOAD_CACHE", str(tmp_path / "downloads"))
    monkeypatch.setenv("HF_LASER_EMBEDDING_CACHE", str(tmp_path / "embeddings"))
    assert cache_dir() == tmp_path / "downloads" and default_cache_dir() == tmp_path / "embeddings"
    monkeypatch.setenv("HF_LASER_CACHE", str(tmp_path / "old"))  # the new names win
    assert cache_dir() == tmp_path / "downloads" and default_cache_dir() == tmp_path / "embeddings"
    assert not [w for w in recwarn if "HF_LASER" in str(w.message)]

    monkeypatch.delenv("HF_LASER_DOWNLOAD_CACHE")
    monkeypatch.delenv("HF_LASER_EMBEDDING_CACHE")
    monkeypatch.setattr(defaults, "_warned_legacy", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache_dir() == tmp_path / "old" and default_cache_dir() == tmp_path / "old"
        cache_dir()  # (said once per process and cache)
    messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert len(messages) == 2, messages
    assert "set $HF_LASER_DOWNLOAD_CACHE instead" in messages[0] and "set $HF_LASER_EMBEDDING_CACHE" in messages[1]
