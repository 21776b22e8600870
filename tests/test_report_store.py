"""training/report.py keeps finished measurements so that an interrupted report resumes: a kept one is reused only
when the model files, the data, the measuring code and the arguments are all unchanged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from training.report import MeasurementStore  # noqa: E402

CALLS = []


def count_lines(model_dir, folder, factor):
    """A measurement: depends on a model file, a data file and an argument."""
    CALLS.append(1)
    return factor * len((Path(folder) / "data.txt").read_text().splitlines()) + len((Path(model_dir) / "w").read_bytes())


def other_measure(model_dir, folder, factor):
    CALLS.append(1)
    return -1


def setup(tmp_path):
    model, data = tmp_path / "model", tmp_path / "data"
    model.mkdir()
    data.mkdir()
    (model / "w").write_bytes(b"abc")
    (data / "data.txt").write_text("a\nb\n")
    logs = []
    store = MeasurementStore(tmp_path / "parts", device=None, log=logs.append)
    return model, data, store, logs


def measure(store, model, data, factor=10, function=count_lines):
    return store.measure("lines", function, {"model_dir": model, "folder": data, "factor": factor},
                         models=[model], data=[data])


def test_a_kept_measurement_is_reused_only_while_nothing_it_depends_on_changed(tmp_path):
    model, data, store, logs = setup(tmp_path)
    CALLS.clear()
    assert measure(store, model, data) == 23 and len(CALLS) == 1
    assert measure(store, model, data) == 23 and len(CALLS) == 1  # reused, said so
    assert "lines: reusing the measurement of" in logs[-1]
    kept = json.loads((tmp_path / "parts" / "lines.json").read_text())
    assert kept["result"] == 23 and kept["identity"]["args"]["factor"] == 10

    (model / "w").write_bytes(b"abcd")  # the model's weights changed
    assert measure(store, model, data) == 24 and len(CALLS) == 2
    assert "measuring again (models changed" in logs[-1]
    (data / "data.txt").write_text("a\nb\nc\n")  # the data changed
    assert measure(store, model, data) == 34 and len(CALLS) == 3
    assert "(data changed" in logs[-1]
    assert measure(store, model, data, factor=1) == 7 and len(CALLS) == 4  # another argument
    assert "(args changed" in logs[-1]
    assert measure(store, model, data, factor=1, function=other_measure) == -1 and len(CALLS) == 5  # other code
    assert "(measure changed" in logs[-1]
    (model / "extra.json").write_text("{}")  # a new file in the model directory counts too
    assert measure(store, model, data, factor=1, function=other_measure) == -1 and len(CALLS) == 6

    fresh = MeasurementStore(tmp_path / "parts", device=None, enabled=False, log=logs.append)  # --fresh
    measure(fresh, model, data, factor=1, function=other_measure)
    measure(fresh, model, data, factor=1, function=other_measure)
    assert len(CALLS) == 8
    other_device = MeasurementStore(tmp_path / "parts", device="cuda", log=logs.append)
    measure(other_device, model, data, factor=1, function=other_measure)
    assert len(CALLS) == 9 and "(device changed" in logs[-1]
