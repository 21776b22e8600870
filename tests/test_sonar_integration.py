"""SONAR everywhere hf_laser runs LASER: `hf-laser convert`, `LaserEncoder` (languages by any name, `auto`,
`encode_file`), model sets, the command line, the server, the Auto classes, sentence-transformers and MTEB. The
reference embeddings are the original's (tests/fixtures/sonar, written with fairseq2 + sonar-space: see
test_sonar.py); the small random encoder keeps every test fast."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sonar_helpers import sonar_lines

from hf_laser import LaserEncoder
from hf_laser.cli import main as cli
from hf_laser.text.sonar_languages import sonar_tag, sonar_tags
from hf_laser.text.text_tokenizer import LaserInputError

FIXTURES = Path(__file__).parent / "fixtures" / "sonar"
SPM = FIXTURES / "stand-in.spm.model"
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def record() -> dict:
    with gzip.open(FIXTURES / "lines.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def sonar_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sonar") / "sonar-small"
    assert cli(["convert", str(FIXTURES / "small.pt"), str(out), "--spm-model", str(SPM),
                "--attention-heads", "4"]) == 0
    return out


@pytest.fixture(scope="module")
def encoder(sonar_dir) -> LaserEncoder:
    return LaserEncoder.from_pretrained(sonar_dir)


def test_convert_writes_a_directory_with_its_licence_and_remote_code(sonar_dir):
    names = {p.name for p in sonar_dir.iterdir()}
    assert {"config.json", "model.safetensors", "sentencepiece.bpe.model", "tokenizer_config.json", "README.md",
            "modeling_sonar.py", "configuration_sonar.py", "tokenization_sonar.py", "sonar_text_tokenizer.py",
            "modules.json", "sentence_transformers_sonar.py"} <= names
    card = (sonar_dir / "README.md").read_text(encoding="utf-8")
    assert "license: cc-by-nc-4.0" in card and "non-commercial" in card
    config = json.loads((sonar_dir / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "sonar" and config["auto_map"]["AutoModel"] == "modeling_sonar.SonarModel"
    for name in ("modeling_sonar.py", "tokenization_sonar.py"):  # written flat: siblings only
        assert "from .." not in (sonar_dir / name).read_text(encoding="utf-8")


def test_convert_refuses_laser_options_and_keeps_a_directory_it_would_overwrite(sonar_dir, tmp_path, capsys):
    args = ["convert", str(FIXTURES / "small.pt"), str(tmp_path / "x"), "--spm-model", str(SPM)]
    assert cli(args + ["--spm-vocab", str(SPM)]) == 2
    assert "SONAR text encoder" in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert cli(["convert", str(FIXTURES / "small.pt"), str(tmp_path / "y")]) == 2  # no --spm-model
    before = sorted(p.name for p in sonar_dir.iterdir())
    assert cli(["convert", str(FIXTURES / "small.pt"), str(sonar_dir), "--spm-model", str(SPM),
                "--attention-heads", "4"]) == 2
    assert sorted(p.name for p in sonar_dir.iterdir()) == before


def test_laser_encoder_gives_the_original_embeddings_and_ids(encoder, record):
    lines, langs = sonar_lines(), record["langs"]
    emb = encoder.encode(lines, lang=langs)
    assert np.abs(emb - np.load(FIXTURES / "small.npy")).max() <= TOLERANCE
    ids = encoder.token_ids(lines, lang=langs)
    # fairseq2's ids before the pipeline's cut to 514 (`ids[:514]`)
    assert all(got == want[:514] for got, want in zip(ids, record["ids"]))
    assert encoder.dim == 64 and encoder.engine == "torch"


def test_languages_by_any_name_and_one_line_errors(encoder):
    text = ["Bonjour le monde."]
    reference = encoder.encode(text, lang="fra_Latn")
    for name in ("fr", "fra", "French", "fr-CA"):
        assert np.array_equal(encoder.encode(text, lang=name), reference), name
    assert sonar_tag("fa") == "pes_Arab" and sonar_tag("ms") == "zsm_Latn" and sonar_tags("zh") == (
        "yue_Hant", "zho_Hans", "zho_Hant")
    with pytest.raises(LaserInputError, match="names 3 of SONAR's languages"):
        encoder.encode(text, lang="zh")
    with pytest.raises(LaserInputError, match="SONAR has no language 'tlh'"):
        encoder.encode(text, lang="tlh")
    with pytest.raises(LaserInputError, match="raw text"):
        encoder.encode(text, lang="fr", pretokenized=True)


def test_auto_detects_each_sentence_and_says_what_it_assumed(encoder):
    lines = ["Das ist ein Haus und es ist sehr groß.", "这是一个房子，它很大。", "Ez kurd im û li Amedê dijîm."]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        auto = encoder.encode(lines, lang="auto")
    messages = [str(w.message) for w in caught]
    assert any("zho_Hans" in m and "give lang=" in m for m in messages), messages
    explicit = encoder.encode(lines, lang=["deu_Latn", "zho_Hans", "kmr_Latn"])  # Kurdish: its script decides
    assert np.abs(auto - explicit).max() <= TOLERANCE


def test_encode_file_records_the_sonar_tokenizer(encoder, tmp_path):
    src = tmp_path / "fr.txt"
    src.write_text("Bonjour le monde.\nIl pleut.\n\n", encoding="utf-8")
    out = encoder.encode_file(src, tmp_path / "fr.npy", lang="fr")
    assert np.abs(np.asarray(out) - encoder.encode(["Bonjour le monde.", "Il pleut.", ""], lang="fra_Latn")).max() \
        <= TOLERANCE
    manifest = json.loads((tmp_path / "fr.npy.manifest.json").read_text(encoding="utf-8"))
    assert manifest["identity"]["tokenizer"] and manifest["identity"]["lang"] == "fr"


def test_a_sonar_model_set_and_the_command_line(sonar_dir, encoder, tmp_path):
    from hf_laser.model_set import write_model_set

    write_model_set(tmp_path / "set", default=sonar_dir, students={"wol_Latn": sonar_dir})
    routed = LaserEncoder.from_pretrained(tmp_path / "set")
    lines = ["Naka nga def?", "How are you?"]
    got = routed.encode(lines, lang=["wol_Latn", "en"])
    assert np.abs(got - encoder.encode(lines, lang=["wol_Latn", "eng_Latn"])).max() <= TOLERANCE
    src = tmp_path / "de.txt"
    src.write_text("Guten Morgen.\nWie geht es dir?\n", encoding="utf-8")
    assert cli(["embed", "--model", str(sonar_dir), "--lang", "German", "-i", str(src), "-o",
                str(tmp_path / "de.npy")]) == 0
    assert np.abs(np.load(tmp_path / "de.npy") - encoder.encode(src.read_text().split("\n")[:2], lang="deu_Latn")) \
        .max() <= TOLERANCE
    assert cli(["embed", "--model", str(sonar_dir), "--engine", "numpy", "--lang", "de", "-i", str(src), "-o",
                str(tmp_path / "x.npy")]) == 2


def test_speed_auto_is_float32_for_sonar_and_says_so(sonar_dir):
    enc = LaserEncoder.from_pretrained(sonar_dir, speed="auto")
    assert enc.speed.mode == "fp32" and "SONAR" in enc.speed.reason


def test_auto_classes_with_hf_laser_installed(sonar_dir, encoder):
    import torch
    from transformers import AutoModel, AutoTokenizer

    model, tokenizer = AutoModel.from_pretrained(sonar_dir), AutoTokenizer.from_pretrained(sonar_dir)
    assert type(model).__name__ == "SonarModel" and type(tokenizer).__name__ == "SonarTokenizer"
    batch = tokenizer(["Bonjour le monde."], lang="fra_Latn", padding=True, return_tensors="pt")
    with torch.inference_mode():
        pooled = model(**batch).pooler_output.numpy()
    assert np.abs(pooled - encoder.encode(["Bonjour le monde."], lang="fr")).max() <= TOLERANCE


def test_sentence_transformers(sonar_dir, encoder):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(sonar_dir), trust_remote_code=True, device="cpu")
    lines = ["Bonjour le monde.", "Il pleut."]
    assert np.abs(model.encode(lines, lang="fr") - encoder.encode(lines, lang="fra_Latn")).max() <= TOLERANCE
    items = [{"text": "Hello.", "lang": "eng_Latn"}, {"text": "Hallo.", "lang": "de"}]
    assert np.abs(model.encode(items) - encoder.encode(["Hello.", "Hallo."], lang=["en", "de"])).max() <= TOLERANCE
    assert model.get_sentence_embedding_dimension() == 64


def test_mteb_takes_the_task_script_for_sonar(sonar_dir):
    pytest.importorskip("mteb")
    from hf_laser.integrations.mteb import LaserMTEBEncoder, sonar_task_language

    task = SimpleNamespace(name="t", eval_langs={"zho_Hant-eng_Latn": ["zho-Hant", "eng-Latn"]})
    assert sonar_task_language(task, "zho_Hant-eng_Latn", "zh") == "zho_Hant"
    assert sonar_task_language(task, "zho_Hant-eng_Latn", "en") == "eng_Latn"
    wrapped = LaserMTEBEncoder(str(sonar_dir))
    assert wrapped.mteb_model_meta.license == "cc-by-nc-4.0" and wrapped.mteb_model_meta.max_tokens == 514


def test_a_sonar_directory_without_hf_laser(sonar_dir, encoder, tmp_path):
    """Remote code: transformers and sentence-transformers load the directory's own code in an environment without
    hf_laser (torch, transformers, safetensors, sentencepiece, sentence-transformers) and give hf_laser's numbers."""
    pytest.importorskip("sentence_transformers")
    from bare_venv import make_bare_venv
    from test_remote_code import BARE, run_in

    python = make_bare_venv(tmp_path / "venv", BARE + ["sentencepiece", "sentence-transformers"])
    lines = ["Bonjour le monde.", "Il pleut aujourd'hui."]
    got = run_in(python, tmp_path, f"""
        import json, importlib.util, torch
        from transformers import AutoModel, AutoTokenizer
        from sentence_transformers import SentenceTransformer
        assert importlib.util.find_spec("hf_laser") is None
        d = {str(sonar_dir)!r}
        model = AutoModel.from_pretrained(d, trust_remote_code=True)
        tok = AutoTokenizer.from_pretrained(d, trust_remote_code=True)
        batch = tok({lines!r}, lang="fra_Latn", padding=True, return_tensors="pt")
        with torch.inference_mode():
            auto = model(**batch).pooler_output.tolist()
        st = SentenceTransformer(d, trust_remote_code=True, device="cpu").encode({lines!r}, lang="fra_Latn").tolist()
        json.dump({{"auto": auto, "st": st, "model": type(model).__name__}}, open("result.json", "w"))
    """)
    want = encoder.encode(lines, lang="fr")
    assert got["model"] == "SonarModel"
    assert np.abs(np.array(got["auto"]) - want).max() <= TOLERANCE
    assert np.abs(np.array(got["st"]) - want).max() <= TOLERANCE


def test_the_laser_sentence_embedding_pipeline(sonar_dir, encoder):
    from hf_laser.integrations.pipelines import laser_pipeline

    lines = ["Bonjour le monde.", "Hello."]
    out = laser_pipeline(sonar_dir)(lines, lang=["fr", "English"])
    assert np.abs(np.array(out) - encoder.encode(lines, lang=["fra_Latn", "eng_Latn"])).max() <= TOLERANCE


def test_mine_with_sonar(sonar_dir, tmp_path):
    pytest.importorskip("faiss")
    src, tgt = tmp_path / "src.fr", tmp_path / "tgt.en"
    src.write_text("Bonjour le monde.\nIl pleut.\nLe chat dort.\n", encoding="utf-8")
    tgt.write_text("Hello world.\nIt is raining.\nThe cat sleeps.\n", encoding="utf-8")
    assert cli(["mine", "--model", str(sonar_dir), "--src-lang", "fr", "--tgt-lang", "en", str(src), str(tgt), "-o",
                str(tmp_path / "pairs.tsv"), "--threshold", "0", "--k", "2"]) == 0
    rows = (tmp_path / "pairs.tsv").read_text(encoding="utf-8").strip().split("\n")
    assert rows and all(len(row.split("\t")) == 3 for row in rows)


def test_transformers_batch_sentences_of_similar_length(encoder):
    """A transformer computes over its batches' padding (SONAR, LASER3 students): no sentence in a batch is shorter
    than 0.8 of its longest, whatever the token budget; a BiLSTM, which packs by true lengths, has no such bound."""
    from hf_laser.encoder import plan_batches

    lengths = [100, 95, 90, 81, 80, 79, 50, 40, 10, 9]
    assert [list(map(int, b)) for b in plan_batches(lengths, 12000, None, 0.8)] == [[0, 1, 2, 3, 4], [5], [6, 7],
                                                                                     [8, 9]]
    assert len(plan_batches(lengths, 12000)) == 1
    assert encoder.min_length_ratio == 0.8
    assert LaserEncoder.from_pretrained().min_length_ratio is None
    lines = ["Bonjour.", "Il pleut beaucoup aujourd'hui dans toute la région, et demain aussi."] * 3
    one_by_one = np.concatenate([encoder.encode([line], lang="fr") for line in lines])
    assert np.abs(encoder.encode(lines, lang="fr") - one_by_one).max() <= TOLERANCE
