"""Issue #68, items 1, 2, 4 and 7: untrusted LASER3 checkpoints and configurations are read in bounded memory and
time, their values checked before anything is allocated, every refusal is one line, and what the original embeds
is read and computed (numpy scalars, torch's legacy format, fairseq's other activations, quant-noise weights)."""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import pickle
import time
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch
from laser3_helpers import (
    CVOCAB,
    FIXTURES,
    SPM,
    require_shared,
    tiny_namespace_checkpoint,
)

from hf_laser.checkpoints import fairseq_checkpoint as fc
from hf_laser.checkpoints.convert import NotALaserCheckpoint, convert, is_laser3_file
from hf_laser.cli import main as cli_main
from hf_laser.model_set import read_model_set
from hf_laser.modeling.configuration_laser import LaserConfig
from hf_laser.modeling.transformer import ACTIVATIONS


def cfg_namespace(**overrides) -> argparse.Namespace:
    values = json.loads((FIXTURES / "cls.cfg.json").read_text())
    values.update(encoder_embed_dim=32, encoder_ffn_embed_dim=48, encoder_layers=2, encoder_attention_heads=4)
    values.update(overrides)
    return argparse.Namespace(**values)


class _Storage:
    def __init__(self, key: str, numel: int):
        self.key, self.numel = key, numel


class _Tensor:
    def __init__(self, storage, size, stride, offset=0):
        self.args = (storage, offset, tuple(size), tuple(stride), False, OrderedDict())

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, self.args


class _Call:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def crafted(path, obj, records: dict[str, bytes] | None = None):
    """A zip-format torch file whose data.pkl pickles `obj` (protocol 2; `_Storage` as torch's persistent ids)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=2)
    pickler.persistent_id = lambda o: ("storage", torch.FloatStorage, o.key, "cpu", o.numel) if isinstance(
        o, _Storage) else None
    pickler.dump(obj)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/byteorder", "little")
        for key, data in (records or {}).items():
            archive.writestr(f"archive/data/{key}", data)
        archive.writestr("archive/version", "3\n")
    return path


def refused_fast(capsys, tmp_path, ckpt, match: str, seconds: float = 30.0) -> str:
    """Refused in one line, exit 2, nothing written. `seconds` only guards against the minutes-long hangs these files
    caused (a refusal takes milliseconds; the times are benchmarks/untrusted_checkpoints.py's, not a test's)."""
    start = time.perf_counter()
    status = cli_main(["convert", str(ckpt), str(tmp_path / "out"), "--spm-model", str(SPM), "--spm-vocab",
                       str(CVOCAB)])
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and match in err[0], err
    assert elapsed < seconds, f"{elapsed:.1f} s"
    assert not (tmp_path / "out").exists()
    return err[0]


# ------------------------------------------------------------------------------------------------ item 1
def test_shared_references_stay_shared(tmp_path):
    require_shared()
    x: list = []
    for _ in range(40):
        x = [x, x]  # 2**40 leaves as a tree, 40 lists as pickled
    ckpt = tiny_namespace_checkpoint(tmp_path / "s.pt", bomb=x)
    start = time.perf_counter()
    checkpoint = fc.load_fairseq_checkpoint(ckpt)
    assert time.perf_counter() - start < 30
    bomb = checkpoint["cfg"]["model"]["bomb"]
    assert bomb[0] is bomb[1]
    assert convert(ckpt, tmp_path / "o", spm_model=SPM, spm_vocab=CVOCAB).is_dir()


def test_a_builtin_applied_to_a_shared_structure_computes_nothing(tmp_path, capsys):
    require_shared()
    x: list = []
    for _ in range(40):
        x = [x, x]
    crafted(tmp_path / "c.pt", {"cfg": {"model": cfg_namespace(s=_Call(str, x))}, "model": {}})
    refused_fast(capsys, tmp_path, tmp_path / "c.pt", "holds a builtins.str object")


def test_many_distinct_global_names_are_refused_fast(tmp_path, capsys):
    require_shared()
    names = b"".join(b"cfairseq.m%d\nC%d\n" % (i, i) for i in range(8000))
    pkl = (b"\x80\x02}(X\x03\x00\x00\x00cfg}X\x05\x00\x00\x00model]q\x00(" + names + b"eusX\x05\x00\x00\x00model}s.")
    ckpt = tmp_path / "g.pt"
    with zipfile.ZipFile(ckpt, "w") as archive:
        archive.writestr("archive/data.pkl", pkl)
        archive.writestr("archive/version", "3\n")
    line = refused_fast(capsys, tmp_path, ckpt, "more than HF_LASER_MAX_PICKLE_GLOBALS=256 distinct globals")
    assert "Traceback" not in line


def test_stand_in_classes_do_not_accumulate(tmp_path):
    fc.load_fairseq_checkpoint(FIXTURES / "tiny-omegaconf.pt")
    gc.collect()
    before = len(fc._Record.__subclasses__())
    for round_ in range(3):  # 100 names never seen before, each time
        names = b"".join(b"cfairseq.r%d_%d\nC\n" % (round_, i) for i in range(100))
        pkl = b"\x80\x02}(X\x03\x00\x00\x00cfg](" + names + b"eX\x05\x00\x00\x00model}u."
        with zipfile.ZipFile(tmp_path / "n.pt", "w") as archive:
            archive.writestr("archive/data.pkl", pkl)
            archive.writestr("archive/version", "3\n")
        fc.load_fairseq_checkpoint(tmp_path / "n.pt")
    gc.collect()
    assert len(fc._Record.__subclasses__()) <= before


def test_bytearray_bomb_is_refused_before_allocation(tmp_path, capsys):
    require_shared()
    crafted(tmp_path / "b.pt", {"cfg": {"model": cfg_namespace()}, "model": {}, "x": _Call(bytearray, 3 * 10**9)})
    refused_fast(capsys, tmp_path, tmp_path / "b.pt", "(builtins.bytearray)")


def test_a_storage_larger_than_the_file_is_refused(tmp_path, capsys):
    require_shared()
    storage = _Storage("0", 10**11)
    crafted(tmp_path / "t.pt", {"cfg": {"model": cfg_namespace()},
                                "model": {"embed_tokens.weight": _Tensor(storage, (10**11,), (1,))}},
            {"0": b"\0" * 16})
    refused_fast(capsys, tmp_path, tmp_path / "t.pt", "declares a tensor storage of 400,000,000,000 bytes, but the "
                                                       "file holds 16")


def test_a_zero_stride_view_of_1e10_elements_is_refused(tmp_path, capsys):
    require_shared()
    ckpt = tmp_path / "v.pt"
    torch.save({"cfg": {"model": cfg_namespace()}, "model": {"embed_tokens.weight": torch.zeros(1).expand(10**5,
                                                                                                      10**5)}}, ckpt)
    refused_fast(capsys, tmp_path, ckpt, "a tensor of 10,000,000,000 elements")


def test_deep_and_self_referencing_configurations_are_one_line(tmp_path, capsys):
    require_shared()
    crafted(tmp_path / "d.pt", {"cfg": {"model": cfg_namespace(deep="DEEPDEEP")}, "model": {}})
    with zipfile.ZipFile(tmp_path / "d.pt") as archive:
        pkl = archive.read("archive/data.pkl")
    depth = 100_000  # a list 100,000 levels deep: EMPTY_LIST x N, APPEND x N-1
    crafted_bytes = pkl.replace(b"X\x08\x00\x00\x00DEEPDEEP", b"]" * depth + b"a" * (depth - 1))
    with zipfile.ZipFile(tmp_path / "d.pt", "w") as archive:
        archive.writestr("archive/data.pkl", crafted_bytes)
        archive.writestr("archive/version", "3\n")
    refused_fast(capsys, tmp_path, tmp_path / "d.pt", "nested deeper than HF_LASER_MAX_CONFIG_DEPTH=64")
    loop: list = []
    loop.append(loop)
    crafted(tmp_path / "l.pt", {"cfg": {"model": cfg_namespace(loop=loop)}, "model": {}})
    refused_fast(capsys, tmp_path, tmp_path / "l.pt", "contains itself")


def test_limits_are_raised_with_environment_variables(tmp_path, monkeypatch):
    require_shared()
    ckpt = tiny_namespace_checkpoint(tmp_path / "s.pt")
    monkeypatch.setenv("HF_LASER_MAX_PICKLE_OPS", "100")
    with pytest.raises(fc.NotALaser3Checkpoint, match="more than HF_LASER_MAX_PICKLE_OPS=100 opcodes"):
        fc.load_fairseq_checkpoint(ckpt)
    monkeypatch.setenv("HF_LASER_MAX_PICKLE_OPS", "1_000_000")
    assert fc.load_fairseq_checkpoint(ckpt)["cfg"]["model"]["encoder_layers"] == 2


# ------------------------------------------------------------------------------------------------ item 2
@pytest.mark.parametrize("overrides, match", [
    ({"max_source_positions": 1.7}, "max_source_positions is 1.7, expected an integer from 1 to"),
    ({"encoder_attention_heads": 4.9}, "encoder_attention_heads is 4.9, expected an integer from 1 to 32"),
    ({"encoder_attention_heads": 5}, "encoder_attention_heads is 5, which does not divide the width 32"),
    ({"max_source_positions": "${task.max_source_positions}"}, "an interpolation that names nothing"),
    ({"sentemb_criterion": ["cls"]}, "sentemb_criterion is ['cls'], expected one of"),
    ({"dropout": True}, "dropout is True, expected a number from 0.0 to 1.0"),
    ({"encoder_normalize_before": 1.0}, "encoder_normalize_before is 1.0, expected true or false"),
    ({"encoder_layers": 2.0}, "encoder_layers is 2.0 but the weights have 2"),
])
def test_configuration_values_are_checked(tmp_path, capsys, overrides, match):
    require_shared()
    ckpt = tiny_namespace_checkpoint(tmp_path / "s.pt", **overrides)
    with pytest.raises(NotALaserCheckpoint, match=None) as info:
        convert(ckpt, tmp_path / "o", spm_model=SPM, spm_vocab=CVOCAB)
    assert match in str(info.value) and "\n" not in str(info.value)
    refused_fast(capsys, tmp_path, ckpt, match)


@pytest.mark.parametrize("field, value, match", [
    ("ffn_dim", 10**9, "ffn_dim must be an integer from 1 to 1,048,576"),
    ("vocab_size", 10**9, "vocab_size must be an integer from 1 to 16,777,216"),
    ("num_layers", 10**6, "num_layers must be an integer from 1 to 1,024"),
    ("max_positions", 10**8, "max_positions must be an integer from 1 to 16,777,216"),
    ("attention_heads", 4.0, "attention_heads must be an integer"),
    ("max_positions", 1.7, "max_positions must be an integer"),
    ("embed_dim", 60000, "parameters, more than HF_LASER_MAX_PARAMETERS=2,000,000,000"),
    ("activation_function", "swish", "activation_function must be one of"),
])
def test_config_json_values_are_checked_before_allocation(tmp_path, capsys, field, value, match):
    require_shared()
    out = convert(tiny_namespace_checkpoint(tmp_path / "s.pt"), tmp_path / "m", spm_model=SPM, spm_vocab=CVOCAB)
    config = json.loads((out / "config.json").read_text())
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        LaserConfig(**{**config, field: value})
    config[field] = value
    if field == "embed_dim":
        config.update(vocab_size=10**6, attention_heads=4)
    (out / "config.json").write_text(json.dumps(config))
    (tmp_path / "in.txt").write_text("Bonjour.\n", encoding="utf-8")
    start = time.perf_counter()
    status = cli_main(["embed", "--model", str(out), "--lang", "fr", "-i", str(tmp_path / "in.txt"), "-o",
                       str(tmp_path / "o.npy"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and field in err[0], err
    assert time.perf_counter() - start < 60


def test_a_huge_max_positions_allocates_no_table(tmp_path):
    require_shared()
    from hf_laser import LaserEncoder

    out = convert(tiny_namespace_checkpoint(tmp_path / "s.pt", max_source_positions=1 << 24), tmp_path / "m",
                  spm_model=SPM, spm_vocab=CVOCAB)
    encoder = LaserEncoder.from_pretrained(out)
    encoder.encode(["Bonjour."], lang="fr")
    assert encoder.model._sinusoids.shape[0] <= 256


# ------------------------------------------------------------------------------------------------ item 4
def test_json_nesting_bombs_are_one_line(tmp_path, capsys):
    require_shared()
    out = convert(tiny_namespace_checkpoint(tmp_path / "s.pt"), tmp_path / "m", spm_model=SPM, spm_vocab=CVOCAB)
    from hf_laser.modeling.plain_config import PlainLaserConfig

    (out / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    # (the command line's resolver, models/__init__.py's check_model_dir, reads config.json first: not covered here)
    with pytest.raises(ValueError, match="nested too deeply"):
        LaserConfig.from_pretrained(out)
    with pytest.raises(ValueError, match="nested too deeply"):
        PlainLaserConfig.from_directory(out)
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "laser_model_set.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_model_set(tmp_path / "set")


def _model_set(directory, default, students=None):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "laser_model_set.json").write_text(json.dumps(
        {"format": "hf-laser model set", "version": 1, "default": default, "students": students or {}}))
    return directory


@pytest.mark.parametrize("kind", ["itself", "dot", "a-b-a", "student"])
def test_model_sets_that_loop_are_one_line(tmp_path, capsys, kind):
    a = tmp_path / "a"
    if kind == "itself":
        _model_set(a, str(a))
    elif kind == "dot":
        _model_set(a, ".")
    elif kind == "a-b-a":
        _model_set(a, "../b")
        _model_set(tmp_path / "b", "../a")
    else:
        _model_set(a, None, {"wol_Latn": "."})
    with pytest.raises(ValueError, match="a model set itself"):
        read_model_set(a)
    (tmp_path / "in.txt").write_text("Bonjour.\n", encoding="utf-8")
    status = cli_main(["embed", "--model", str(a), "--lang", "wol_Latn", "-i", str(tmp_path / "in.txt"), "-o",
                       str(tmp_path / "o.npy"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "a model set itself" in err[0], err


def test_a_non_string_default_is_one_line(tmp_path):
    _model_set(tmp_path / "a", 5)
    with pytest.raises(ValueError, match="'default' must be a model directory"):
        read_model_set(tmp_path / "a")


def test_torch_load_errors_are_one_line(tmp_path, capsys):
    require_shared()
    ckpt = tiny_namespace_checkpoint(tmp_path / "s.pt")
    with zipfile.ZipFile(ckpt) as archive:
        entries = {n: archive.read(n) for n in archive.namelist() if "/data/" not in n}
    with zipfile.ZipFile(tmp_path / "cut.pt", "w") as archive:  # the weights' records left out
        for name, data in entries.items():
            archive.writestr(name, data)
    refused_fast(capsys, tmp_path, tmp_path / "cut.pt", "could not be read as")


def test_a_legacy_format_laser3_checkpoint_is_read(tmp_path):
    require_shared()
    from hf_laser import LaserEncoder

    zip_ckpt = tiny_namespace_checkpoint(tmp_path / "z.pt")
    legacy = tmp_path / "legacy.pt"
    torch.save(torch.load(zip_ckpt, weights_only=False), legacy, _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(legacy) and is_laser3_file(legacy)
    a = LaserEncoder.from_pretrained(convert(zip_ckpt, tmp_path / "a", spm_model=SPM, spm_vocab=CVOCAB))
    b = LaserEncoder.from_pretrained(convert(legacy, tmp_path / "b", spm_model=SPM, spm_vocab=CVOCAB))
    np.testing.assert_array_equal(a.encode(["Bonjour le monde."], lang="fr"), b.encode(["Bonjour le monde."],
                                                                                      lang="fr"))


# ------------------------------------------------------------------------------------------------ item 7
def test_numpy_scalars_in_extra_state_and_configuration_are_plain_values(tmp_path):
    require_shared()
    ckpt = tiny_namespace_checkpoint(tmp_path / "s.pt", dropout=np.float64(0.25), seed=np.int64(7))
    checkpoint = torch.load(ckpt, weights_only=False)
    checkpoint["extra_state"] = {"val_loss": np.float64(3.5), "epoch": np.int64(4), "arr": np.arange(3.0)}
    torch.save(checkpoint, ckpt)
    cfg = fc.load_fairseq_checkpoint(ckpt)["cfg"]["model"]
    assert (cfg["dropout"], cfg["seed"]) == (0.25, 7) and type(cfg["seed"]) is int
    out = convert(ckpt, tmp_path / "o", spm_model=SPM, spm_vocab=CVOCAB)
    assert json.loads((out / "config.json").read_text())["dropout"] == 0.25


def test_fairseq_activations_are_its_formulas():
    """fairseq 0.12's `utils.get_activation_fn` and `modules/gelu.py`, written out: bit for bit."""
    x = torch.linspace(-6, 6, 10_001)
    a = math.sqrt(2 / math.pi)
    accurate = 0.5 * x * (1 + torch.tanh(a * (x + 0.044715 * torch.pow(x, 3))))
    expected = {"relu": torch.relu(x), "relu_squared": torch.relu(x).pow(2), "gelu": torch.nn.functional.gelu(x),
                "gelu_fast": accurate, "gelu_accurate": accurate, "tanh": torch.tanh(x), "linear": x}
    assert set(ACTIVATIONS) == set(expected)
    for name, want in expected.items():
        assert torch.equal(ACTIVATIONS[name](x), want), name


@pytest.mark.parametrize("activation", ["gelu_accurate", "gelu_fast", "tanh", "relu_squared", "linear"])
def test_checkpoints_with_fairseqs_other_activations_convert(tmp_path, activation):
    require_shared()
    from hf_laser import LaserEncoder

    out = convert(tiny_namespace_checkpoint(tmp_path / "s.pt", activation_fn=activation), tmp_path / "o",
                  spm_model=SPM, spm_vocab=CVOCAB)
    encoder = LaserEncoder.from_pretrained(out)
    layer = encoder.model.layers[0]
    assert layer.activation is ACTIVATIONS[activation]
    assert np.isfinite(encoder.encode(["Bonjour le monde."], lang="fr")).all()


def test_swish_is_refused_as_the_original_fails_on_it(tmp_path):
    require_shared()
    with pytest.raises(NotALaserCheckpoint, match="returns the class nn.SiLU"):
        convert(tiny_namespace_checkpoint(tmp_path / "s.pt", activation_fn="swish"), tmp_path / "o",
                spm_model=SPM, spm_vocab=CVOCAB)


def _with_quant_noise(path, weight):
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["cfg"]["model"].quant_noise_pq = 0.1
    if weight is not None:
        checkpoint["model"]["quant_noise.weight"] = weight
    torch.save(checkpoint, path)
    return path


def test_quant_noise_weights_are_the_linear_map_fairseq_applies(tmp_path):
    """fairseq's `TransformerEncoderBase.forward_embedding`: `x = dropout(x); x = self.quant_noise(x)` (a bias-free
    linear map; the noise acts in training only), then the padding zeroed."""
    require_shared()
    from hf_laser import LaserEncoder

    plain = tiny_namespace_checkpoint(tmp_path / "p.pt")
    base = LaserEncoder.from_pretrained(convert(plain, tmp_path / "p", spm_model=SPM, spm_vocab=CVOCAB))
    ids = base.token_ids(["Bonjour le monde.", "Oui."], lang="fr")
    identity = _with_quant_noise(tiny_namespace_checkpoint(tmp_path / "i.pt"), torch.eye(32))
    same = LaserEncoder.from_pretrained(convert(identity, tmp_path / "i", spm_model=SPM, spm_vocab=CVOCAB))
    np.testing.assert_array_equal(same.encode_ids(ids).numpy(), base.encode_ids(ids).numpy())
    weight = torch.randn(32, 32, generator=torch.Generator().manual_seed(3)) * 0.2
    mapped = _with_quant_noise(tiny_namespace_checkpoint(tmp_path / "q.pt"), weight)
    model = LaserEncoder.from_pretrained(convert(mapped, tmp_path / "q", spm_model=SPM, spm_vocab=CVOCAB)).model
    seen = {}
    model.quant_noise.register_forward_hook(lambda m, inp, out: seen.update(inp=inp[0], out=out))
    with torch.no_grad():
        model(torch.tensor([ids[0]]))
    torch.testing.assert_close(seen["out"], seen["inp"] @ weight.T, rtol=0, atol=1e-6)
    with pytest.raises(NotALaserCheckpoint, match=r"missing \['quant_noise.weight'\]"):
        convert(_with_quant_noise(tiny_namespace_checkpoint(tmp_path / "m.pt"), None), tmp_path / "m",
                spm_model=SPM, spm_vocab=CVOCAB)


def test_a_pre_norm_checkpoint_without_its_layer_norm_is_blamed_on_the_weights(tmp_path):
    require_shared()
    ckpt = tiny_namespace_checkpoint(tmp_path / "s.pt", encoder_normalize_before=True)
    with pytest.raises(NotALaserCheckpoint, match="the weights have none \\(layer_norm.weight\\)") as info:
        convert(ckpt, tmp_path / "o", spm_model=SPM, spm_vocab=CVOCAB)
    assert "cvocab" not in str(info.value)


def test_sinusoidal_positions_extend_past_max_positions_as_fairseqs(tmp_path):
    """fairseq's `SinusoidalPositionalEmbedding` grows its table for longer inputs: rows past
    max_source_positions are the formula's, the same bits whatever the table's size."""
    from hf_laser.modeling.transformer import sinusoidal_positions

    long, short = sinusoidal_positions(3000, 32, 1), sinusoidal_positions(1026, 32, 1)
    assert torch.equal(long[:1026], short)
    half = 16
    freqs = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(3000, dtype=torch.float).unsqueeze(1) * freqs.unsqueeze(0)
    assert torch.equal(long[2:], torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)[2:])
