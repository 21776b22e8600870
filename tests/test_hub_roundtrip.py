"""The Hub for real: `hf-laser push` into a Hub-protocol server on 127.0.0.1 (tests/hub_server.py, `HF_ENDPOINT`), then
`LaserEncoder.from_pretrained("owner/name")`, `AutoModel` / `AutoTokenizer` with the directory's remote code,
sentence-transformers (a model directory, and a model set as one model) and `hf-laser download owner/name` read it back, by revision, and give the embeddings of the
local directory. Each client runs in a process of its own (the Hub client reads `HF_ENDPOINT` when imported), with
its own Hub cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hub_server import LocalHub

from hf_laser.models import SHIPPED_MODELS

REPO = Path(__file__).resolve().parents[1]
SENTENCES = ["Bonjour le monde.", "Croeso i Gymru.", "Hello world."]
LANGS = ["fr", "cy", "en"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with LocalHub() as server:
        server.home = tmp_path_factory.mktemp("hf-home")
        yield server


def run(hub, code: str | None = None, args: list[str] | None = None, cache: Path | None = None,
        extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update({"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(cache or hub.home), "HF_TOKEN": "hf_test",
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]), **(extra_env or {})})
    command = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "hf_laser.cli", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def local_embeddings(model) -> np.ndarray:
    from hf_laser import LaserEncoder

    return LaserEncoder.from_pretrained(model).encode(SENTENCES, lang=LANGS)


def embeddings_from(hub, model: str, extra: str = "", cache: Path | None = None, **env) -> np.ndarray:
    done = run(hub, f"""
import json
from hf_laser import LaserEncoder
enc = LaserEncoder.from_pretrained({model!r}{extra})
print(json.dumps(enc.encode({SENTENCES!r}, lang={LANGS!r}).tolist()))
""", cache=cache, extra_env=env)
    return np.array(json.loads(done.stdout.strip().splitlines()[-1]), dtype=np.float32)


@pytest.mark.slow
def test_push_and_load_a_model_set(hub, tmp_path):
    run(hub, args=["push", SHIPPED_MODELS["laser-mini-set"], "--repo-id", "user/laser-mini-set"])
    repo = hub.state.repos["user/laser-mini-set"]
    files = repo["commits"][repo["refs"]["main"]]
    assert "laser_model_set.json" in files and "laser-mini/model.safetensors" in files
    assert "laser-mini/modeling_laser.py" in files and "README.md" in files
    manifest = json.loads(files["laser_model_set.json"])
    assert manifest["default"] == "laser-mini" and manifest["students"]["cym_Latn"] == "student-cy-en"

    expected = local_embeddings("laser-mini-set")
    got = embeddings_from(hub, "user/laser-mini-set")
    np.testing.assert_array_equal(got, expected)

    # sentence-transformers: the set as one model, each sentence by the member of its language
    done = run(hub, f"""
import json
from hf_laser.integrations.sentence_transformers_sets import set_sentence_transformer
model = set_sentence_transformer("user/laser-mini-set")
items = [{{"text": t, "lang": l}} for t, l in zip({SENTENCES!r}, {LANGS!r})]
print(json.dumps(model.encode(items).tolist()))
""")
    np.testing.assert_allclose(np.array(json.loads(done.stdout.strip().splitlines()[-1])), expected, rtol=0,
                               atol=1e-5)

    # hf-laser download: the snapshot, then the same embeddings from the path it prints
    done = run(hub, args=["download", "user/laser-mini-set"])
    local = Path(done.stdout.strip().splitlines()[-1])
    assert (local / "laser_model_set.json").is_file()
    np.testing.assert_array_equal(local_embeddings(local), expected)

    # offline afterwards: the cached snapshot, without a request
    before = len(hub.state.requests)
    np.testing.assert_array_equal(embeddings_from(hub, "user/laser-mini-set", HF_HUB_OFFLINE="1"), expected)
    done = run(hub, args=["download", "user/laser-mini-set"], extra_env={"HF_HUB_OFFLINE": "1"})
    assert "cached snapshot" in done.stderr and "not checked against the Hub" in done.stderr, done.stderr
    assert Path(done.stdout.strip().splitlines()[-1]) == local
    assert hub.state.requests[before:] == [], hub.state.requests[before:]


@pytest.mark.slow
def test_push_revisions_and_remote_code(hub, tmp_path):
    model = tmp_path / "laser-mini"
    run(hub, code=f"""
import shutil
shutil.copytree({SHIPPED_MODELS['laser-mini']!r}, {str(model)!r})
""")
    run(hub, args=["push", str(model), "--repo-id", "user/mini"])
    first = hub.state.repos["user/mini"]["refs"]["main"]
    # a second commit that changes the weights: the first revision stays readable by its id
    import safetensors.numpy

    weights = safetensors.numpy.load_file(model / "model.safetensors")
    weights = {k: (v * 2 if k.endswith("embed_tokens.weight") else v) for k, v in weights.items()}
    safetensors.numpy.save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    run(hub, args=["push", str(model), "--repo-id", "user/mini", "--commit-message", "doubled"])
    second = hub.state.repos["user/mini"]["refs"]["main"]
    assert first != second

    original = local_embeddings("laser-mini")
    changed = local_embeddings(model)
    assert not np.allclose(original, changed)
    np.testing.assert_array_equal(embeddings_from(hub, "user/mini"), changed)
    np.testing.assert_array_equal(embeddings_from(hub, "user/mini", f", revision={first!r}"), original)

    # transformers alone, with the directory's remote code, and sentence-transformers
    done = run(hub, f"""
import json, torch
from transformers import AutoModel, AutoTokenizer
tok = AutoTokenizer.from_pretrained("user/mini", trust_remote_code=True, revision={first!r})
model = AutoModel.from_pretrained("user/mini", trust_remote_code=True, revision={first!r})
print(type(model).__module__)
batch = tok(["Bonjour le monde."], lang="fr", return_tensors="pt")
with torch.inference_mode():
    print(json.dumps(model(**batch).pooler_output[0].tolist()))
""")
    module, vector = done.stdout.strip().splitlines()[-2:]
    assert module.startswith("transformers_modules"), module  # the repository's code, not the package's
    np.testing.assert_allclose(np.array(json.loads(vector)), original[0], rtol=0, atol=1e-5)
    done = run(hub, f"""
import json
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("user/mini", trust_remote_code=True, revision={first!r})
print(json.dumps(model.encode([{{"text": "Bonjour le monde.", "lang": "fr"}}]).tolist()))
""")
    np.testing.assert_allclose(np.array(json.loads(done.stdout.strip().splitlines()[-1]))[0], original[0], rtol=0,
                               atol=1e-5)


def test_unknown_and_unreachable_fail_in_one_line(hub, tmp_path):
    for model, env, match in (
        ("user/absent", {}, "no such model on the Hub"),
        ("user/absent", {"HF_HUB_OFFLINE": "1"}, "not in the Hub cache"),
        ("user/absent", {"HF_ENDPOINT": "http://127.0.0.1:9"}, "could not be reached"),
    ):
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "hf_laser.cli", "embed", "--model", model, "--lang", "en",
                               "-o", str(tmp_path / "x.npy")], input="Hello.\n", capture_output=True, text=True,
                              env={**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
                                   "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]), **env},
                              timeout=120)
        elapsed = time.monotonic() - start
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and match in lines[0], done.stderr
        assert elapsed < 30, elapsed  # (a bound against retries; the start of a process is most of it)


def test_a_set_pointing_outside_its_repository_is_refused(hub, tmp_path):
    hub.state.repos["user/evil"] = {"commits": {"c" * 40: {
        "laser_model_set.json": json.dumps({"format": "hf-laser model set", "version": 1,
                                            "default": "../../../etc", "students": {}}).encode()}},
        "refs": {"main": "c" * 40}, "order": ["c" * 40]}
    done = subprocess.run([sys.executable, "-m", "hf_laser.cli", "download", "user/evil"], capture_output=True,
                          text=True, env={**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
                                          "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])},
                          timeout=120)
    assert done.returncode == 2 and "outside the repository" in done.stderr, done.stderr


def test_a_repository_of_unknown_size_is_refused(hub, tmp_path):
    hub.state.repos["user/sizeless"] = {"commits": {"d" * 40: {"config.json": b"{}"}}, "refs": {"main": "d" * 40},
                                        "order": ["d" * 40]}
    hub.state.hide_sizes.add("user/sizeless")
    done = subprocess.run([sys.executable, "-m", "hf_laser.cli", "download", "user/sizeless"], capture_output=True,
                          text=True, env={**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
                                          "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])},
                          timeout=120)
    assert done.returncode == 2 and "did not give the size" in done.stderr, done.stderr
    assert not any(path.startswith("/user/sizeless/resolve/") for _, path in hub.state.requests)
