"""Model sets: LASER2 plus LASER3 students as one encoder that embeds each sentence with the model of its language
(Python API, languages named every way, files, the command line's embed / similar / mine)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from laser3_helpers import CVOCAB, SHARED, SPM, require_shared, tiny_namespace_checkpoint

from hf_laser import LaserEncoder
from hf_laser.cli import main as cli_main
from hf_laser.checkpoints.convert import convert
from hf_laser.text.languages import flores_codes, names_student, student_code
from hf_laser.model_set import SET_FILE, RoutedLaserEncoder, UnknownLanguage, write_model_set

LASER2_TINY = SHARED / "reference" / "laser2" / "laser2-ref-tiny.pt"  # a BiLSTM of 96 dimensions
WOLOF = ["Naka nga def?", "Maa ngi fi rekk.", "Jërëjëf."]
FRENCH = ["Bonjour tout le monde.", "Il fait beau aujourd'hui."]


@pytest.fixture(scope="module")
def model_set(tmp_path_factory):
    """A set directory: the LASER2 reference model as default, 96-wide students for wol_Latn, zho_Hans, zho_Hant."""
    require_shared()
    root = tmp_path_factory.mktemp("set")
    convert(LASER2_TINY, root / "laser2", spm_model=SPM, spm_vocab=CVOCAB)
    for i, code in enumerate(["wol_Latn", "zho_Hans", "zho_Hant"]):
        ckpt = tiny_namespace_checkpoint(root / f"laser3-{code}.v1.pt", width=96)
        convert(ckpt, root / f"laser3-{code}", spm_model=SPM, spm_vocab=CVOCAB)
    write_model_set(root, default=root / "laser2", students={code: root / f"laser3-{code}"
                                                             for code in ("wol_Latn", "zho_Hans", "zho_Hant")})
    return root


def test_language_names():
    assert flores_codes("wol_Latn") == flores_codes("WOL_LATN") == flores_codes("wol") == flores_codes("wo") == \
        flores_codes("wolof") == ("wol_Latn",)
    assert flores_codes(" Modern  Standard Arabic ") == ("arb_Arab", "arb_Latn")
    assert "zho_Hans" in flores_codes("zh") and "zho_Hant" in flores_codes("zh")
    assert flores_codes("fr-FR") == ("fra_Latn",)
    assert flores_codes("klingon") == ()
    # Kurdish is a macrolanguage, as Chinese: both FLORES members (Tatoeba's kur is Kurmanji, FLORES's kmr_Latn)
    assert flores_codes("ku") == flores_codes("kur") == flores_codes("Kurdish") == ("ckb_Arab", "kmr_Latn")
    # languages outside FLORES-200 are recorded with their script, as FLORES codes are written
    assert student_code("wolof") == "wol_Latn" and student_code("bre_Latn") == "bre_Latn"
    for bad, says in (("br", "outside FLORES-200: .* bre_Latn"), ("zh", "more than one"), ("klingon", "names no"),
                      ("xyz_Latn", "names no")):
        with pytest.raises(ValueError, match=says):
            student_code(bad)
    assert all(names_student(name, "bre_Latn") for name in ("br", "bre", "BRE_LATN", "bre-Latn"))
    assert not any(names_student(name, "bre_Latn") for name in ("bre_Cyrl", "fr", "klingon"))


def test_convert_records_the_student_language(model_set):
    assert json.loads((model_set / "laser3-wol_Latn" / "config.json").read_text())["language"] == "wol_Latn"
    assert "language" not in json.loads((model_set / "laser2" / "config.json").read_text())


def test_each_sentence_goes_to_the_model_of_its_language(model_set):
    routed = LaserEncoder.from_pretrained(model_set)
    assert isinstance(routed, RoutedLaserEncoder) and routed.dim == 96
    laser2 = LaserEncoder.from_pretrained(model_set / "laser2")
    wolof = LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn")
    mixed = [WOLOF[0], FRENCH[0], WOLOF[1], FRENCH[1]]
    emb = routed.encode(mixed, lang=["wol_Latn", "fr", "wolof", "french"])
    np.testing.assert_array_equal(emb[[0, 2]], wolof.encode([WOLOF[0], WOLOF[1]], lang="wol_Latn"))
    np.testing.assert_array_equal(emb[[1, 3]], laser2.encode(FRENCH, lang="fr"))
    assert np.abs(emb[0] - laser2.encode(WOLOF[0], lang="fr")).max() > 1e-3  # really another model
    for name in ("wol", "wo", "WOL_LATN", "wolof"):
        np.testing.assert_array_equal(routed.encode(WOLOF, lang=name), wolof.encode(WOLOF, lang="wol_Latn"))
    assert routed.route("ace_Latn") == "default" and routed.route("fra_Latn") == "default"
    np.testing.assert_array_equal(routed.encode(FRENCH[0], lang="fra_Latn"), laser2.encode(FRENCH[0], lang="fr"))


def test_unknown_and_ambiguous_languages_are_one_clear_error(model_set):
    routed = LaserEncoder.from_pretrained(model_set)
    with pytest.raises(UnknownLanguage, match="unknown language 'klingon': give a FLORES-200 code .*students for "
                                              "wol_Latn, zho_Hans, zho_Hant and a default model"):
        routed.encode(FRENCH, lang="klingon")
    with pytest.raises(UnknownLanguage, match="'zh' names 2 languages .*zho_Hans, zho_Hant"):
        routed.encode(FRENCH, lang="zh")
    with pytest.raises(UnknownLanguage, match="give lang"):
        routed.encode(FRENCH)
    with pytest.raises(UnknownLanguage, match="'auto' cannot choose"):
        routed.encode(FRENCH, lang="auto")


def test_a_list_of_directories_is_a_set(model_set):
    routed = LaserEncoder.from_pretrained([model_set / "laser2", model_set / "laser3-wol_Latn"])
    assert routed.route("wolof") == "wol_Latn" and routed.route("zh") == "default"
    with pytest.raises(ValueError, match="two models without a language"):
        LaserEncoder.from_pretrained([model_set / "laser2", model_set / "laser2"])


def test_a_set_without_default_refuses_other_languages(model_set, tmp_path):
    write_model_set(tmp_path, default=None, students={"wol_Latn": model_set / "laser3-wol_Latn"})
    routed = LaserEncoder.from_pretrained(tmp_path)
    assert routed.encode(WOLOF, lang="wo").shape == (3, 96)
    with pytest.raises(UnknownLanguage, match="has no model for 'fr' .* and no default model"):
        routed.encode(FRENCH, lang="fr")


def test_write_model_set_checks_its_members(model_set, tmp_path):
    with pytest.raises(UnknownLanguage, match="'zh' names more than one"):
        write_model_set(tmp_path, default=None, students={"zh": model_set / "laser3-zho_Hans"})
    with pytest.raises(FileNotFoundError, match="no config.json"):
        write_model_set(tmp_path, default=tmp_path / "missing", students={})
    other = tmp_path / "other"
    convert(tiny_namespace_checkpoint(tmp_path / "o.pt", width=32), other, spm_model=SPM, spm_vocab=CVOCAB)
    with pytest.raises(ValueError, match="embeddings of one size"):
        write_model_set(tmp_path, default=model_set / "laser2", students={"wol_Latn": other})
    broken = tmp_path / "broken"
    shutil.copytree(model_set, broken, ignore=shutil.ignore_patterns("laser3-wol_Latn"))
    with pytest.raises(FileNotFoundError, match="the model of wol_Latn is missing"):
        LaserEncoder.from_pretrained(broken)
    (broken / SET_FILE).write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="is not an hf-laser model set file"):
        LaserEncoder.from_pretrained(broken)


def test_one_student_for_several_languages_and_a_language_outside_flores(model_set, tmp_path):
    """A multilingual student (one directory for several languages, one outside FLORES-200) is loaded once and
    routed to by every name of each of its languages; the other languages go to the default."""
    student = model_set / "laser3-wol_Latn"
    write_model_set(tmp_path, default=model_set / "laser2", students={"wo": student, "bre_Latn": student,
                                                                      "kmr_Latn": student})
    assert sorted(json.loads((tmp_path / SET_FILE).read_text())["students"]) == ["bre_Latn", "kmr_Latn", "wol_Latn"]
    loads = []
    routed = RoutedLaserEncoder.from_pretrained(tmp_path, lambda path, **kw: loads.append(path) or
                                                LaserEncoder.from_pretrained(path, **kw))
    alone = LaserEncoder.from_pretrained(student)
    for name, code in (("br", "bre_Latn"), ("bre", "bre_Latn"), ("bre_Latn", "bre_Latn"), ("kur", "kmr_Latn"),
                       ("ku", "kmr_Latn"), ("wolof", "wol_Latn")):
        assert routed.route(name) == code
        np.testing.assert_array_equal(routed.encode(FRENCH, lang=name), alone.encode(FRENCH, lang=code))
    assert routed.route("fr") == routed.route("cor") == "default"
    routed.encode(FRENCH, lang="fr")
    assert len(loads) == 2  # the student once for its three languages, and the default
    with pytest.raises(UnknownLanguage, match="outside FLORES-200"):
        write_model_set(tmp_path, default=None, students={"br": student})


def test_the_evaluation_cache_keys_a_set_by_the_member_of_each_language(model_set, tmp_path):
    """Two sets that differ only in one language's student share no cached embedding of that language (they did:
    a set had no identity of its own, so every set's Tatoeba of a language reused the first set's numbers, and a
    mining run's embedding shards were reused by any other set), and share the default's for the other languages."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO))
    from evaluation.cache import EmbeddingCache

    write_model_set(tmp_path / "a", default=model_set / "laser2", students={"wol_Latn": model_set / "laser3-wol_Latn"})
    # (the fixture's students are one random model under three names: LASER2 stands in for another student)
    write_model_set(tmp_path / "b", default=model_set / "laser2", students={"wol_Latn": model_set / "laser2"})
    first, second = (EmbeddingCache(LaserEncoder.from_pretrained(tmp_path / name), tmp_path / "cache",
                                    show_progress=False) for name in ("a", "b"))
    a, b = (np.asarray(cache.embed_texts(WOLOF, "wol_Latn")) for cache in (first, second))
    np.testing.assert_array_equal(a, LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn").encode(WOLOF,
                                                                                                  lang="wol_Latn"))
    np.testing.assert_array_equal(b, LaserEncoder.from_pretrained(model_set / "laser2").encode(WOLOF, lang="wol_Latn"))
    assert np.abs(a - b).max() > 1e-3
    assert second.misses == 1 and second.hits == 0
    first.embed_texts(FRENCH, "fr")
    second.embed_texts(FRENCH, "fr")
    assert second.hits == 1  # the same default model: the same entry
    with pytest.raises(TypeError, match="is a model set"):
        LaserEncoder.from_pretrained(tmp_path / "a").model_identity()

    # the same for the manifests of embedded files (hf-laser mine / embed-shards reuse shards whose identity matches)
    from hf_laser.outputs import embedding_identity

    info = {"sha256": "0" * 64, "size": 1, "lines": 1}
    set_a, set_b = (LaserEncoder.from_pretrained(tmp_path / name) for name in ("a", "b"))
    wolof = [embedding_identity(e, info, lang="wol_Latn") for e in (set_a, set_b)]
    assert wolof[0]["model"] != wolof[1]["model"]
    assert wolof[0] == embedding_identity(LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn"), info,
                                          lang="wol_Latn")
    assert embedding_identity(set_a, info, lang="fr") == embedding_identity(set_b, info, lang="fr")
    mixed = embedding_identity(set_a, info, lang=["fr", "wol_Latn"])
    assert set(mixed["model"]) == {"fr", "wol_Latn"} and mixed["model"]["wol_Latn"] == wolof[0]["model"]


def test_encode_file_uses_the_model_of_the_file_language(model_set, tmp_path):
    routed = LaserEncoder.from_pretrained(model_set)
    text = tmp_path / "wo.txt"
    text.write_text("\n".join(WOLOF) + "\n", encoding="utf-8")
    out = routed.encode_file(text, tmp_path / "wo.npy", lang="wolof")
    wolof = LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn")
    np.testing.assert_array_equal(np.asarray(out), wolof.encode(WOLOF, lang="wol_Latn"))
    # the output's identity is the student's, so it is never reused or resumed with another model's rows
    manifest = json.loads((tmp_path / "wo.npy.manifest.json").read_text())
    assert manifest["identity"]["model"] == wolof.model_identity()["model"]
    laser2 = LaserEncoder.from_pretrained(model_set / "laser2")
    assert manifest["identity"]["model"] != laser2.model_identity()["model"]
    # and it names the member that embedded it (#71), outside the identity: manifests written before stay valid
    assert manifest["model_set"] == {"set": str(model_set), "member": "wol_Latn",
                                     "model": str((model_set / "laser3-wol_Latn").resolve())}
    assert "model_set" not in manifest["identity"]
    routed.encode_file(text, tmp_path / "fr.npy", lang="fr")
    assert json.loads((tmp_path / "fr.npy.manifest.json").read_text())["model_set"]["member"] == "default"


def test_command_line_embed_similar_mine_route_by_language(model_set, tmp_path, capsys):
    wo, fr = tmp_path / "wo.txt", tmp_path / "fr.txt"
    wo.write_text("\n".join(WOLOF) + "\n", encoding="utf-8")
    fr.write_text("\n".join(FRENCH) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert cli_main(["embed", "--model", str(model_set), "--lang", "wolof", "-i", str(wo), "-o",
                     str(tmp_path / "wo.npy"), "-q"]) == 0
    # the member chosen is said once (#71), and recorded in the manifest
    err = capsys.readouterr().err
    assert err.count(f"{model_set.name} embeds wol_Latn with its student (laser3-wol_Latn)") == 1, err
    assert json.loads((tmp_path / "wo.npy.manifest.json").read_text())["model_set"]["member"] == "wol_Latn"
    wolof = LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn")
    np.testing.assert_allclose(np.load(tmp_path / "wo.npy"), wolof.encode(WOLOF, lang="wol_Latn"), atol=1e-6)
    assert cli_main(["embed", "--model", str(model_set), "--lang", "klingon", "-i", str(wo), "-o",
                     str(tmp_path / "k.npy")]) == 2
    err = capsys.readouterr().err
    assert "'klingon' is not a language code" in err and "auto" not in err  # (a set refuses auto: not offered)
    assert cli_main(["embed", "--model", str(model_set), "--lang", "auto", "-i", str(wo), "-o",
                     str(tmp_path / "a.npy")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "hf-laser embed: error: --lang auto cannot choose among a model set's models: give the " \
        "language (a code or a name)"
    # a code a single model embeds with the Moses defaults is no language a set has a model for: one error, and no
    # note saying it will be embedded (#71)
    assert cli_main(["embed", "--model", str(model_set), "--lang", "xx", "-i", str(wo), "-o",
                     str(tmp_path / "xx.npy")]) == 2
    err = capsys.readouterr().err
    assert "unknown language 'xx'" in err and "Moses defaults" not in err and not (tmp_path / "xx.npy").exists()
    assert cli_main(["similar", "--model", str(model_set), "--lang", "wo", "--target-lang", "fr", "--target",
                     str(fr), "-k", "1", "--text", "Naka nga def?"]) == 0
    err = capsys.readouterr().err
    assert "embeds wo with its student for wol_Latn" in err and "embeds fr with its default model (laser2)" in err
    assert cli_main(["embed-shards", "--model", str(model_set), "--embed-dir", str(tmp_path / "shards"), "--input",
                     "wo", str(wo), "--input", "fr", str(fr), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count("embeds wo with its student for wol_Latn") == 1 and err.count("embeds fr with its default") == 1
    pytest.importorskip("faiss")
    assert cli_main(["mine", "--model", str(model_set), str(wo), str(fr), "--src-lang", "wol_Latn", "--tgt-lang", "fr",
                     "-o", str(tmp_path / "pairs.tsv"), "-k", "1", "--no-progress"]) == 0
    assert (tmp_path / "pairs.tsv").read_text(encoding="utf-8").strip()
    err = capsys.readouterr().err
    assert err.count("embeds wol_Latn with its student (laser3-wol_Latn)") == 1 and err.count("embeds fr with its default") == 1, err


def test_serve_routes_each_input_and_lists_the_members(model_set):
    from serve_helpers import ServerProcess, require_serve_extra

    require_serve_extra()
    import requests

    server = ServerProcess("--model", str(model_set))
    try:
        texts = [WOLOF[0], FRENCH[0], WOLOF[1]]
        got = requests.post(f"{server.url}/v1/embeddings", json={"input": texts, "lang": ["wolof", "fr", "wo"]},
                            timeout=60).json()
        emb = np.array([row["embedding"] for row in got["data"]], dtype=np.float32)
        wolof = LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn")
        laser2 = LaserEncoder.from_pretrained(model_set / "laser2")
        np.testing.assert_allclose(emb[[0, 2]], wolof.encode([WOLOF[0], WOLOF[1]], lang="wol_Latn"), atol=1e-6)
        np.testing.assert_allclose(emb[1], laser2.encode(FRENCH[0], lang="fr"), atol=1e-6)
        # #71: one form of language in every answer (LASER's preprocessing code, as a single model's server says
        # it), and the member that embedded each input, as /v1/models names it
        assert [row["lang"] for row in got["data"]] == ["wo", "fr", "wo"]
        name = model_set.name
        assert [row["model"] for row in got["data"]] == [f"{name}/wol_Latn", f"{name}/default", f"{name}/wol_Latn"]
        ids = [m["id"] for m in requests.get(f"{server.url}/v1/models", timeout=10).json()["data"]]
        assert ids == [name, f"{name}/default", f"{name}/wol_Latn", f"{name}/zho_Hans", f"{name}/zho_Hant"]
        for lang, match in (("auto", "must name it"), ("klingon", "'klingon' is not a language code"),
                            ("qqq", "unknown language 'qqq'"), ("zh", "names 2 languages")):
            answer = requests.post(f"{server.url}/v1/embeddings", json={"input": WOLOF, "lang": lang}, timeout=30)
            assert answer.status_code == 400 and match in answer.json()["error"]["message"]
        # a set refuses auto: no message of its suggests it (#71)
        for lang in (["wo"], ["wo", "", "fr"], "fr,en", 7):
            answer = requests.post(f"{server.url}/v1/embeddings", json={"input": WOLOF, "lang": lang}, timeout=30)
            message = answer.json()["error"]["message"]
            assert answer.status_code == 400 and "auto" not in message, message
        vec = requests.post(f"{server.url}/vectorize", data={"q": "\n".join(WOLOF), "lang": "wol_Latn"}, timeout=30)
        np.testing.assert_allclose(np.array(vec.json()["embedding"]), wolof.encode(WOLOF, lang="wol_Latn"), atol=1e-6)
        assert requests.get(f"{server.url}/health", timeout=10).json()["members"] == [
            "default", "wol_Latn", "zho_Hans", "zho_Hant"]
    finally:
        server.stop()


def test_pipeline_of_a_set_routes_each_sentence(model_set):
    from hf_laser.integrations.pipelines import RoutedLaserPipeline, laser_pipeline

    embed = laser_pipeline(model_set)
    assert isinstance(embed, RoutedLaserPipeline)
    got = np.array(embed([WOLOF[0], FRENCH[0]], lang=["wolof", "fr"]), dtype=np.float32)
    wolof = LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn")
    laser2 = LaserEncoder.from_pretrained(model_set / "laser2")
    np.testing.assert_allclose(got[0], wolof.encode(WOLOF[0], lang="wol_Latn"), atol=1e-6)
    np.testing.assert_allclose(got[1], laser2.encode(FRENCH[0], lang="fr"), atol=1e-6)
    single = np.array(embed(WOLOF[1], lang="wo"), dtype=np.float32)
    np.testing.assert_allclose(single, wolof.encode(WOLOF[1], lang="wo"), atol=1e-6)
    with pytest.raises(UnknownLanguage, match="unknown language 'klingon'"):
        embed(FRENCH, lang="klingon")


def test_sentence_transformers_of_a_set_routes_each_sentence(model_set, tmp_path):
    st = pytest.importorskip("sentence_transformers", reason="needs the sentence-transformers extra")
    from hf_laser.integrations.sentence_transformers_sets import set_sentence_transformer

    model = set_sentence_transformer(model_set)
    wolof = LaserEncoder.from_pretrained(model_set / "laser3-wol_Latn")
    laser2 = LaserEncoder.from_pretrained(model_set / "laser2")
    items = [{"text": WOLOF[0], "lang": "wolof"}, {"text": FRENCH[0], "lang": "fr"}, {"text": WOLOF[1], "lang": "wo"}]
    got = model.encode(items)
    np.testing.assert_allclose(got[[0, 2]], wolof.encode([WOLOF[0], WOLOF[1]], lang="wol_Latn"), atol=1e-6)
    np.testing.assert_allclose(got[1], laser2.encode(FRENCH[0], lang="fr"), atol=1e-6)
    np.testing.assert_allclose(model.encode(WOLOF, lang="wol_Latn"), wolof.encode(WOLOF, lang="wol_Latn"), atol=1e-6)
    with pytest.raises(UnknownLanguage, match="give lang"):
        model.encode(WOLOF)
    model.save(str(tmp_path / "saved"))
    again = st.SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True)
    np.testing.assert_allclose(again.encode(items), got, atol=1e-6)
    assert LaserEncoder.from_pretrained(tmp_path / "saved").route("wolof") == "wol_Latn"
