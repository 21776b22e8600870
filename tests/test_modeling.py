"""LaserModel: fidelity to the original encoder, padding/order invariance, dtypes, bad input, save/load, remote code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import REFERENCE, read_lines, reference_embeddings, require_shared
from transformers import AutoConfig, AutoModel

import hf_laser
from hf_laser import LaserConfig, LaserModel
from hf_laser.checkpoints.convert import load_laser_checkpoint, model_from_checkpoint


def small_model(seed: int = 0, **kwargs) -> LaserModel:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=50, embed_dim=8, hidden_size=6, num_layers=2)
    cfg.update(kwargs)
    return LaserModel(LaserConfig(**cfg)).eval()


def random_sentences(n: int, seed: int = 0, max_len: int = 12) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(rng.integers(4, 50, rng.integers(0, max_len))) + [2] for _ in range(n)]


def pad(sentences, side="right", pad_id=1):
    width = max(map(len, sentences))
    ids = torch.full((len(sentences), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sentences):
        sl = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        ids[i, sl] = torch.tensor(s)
        mask[i, sl] = 1
    return ids, mask


@pytest.fixture(scope="module")
def reference_model():
    require_shared(REFERENCE / "checkpoint" / "laser-ref-tiny.pt")
    checkpoint = load_laser_checkpoint(REFERENCE / "checkpoint" / "laser-ref-tiny.pt")
    return model_from_checkpoint(checkpoint), checkpoint["dictionary"]


def bpe_ids(name: str, dictionary: dict[str, int], folder: str = "tatoeba") -> list[list[int]]:
    lines = read_lines(REFERENCE / folder / f"{name}.bpe")
    return [[dictionary.get(t, 3) for t in line.strip().split()] + [2] for line in lines]


@pytest.mark.parametrize("name", ["tatoeba.fra-eng.fra", "tatoeba.cmn-eng.cmn", "tatoeba.jpn-eng.jpn",
                                  "tatoeba.ell-eng.ell", "tatoeba.kat-eng.kat"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_shuffled_batch_matches_reference(reference_model, name, side):
    """One padded batch mixing long and short sentences, shuffled, either padding side."""
    model, dictionary = reference_model
    ids = bpe_ids(name, dictionary)
    perm = np.random.default_rng(1).permutation(len(ids))
    x, mask = pad([ids[i] for i in perm], side)
    with torch.no_grad():
        emb = model(x, attention_mask=mask).pooler_output.numpy()
    ref = reference_embeddings(name)[perm]
    assert np.abs(emb - ref).max() <= 1e-5


def test_edge_files_match_reference(reference_model):
    model, dictionary = reference_model
    for lang in ["en", "fr", "de", "el", "zh", "ja", "ru"]:
        ids = bpe_ids(f"edge.{lang}", dictionary, folder="edge")
        x, mask = pad(ids)
        with torch.no_grad():
            emb = model(x, attention_mask=mask).pooler_output.numpy()
        assert np.abs(emb - reference_embeddings(f"edge.{lang}")).max() <= 1e-5, lang


def test_padding_side_and_order_invariance():
    model = small_model()
    sentences = random_sentences(17)
    with torch.no_grad():
        alone = torch.cat([model(torch.tensor([s])).pooler_output for s in sentences])
        for side in ("right", "left"):
            x, mask = pad(sentences, side)
            out = model(x, attention_mask=mask)
            torch.testing.assert_close(out.pooler_output, alone, atol=1e-6, rtol=0)
            # last_hidden_state stays at the input positions; padding holds padding_value
            assert out.last_hidden_state.shape == (17, x.shape[1], 12)
            assert torch.all(out.last_hidden_state[mask == 0] == 0)
            pooled = out.last_hidden_state.masked_fill(mask[..., None] == 0, float("-inf")).max(1).values
            torch.testing.assert_close(pooled, out.pooler_output)


def test_mask_omitted_means_pad_id_is_padding():
    model = small_model()
    x, mask = pad(random_sentences(5, seed=3))
    with torch.no_grad():
        torch.testing.assert_close(model(x).pooler_output, model(x, attention_mask=mask).pooler_output)


def test_return_tuple():
    model = small_model()
    out = model(torch.tensor([[5, 6, 2]]), return_dict=False)
    assert isinstance(out, tuple) and out[1].shape == (1, 12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_close_to_fp32(dtype):
    model = small_model()
    x, mask = pad(random_sentences(8))
    with torch.no_grad():
        ref = model(x, attention_mask=mask).pooler_output
        low = model.to(dtype)(x, attention_mask=mask).pooler_output
    assert low.dtype == dtype
    cos = torch.nn.functional.cosine_similarity(low.float(), ref, dim=-1)
    assert cos.min() > 0.99


def test_bad_inputs():
    model = small_model()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[5, 50, 2]]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="shape"):
        model(torch.tensor([5, 2]))
    with pytest.raises(ValueError, match="attention_mask shape"):
        model(torch.tensor([[5, 2]]), attention_mask=torch.ones(1, 3))
    with pytest.raises(ValueError, match="no attended token"):
        model(torch.tensor([[5, 2], [1, 1]]), attention_mask=torch.tensor([[1, 1], [0, 0]]))
    with pytest.raises(ValueError, match="integer"):
        model(torch.tensor([[5.0, 2.0]]))


def test_save_load_roundtrip_safetensors(tmp_path):
    model = small_model()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "laser"
    assert config["auto_map"] == {"AutoConfig": "configuration_laser.LaserConfig",
                                  "AutoModel": "modeling_laser.LaserModel",
                                  "AutoModelForSequenceClassification": "modeling_laser.LaserForSequenceClassification"}
    assert config["custom_pipelines"]["feature-extraction"]["impl"] == "pipeline_laser.LaserFeatureExtractionPipeline"
    for name in ("modeling_laser.py", "configuration_laser.py", "pipeline_laser.py"):
        assert (tmp_path / name).is_file(), name
    assert not (tmp_path / "modules.json").exists()  # no tokenizer saved: not a sentence-transformers model yet
    assert isinstance(AutoConfig.from_pretrained(tmp_path), LaserConfig)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, LaserModel)
    x = torch.tensor([[5, 6, 7, 2]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).pooler_output, model(x).pooler_output, atol=0, rtol=0)


def test_remote_code_without_hf_laser(tmp_path):
    """A saved directory loads with trust_remote_code in a process where hf_laser cannot be imported."""
    model = small_model()
    model.save_pretrained(tmp_path / "model")
    x = torch.tensor([[5, 6, 7, 2], [9, 2, 1, 1]])
    with torch.no_grad():
        expected = model(x).pooler_output.tolist()
    code = textwrap.dedent(f"""
        import sys, json
        src = {str(os.path.dirname(hf_laser.__file__))!r}
        sys.path = [p for p in sys.path if not (p and src.startswith(p))]
        sys.modules["hf_laser"] = None  # blocks any import of the package (editable installs use a meta finder)
        import torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True)
        assert "hf_laser" not in type(model).__module__, type(model).__module__
        out = model(torch.tensor({x.tolist()!r})).pooler_output
        print(json.dumps(out.tolist()))
    """)
    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", PYTHONPATH="")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_init_weights_in_range():
    model = small_model(init_range=0.05)
    for name, p in model.named_parameters():
        assert p.abs().max() <= 0.05 + 1e-7, name
    assert torch.all(model.embed_tokens.weight[1] == 0)


class _CudaFloat32:
    """Stands for a CUDA fp32 activation where no GPU exists: all `ieee_fp32_lstm` reads of a tensor."""

    is_cuda, dtype, device = True, torch.float32, torch.device("cuda")


def _rnn_precision() -> str:
    return torch.backends.cudnn.rnn.fp32_precision


@pytest.mark.parametrize("case", ["cuda-fp32", "cpu-fp32", "cuda-bf16", "allowed"])
def test_ieee_fp32_lstm_turns_cudnn_tf32_off_only_for_cuda_fp32(case):
    from hf_laser.modeling.modeling_laser import ieee_fp32_lstm

    x, allow = _CudaFloat32(), False
    if case == "cpu-fp32":
        x = torch.zeros(2)
    elif case == "cuda-bf16":
        x.dtype = torch.bfloat16
    elif case == "allowed":
        allow = True
    before = _rnn_precision()
    assert before == "tf32"  # PyTorch's default: cuDNN may run fp32 RNNs in TF32
    with ieee_fp32_lstm(x, allow):
        inside = _rnn_precision()
    assert inside == ("ieee" if case == "cuda-fp32" else before)
    assert _rnn_precision() == before
    with pytest.raises(RuntimeError), ieee_fp32_lstm(x, allow):  # restored when the LSTM call fails too
        raise RuntimeError("cuDNN error")
    assert _rnn_precision() == before


def test_forward_runs_the_lstm_in_ieee_fp32_on_cuda(monkeypatch):
    """LaserModel.forward calls its LSTM (packed and plain) inside ieee_fp32_lstm, unless `allow_tf32` is set."""
    model = small_model()
    seen = []
    model.lstm.register_forward_pre_hook(lambda module, args: seen.append(_rnn_precision()))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))  # the CPU tensors pass for CUDA ones
    ids, mask = pad(random_sentences(5))
    model(ids, attention_mask=mask)  # packed
    model(torch.tensor([[5, 6, 2], [7, 8, 2]]))  # no padding: the plain call
    model.allow_tf32 = True
    model(ids, attention_mask=mask)
    assert seen == ["ieee", "ieee", "tf32"]
    assert _rnn_precision() == "tf32"
