"""Fast start: `import hf_laser` and `hf-laser --help` import neither torch nor transformers, and the Auto classes
still find LASER directories after `import hf_laser` (registration deferred until transformers needs it).

Behaviour only; the times themselves: `python benchmarks/import_time.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("torch", "transformers")


def run_python(code: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def imported(code: str) -> dict:
    """Which heavy modules a fresh interpreter has imported after running `code`."""
    probe = textwrap.dedent(code) + f"\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n"
    result = run_python(probe)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_hf_laser_is_light():
    assert imported("import hf_laser\nhf_laser.DEFAULT_MODEL\nhf_laser.__version__") == \
        {"torch": False, "transformers": False}


def test_cli_help_is_light():
    code = """
        import sys
        from hf_laser.cli import main
        for argv in (["--help"], ["embed", "--help"], ["similar", "--help"]):
            try:
                main(argv)
            except SystemExit as e:
                assert e.code == 0, (argv, e.code)
    """
    assert imported(code) == {"torch": False, "transformers": False}


def test_console_script_help_does_not_import_torch():
    """The real entry path (`python -m hf_laser.cli`), with -X importtime listing every module imported."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_laser.cli", "--help"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "embed" in result.stdout
    modules = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "hf_laser" in modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_embed_without_lang_is_a_one_line_error_before_torch(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("Bonjour.\n", encoding="utf-8")
    code = f"""
        import sys
        from hf_laser.cli import main
        rc = main(["embed", "-i", {str(src)!r}, "-o", {str(tmp_path / 'e.npy')!r}])
        assert rc == 2, rc
    """
    result = run_python(textwrap.dedent(code) + "\nassert 'torch' not in sys.modules\n")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--lang" in lines[0] and "auto" in lines[0], result.stderr


def test_lazy_attributes():
    code = """
        import sys, hf_laser
        assert "torch" not in sys.modules
        assert "LaserEncoder" in dir(hf_laser) and "LaserModel" in hf_laser.__all__
        from hf_laser import LaserModel, LaserConfig, LaserTokenizer, LaserEncoder
        assert LaserModel.__module__ == "hf_laser.modeling.modeling_laser"
        try:
            hf_laser.NoSuchThing
        except AttributeError:
            pass
        else:
            raise AssertionError("no AttributeError")
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def saved_tiny_model(tmp_path_factory):
    import torch

    from hf_laser import LaserConfig, LaserModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-laser")
    LaserModel(LaserConfig(vocab_size=50, embed_dim=8, hidden_size=6, num_layers=1)).eval().save_pretrained(path)
    return path


@pytest.mark.parametrize("order", ["hf_laser first", "transformers first"])
def test_auto_model_after_import_hf_laser(saved_tiny_model, order):
    first, second = "import hf_laser", "from transformers import AutoConfig, AutoModel"
    if order != "hf_laser first":
        first, second = second, first
    code = f"""
        {first}
        {second}
        config = AutoConfig.from_pretrained({str(saved_tiny_model)!r})
        assert type(config).__module__ == "hf_laser.modeling.configuration_laser", type(config)
        model = AutoModel.from_pretrained({str(saved_tiny_model)!r})
        assert type(model).__name__ == "LaserModel" and type(model).__module__ == "hf_laser.modeling.modeling_laser", type(model)
        assert isinstance(model, hf_laser.LaserModel)
        print("ok")
    """
    result = run_python(code)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_auto_tokenizer_and_pipeline_after_import_hf_laser(tiny_model_dir):
    code = f"""
        import hf_laser
        from transformers import AutoTokenizer, AutoModelForSequenceClassification, pipeline
        tok = AutoTokenizer.from_pretrained({str(tiny_model_dir)!r})
        assert type(tok).__name__ == "LaserTokenizer", type(tok)
        embed = pipeline("laser-sentence-embedding", model={str(tiny_model_dir)!r})
        assert len(embed("Bonjour le monde.", lang="fr")) == 96
        from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING
        assert hf_laser.LaserConfig in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING
        print("ok")
    """
    result = run_python(code)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_saved_model_keeps_auto_map_when_imported_from_submodule(tmp_path):
    """`from hf_laser.modeling.modeling_laser import LaserModel` (no attribute of the package touched) still registers the
    classes, so `save_pretrained` writes the `auto_map` (loading with trust_remote_code without hf_laser)."""
    code = f"""
        import json
        from hf_laser.modeling.modeling_laser import LaserModel
        from hf_laser.modeling.configuration_laser import LaserConfig
        LaserModel(LaserConfig(vocab_size=20, embed_dim=4, hidden_size=3, num_layers=1)).save_pretrained({str(tmp_path)!r})
        print(json.dumps(json.load(open({str(tmp_path / 'config.json')!r}))["auto_map"]))
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "AutoConfig": "configuration_laser.LaserConfig", "AutoModel": "modeling_laser.LaserModel",
        "AutoModelForSequenceClassification": "modeling_laser.LaserForSequenceClassification"}


def test_cli_default_max_tokens_matches_encoder():
    from hf_laser import cli, encoder

    assert cli.DEFAULT_MAX_TOKENS == encoder.DEFAULT_MAX_TOKENS
