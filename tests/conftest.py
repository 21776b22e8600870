"""Shared fixtures. Reference material lives in `../shared` next to the repository (see ../shared/README.md)."""

from __future__ import annotations

from pathlib import Path

import os

# Set before torch/faiss start OpenMP: busy-waiting threads make small LSTM calls ~100x slower when two test
# workers share two cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each xdist worker gets one thread: two workers x two threads on a 2-core machine oversubscribe the cores and
    # make small LSTM calls orders of magnitude slower.
    torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "reference"
TINY_CHECKPOINT = REFERENCE / "checkpoint" / "laser-ref-tiny.pt"
BPE_CODES = REFERENCE / "bpe" / "laser-ref.fcodes"
BPE_VOCAB = REFERENCE / "bpe" / "laser-ref.fvocab"
LASER2 = REFERENCE / "laser2"


def require_shared(*paths: Path) -> None:
    """Skips the calling test when ../shared (reference outputs and data) is not next to the repository."""
    for path in paths or (SHARED,):
        if not path.exists():
            pytest.skip(f"needs {path} (the project's ../shared folder with the reference files); not present here")


def read_lines(path: Path) -> list[str]:
    """Lines split on '\\n' only, as the reference README prescribes."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        lines = f.read().split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def reference_embeddings(name: str, laser2: bool = False) -> np.ndarray:
    folder = (LASER2 if laser2 else REFERENCE) / "embeddings"
    return np.load(folder / f"{name}.npy")


@pytest.fixture(scope="session", autouse=True)
def speed_calibration_file(tmp_path_factory) -> Path:
    """The speed calibration file of this test run (`speed="auto"`'s measurements, hf_laser.speed.calibration): never
    the user's, and empty at the start; a test that needs an `auto` decision writes fake timings into it (no test
    times real code)."""
    path = tmp_path_factory.mktemp("speed-calibration") / "speed-calibration.json"
    previous = os.environ.get("HF_LASER_SPEED_CALIBRATION")
    os.environ["HF_LASER_SPEED_CALIBRATION"] = str(path)  # (the command lines run in subprocesses inherit it)
    yield path
    if previous is None:
        os.environ.pop("HF_LASER_SPEED_CALIBRATION", None)
    else:
        os.environ["HF_LASER_SPEED_CALIBRATION"] = previous


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """`laser-ref-tiny.pt` converted with the reference BPE codes and vocabulary."""
    require_shared(TINY_CHECKPOINT, BPE_CODES, BPE_VOCAB)
    from hf_laser.checkpoints.convert import convert

    return convert(TINY_CHECKPOINT, tmp_path_factory.mktemp("laser-ref-tiny"), bpe_codes=BPE_CODES,
                   bpe_vocab=BPE_VOCAB)


@pytest.fixture(scope="session")
def tiny_dictionary_dir(tmp_path_factory) -> Path:
    """`laser-ref-tiny.pt` converted without subword files (dictionary only: pretokenized input)."""
    require_shared(TINY_CHECKPOINT)
    from hf_laser.checkpoints.convert import convert

    return convert(TINY_CHECKPOINT, tmp_path_factory.mktemp("laser-ref-tiny-dict"), no_tokenizer=True)


@pytest.fixture(scope="session")
def tiny_laser2_dir(tmp_path_factory) -> Path:
    """`laser2-ref-tiny.pt` converted with the reference SentencePiece model."""
    require_shared(LASER2 / "laser2-ref-tiny.pt", LASER2 / "laser2-ref.spm")
    from hf_laser.checkpoints.convert import convert

    return convert(LASER2 / "laser2-ref-tiny.pt", tmp_path_factory.mktemp("laser2-ref-tiny"),
                   spm_model=LASER2 / "laser2-ref.spm", spm_vocab=LASER2 / "laser2-ref.cvocab")


@pytest.fixture(scope="session")
def tatoeba_split(tmp_path_factory) -> Path:
    """`training/split_tatoeba.py` run on the shared Tatoeba training pairs (~20 s): `train/` (what laser-mini's
    config trains on) and `valid/` (the held-out pairs, one `xx-en/` folder per language)."""
    require_shared(SHARED / "data" / "parallel" / "train" / "tatoeba")
    from filelock import FileLock
    from training.split_tatoeba import main as split_tatoeba

    def split(out: Path) -> Path:
        assert split_tatoeba(["--src", str(SHARED / "data" / "parallel" / "train" / "tatoeba"), "--out", str(out)]) == 0
        return out

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return split(tmp_path_factory.mktemp("tatoeba-split"))
    # xdist: the workers of this run share one split (their base temp's parent belongs to this run only)
    run_dir = tmp_path_factory.getbasetemp().parent
    out = run_dir / "tatoeba-split"
    with FileLock(str(run_dir / "tatoeba-split.lock")):
        if not (out / "split.json").is_file():  # written last, then renamed into place: there means whole
            split(out)
    return out


TATOEBA_FRA = SHARED / "data" / "tatoeba" / "v1" / "tatoeba.fra-eng.fra"


def fra_file(path: Path, n: int) -> Path:
    """The first `n` French Tatoeba sentences written to `path` (skips without ../shared)."""
    require_shared(TATOEBA_FRA)
    path.write_text("\n".join(read_lines(TATOEBA_FRA)[:n]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    """A `LaserEncoder` of the tiny reference model on PyTorch (one per test module; test modules may define their
    own; the Python API's default engine, the NumPy one where it loads the model, is tested in test_numpy_engine)."""
    from hf_laser.encoder import LaserEncoder

    return LaserEncoder.from_pretrained(tiny_model_dir, engine="torch")
