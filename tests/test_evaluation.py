"""evaluation/ (Tatoeba, XNLI, MLDoc, run, cache) and hf_laser.checkpoints.hub (card with results, push).

Data fixtures are written in tmp dirs in the benchmarks' original distribution formats (XNLI-1.0 TSV / JSONL,
MultiNLI TSV, MLDoc `LABEL<TAB>TEXT`, Tatoeba v1, BUCC); Tatoeba also runs on the reference `.bpe` files of
../shared. The model is the converted reference checkpoint (random weights) with pre-tokenised input.
"""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import pytest
import torch

from conftest import REFERENCE, REPO, SHARED, require_shared

sys.path.insert(0, str(REPO))  # the evaluation/ package lives next to src/

TATOEBA_BPE = REFERENCE / "tatoeba"
SHARED_TATOEBA = SHARED / "data" / "tatoeba" / "v1"
WORDS = ["the", "cat", "dog", "house", "is", "a", "tom", "not", "no", "team"]
TOPICS = {"CCAT": ["company", "market", "big"], "ECAT": ["economy", "red", "house"],
          "GCAT": ["government", "minister", "election"], "MCAT": ["war", "game", "sport"]}
XNLI_HEADER = ("language\tgold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
               "sentence2_parse\tsentence1\tsentence2\tpromptID\tpairID\tgenre\tlabel1\tlabel2\tlabel3\tlabel4\t"
               "label5\tsentence1_tokenized\tsentence2_tokenized\tmatch")
MNLI_HEADER = ("gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\t"
               "sentence1\tsentence2\tpromptID\tpairID\tgenre\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5")


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    """Tiny models gain nothing from threads; oversubscribed OpenMP (pytest -n 2) slows small LSTM calls a lot."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def encoder(tiny_dictionary_dir):
    from hf_laser.encoder import LaserEncoder

    return LaserEncoder.from_pretrained(tiny_dictionary_dir)


@pytest.fixture()
def cache(encoder, tmp_path):
    from evaluation.cache import EmbeddingCache

    return EmbeddingCache(encoder, tmp_path / "cache", show_progress=False)


# ---------------------------------------------------------------------------------------------- fixture writers
def _sentence(rng, n=5):
    return " ".join(rng.choice(WORDS) for _ in range(n)) + " ."


def nli_examples(n, seed):
    """(premise, hypothesis, label): entailment h == p, neutral h = p + 'big red .', contradiction unrelated."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = ("entailment", "neutral", "contradiction")[i % 3]
        p = _sentence(rng)
        h = p if label == "entailment" else (p + " big red ." if label == "neutral" else "no " + _sentence(rng, 4))
        out.append((p, h, label))
    return out


def write_xnli(folder, langs=("en", "fr", "de"), n_dev=30, n_test=30):
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("dev", n_dev, 1), ("test", n_test, 2)):
        rows = [XNLI_HEADER]
        for lang in langs:  # the original groups by language; same pairs (translations) in every language
            for i, (p, h, label) in enumerate(nli_examples(n, seed)):
                rows.append("\t".join([lang, label, "", "", "", "", p, h, str(i // 3 + 1), str(i + 1), "fiction",
                                       label, label, label, label, label, p, h, "True"]))
        (folder / f"xnli.{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def write_mnli(folder, n=150, no_gold=1):
    folder.mkdir(parents=True, exist_ok=True)
    rows = [MNLI_HEADER]
    examples = nli_examples(n, 0)
    for i, (p, h, label) in enumerate(examples):
        rows.append("\t".join([label, "( x )", "( y )", "(ROOT x)", "(ROOT y)", p, h, str(i), f"{i}e", "fiction",
                               label, label, label, "", ""]))
    for j in range(no_gold):  # no annotator consensus: dropped and counted
        rows.append("\t".join(["-", "", "", "", "", "tom is a cat .", "the dog is red .", "9", "9n", "fiction",
                               "neutral", "entailment", "contradiction", "", ""]))
    path = folder / "multinli_1.0_train.txt"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path, examples


def mldoc_docs(n, seed):
    rng = random.Random(seed)
    labels = list(TOPICS)
    out = []
    for i in range(n):
        label = labels[i % 4]
        sents = []
        for _ in range(rng.randint(2, 3)):
            words = [rng.choice(TOPICS[label]) for _ in range(3)] + [rng.choice(WORDS) for _ in range(2)]
            rng.shuffle(words)
            sents.append(" ".join(words) + " .")
        out.append((label, " ".join(sents)))
    return out


def write_mldoc(folder, langs=("english", "german"), n_train=48, n_dev=16, n_test=16, bytes_literal=("german",)):
    folder.mkdir(parents=True, exist_ok=True)

    def write(name, docs, as_bytes=False):
        lines = [f"{lab}\t{repr(text.encode('utf-8')) if as_bytes else text}" for lab, text in docs]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")

    write("english.train.1000", mldoc_docs(n_train, 0))
    write("english.dev", mldoc_docs(n_dev, 1))
    for lang in langs:
        write(f"{lang}.test", mldoc_docs(n_test, 2), as_bytes=lang in bytes_literal)
    return folder


def write_bucc(folder, pair="de-en", n=24, n_gold=8):
    xx = pair.split("-")[0]
    d = folder / pair
    d.mkdir(parents=True, exist_ok=True)
    for split, seed in (("training", 3), ("sample", 4)):
        rng = random.Random(seed)
        src = [_sentence(rng, 6) for _ in range(n)]
        tgt = [_sentence(rng, 6) for _ in range(n)]
        gold = []
        for i in range(n_gold):  # parallel pairs: identical token strings on both sides
            tgt[i * 2] = src[i]
            gold.append((f"{xx}-{i + 1:09d}", f"en-{i * 2 + 1:09d}"))
        (d / f"{pair}.{split}.{xx}").write_text("".join(f"{xx}-{i + 1:09d}\t{s}\n" for i, s in enumerate(src)))
        (d / f"{pair}.{split}.en").write_text("".join(f"en-{i + 1:09d}\t{s}\n" for i, s in enumerate(tgt)))
        (d / f"{pair}.{split}.gold").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(gold)))
    return folder


# ---------------------------------------------------------------------------------------------- Tatoeba
def test_language_table_matches_shared_reference():
    require_shared(REFERENCE / "tatoeba_langs.tsv")
    from evaluation.tatoeba import TATOEBA_LANGS

    rows = (REFERENCE / "tatoeba_langs.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert dict(r.split("\t") for r in rows if r) == TATOEBA_LANGS


def test_retrieval_errors_cosine_margin_and_textual():
    from evaluation.tatoeba import retrieval_errors

    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 16)).astype(np.float32)
    assert retrieval_errors(x, x * 3.0) == {"xx2en_errors": 0, "en2xx_errors": 0, "n": 50}
    perm = np.arange(50)
    perm[[0, 1, 2]] = [1, 2, 0]  # three targets rotated: three errors each way
    assert retrieval_errors(x, x[perm]) == {"xx2en_errors": 3, "en2xx_errors": 3, "n": 50}
    # duplicates of the gold text are not errors in textual mode
    texts = [f"s{i}" for i in range(50)]
    texts[1] = texts[0]
    y = x.copy()
    y[[0, 1]] = y[[1, 0]]
    assert retrieval_errors(x, y)["xx2en_errors"] == 2
    assert retrieval_errors(x, y, src_texts=texts, tgt_texts=texts) == {"xx2en_errors": 0, "en2xx_errors": 0,
                                                                         "n": 50}
    # a hub: target 3 is close to every source and steals source 1's cosine nearest neighbour; the ratio margin
    # (k=2) divides by the hub's dense neighbourhood: 0.743 / 0.635 for target 1 beats 0.787 / 0.823 for the hub
    src = np.array([[1, 0, 0, .3], [0, 1, 0, .9], [0, 0, 1, .3], [.3, .3, .3, 1]], dtype=np.float32)
    tgt = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [.5, .5, .5, 1]], dtype=np.float32)
    assert retrieval_errors(src, tgt) == {"xx2en_errors": 1, "en2xx_errors": 0, "n": 4}
    assert retrieval_errors(src, tgt, margin="ratio", k=2) == {"xx2en_errors": 0, "en2xx_errors": 0, "n": 4}
    with pytest.raises(ValueError, match="aligned"):
        retrieval_errors(x, x[:10])
    with pytest.raises(ValueError, match="margin"):
        retrieval_errors(x, x, margin="cosine")


def _brute_force(encoder, src_file, tgt_file):
    def emb(path):
        lines = path.read_text(encoding="utf-8").split("\n")[:-1]
        e = encoder.encode(lines, pretokenized=True)
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    s, t = emb(src_file), emb(tgt_file)
    sim = s @ t.T
    n = len(s)
    return (100 * (sim.argmax(1) != np.arange(n)).mean(), 100 * (sim.argmax(0) != np.arange(n)).mean())


def test_tatoeba_on_reference_files_matches_brute_force_and_caches(encoder, cache):
    require_shared(TATOEBA_BPE)
    from evaluation.tatoeba import evaluate_tatoeba, tatoeba_paths

    res = evaluate_tatoeba(cache, ["fra", "deu"], folder=TATOEBA_BPE, suffix=".bpe", pretokenized=True,
                           margin="ratio", show_progress=False, log=lambda m: None)
    for lang in ("fra", "deu"):
        xx2en, en2xx = _brute_force(encoder, *tatoeba_paths(TATOEBA_BPE, lang, ".bpe"))
        assert res[lang]["n"] == 100
        assert res[lang]["xx2en_error"] == pytest.approx(xx2en, abs=1e-9)
        assert res[lang]["en2xx_error"] == pytest.approx(en2xx, abs=1e-9)
        assert 0 <= res[lang]["xx2en_error_margin"] <= 100
    assert res["average"]["xx2en_error"] == pytest.approx((res["fra"]["xx2en_error"] + res["deu"]["xx2en_error"]) / 2,
                                                          abs=0.006)
    assert res["average"] == {**res["average"], "n": 200, "languages": 2}
    assert (cache.hits, cache.misses) == (0, 4)
    entries = sorted(cache.dir.glob("*.npy"))
    assert len(entries) == 4 and not list(cache.dir.glob("*partial*"))
    again = evaluate_tatoeba(cache, ["fra", "deu"], folder=TATOEBA_BPE, suffix=".bpe", pretokenized=True,
                             margin="ratio", show_progress=False, log=lambda m: None)
    assert again == res and (cache.hits, cache.misses) == (4, 4)
    meta = json.loads(entries[0].with_suffix(".json").read_text())
    assert meta["n"] == 100 and meta["dtype"] == "float32"


def test_cache_keys_on_content_lang_and_dtype(encoder, tmp_path):
    from evaluation.cache import EmbeddingCache

    f = tmp_path / "a.txt"
    f.write_text("the cat is red .\ntom is a dog .\n", encoding="utf-8")
    c = EmbeddingCache(encoder, tmp_path / "c", show_progress=False)
    a = c.embed_file(f, "en", pretokenized=True)
    assert isinstance(a, np.memmap) and a.shape == (2, encoder.dim) and a.dtype == np.float32
    np.testing.assert_allclose(a, encoder.encode(["the cat is red .", "tom is a dog ."], pretokenized=True))
    b = c.embed_texts(["the cat is red .", "tom is a dog ."], "en", pretokenized=True)  # same content: same key
    assert c.hits == 1 and np.array_equal(a, b)
    c.embed_file(f, "fr", pretokenized=True)  # another language: another entry
    f.write_text("the cat is red .\ntom is not a dog .\n", encoding="utf-8")  # edited file: recomputed
    edited = c.embed_file(f, "en", pretokenized=True)
    assert c.misses == 3 and not np.array_equal(edited[1], a[1])
    half = EmbeddingCache(encoder, tmp_path / "c", fp16=True, show_progress=False).embed_file(f, "en",
                                                                                          pretokenized=True)
    assert half.dtype == np.float16
    np.testing.assert_allclose(half.astype(np.float32), edited, atol=2e-3)
    off = EmbeddingCache(encoder, tmp_path / "off", enabled=False, show_progress=False)
    off.embed_texts(["tom ."], "en", pretokenized=True)
    assert not (tmp_path / "off").exists()


def test_tatoeba_bad_input_errors_name_the_files(cache, tmp_path):
    from evaluation.tatoeba import evaluate_tatoeba, load_tatoeba_local

    d = tmp_path / "tat"
    d.mkdir()
    (d / "tatoeba.aaa-eng.aaa").write_text("a .\nb .\nc .\n", encoding="utf-8")
    (d / "tatoeba.aaa-eng.eng").write_text("a .\nb .\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"tatoeba\.aaa-eng\.aaa has 3 lines, .*tatoeba\.aaa-eng\.eng has 2"):
        evaluate_tatoeba(cache, ["aaa"], folder=d, pretokenized=True, show_progress=False, log=lambda m: None)
    with pytest.raises(FileNotFoundError, match=r"tatoeba\.bbb-eng\.bbb"):
        evaluate_tatoeba(cache, ["bbb"], folder=d, pretokenized=True, show_progress=False, log=lambda m: None)
    (d / "tatoeba.ccc-eng.ccc").write_text("", encoding="utf-8")
    (d / "tatoeba.ccc-eng.eng").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty Tatoeba pair: .*tatoeba\.ccc-eng\.ccc"):
        load_tatoeba_local(d, "ccc")
    # a '\r' inside a sentence does not split it (lines are split on '\n' only)
    (d / "tatoeba.ddd-eng.ddd").write_text("x\ry .\nz .\n", encoding="utf-8")
    (d / "tatoeba.ddd-eng.eng").write_text("x y .\nz .\n", encoding="utf-8")
    ds = load_tatoeba_local(d, "ddd")
    assert ds["source"] == ["x\ry .", "z ."] and ds.column_names == ["source", "target"]


def test_tatoeba_hub_loader_through_datasets_equals_local(cache, tmp_path):
    require_shared(TATOEBA_BPE)
    from evaluation.tatoeba import evaluate_tatoeba, load_tatoeba_hub, load_tatoeba_local

    # a dataset repository laid out like mteb/tatoeba-bitext-mining (config per pair, split test), read offline
    repo = tmp_path / "hub"
    (repo / "fra-eng").mkdir(parents=True)
    local = load_tatoeba_local(TATOEBA_BPE, "fra", ".bpe")
    with open(repo / "fra-eng" / "test.jsonl", "w", encoding="utf-8") as f:
        for s, t in zip(local["source"], local["target"]):
            f.write(json.dumps({"sentence1": s, "sentence2": t}) + "\n")
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: fra-eng\n  data_files:\n  - split: test\n"
                                    "    path: fra-eng/test.jsonl\n---\n", encoding="utf-8")
    ds = load_tatoeba_hub("fra", str(repo))
    assert ds["source"] == local["source"] and ds["target"] == local["target"]
    hub = evaluate_tatoeba(cache, ["fra"], hub_repo=str(repo), pretokenized=True, show_progress=False,
                           log=lambda m: None)
    loc = evaluate_tatoeba(cache, ["fra"], folder=TATOEBA_BPE, suffix=".bpe", pretokenized=True,
                           show_progress=False, log=lambda m: None)
    assert hub == loc
    with pytest.raises(ValueError, match="no column 'src'"):
        load_tatoeba_hub("fra", str(repo), source_column="src")


def test_raw_text_path_equals_reference_bpe_path(tiny_model_dir, cache, tmp_path):
    """Raw Tatoeba text through the tokenizer gives the same errors as the reference .bpe files."""
    require_shared(TATOEBA_BPE, SHARED_TATOEBA)
    from evaluation.cache import EmbeddingCache
    from evaluation.tatoeba import evaluate_tatoeba

    from hf_laser.encoder import LaserEncoder

    raw = tmp_path / "raw"
    raw.mkdir()
    for lang in ("fra", "deu"):
        for side in (lang, "eng"):
            name = f"tatoeba.{lang}-eng.{side}"
            lines = (SHARED_TATOEBA / name).read_text(encoding="utf-8").split("\n")[:100]
            (raw / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    text_cache = EmbeddingCache(LaserEncoder.from_pretrained(tiny_model_dir), tmp_path / "c2", show_progress=False)
    res_raw = evaluate_tatoeba(text_cache, folder=raw, show_progress=False, log=lambda m: None)
    res_bpe = evaluate_tatoeba(cache, ["deu", "fra"], folder=TATOEBA_BPE, suffix=".bpe", pretokenized=True,
                               show_progress=False, log=lambda m: None)
    assert res_raw == res_bpe

    doc = "Le marché est ouvert. Les prix montent ! Fin."
    bpe = text_cache.encoder.tokenizer.pipeline.process([doc], "fr", stage="bpe")[0]
    np.testing.assert_allclose(text_cache.embed_documents([doc], "fr"),
                               text_cache.embed_documents([bpe], "fr", pretokenized=True), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------- XNLI
def test_nli_readers_formats_and_errors(tmp_path):
    from evaluation.xnli import LABELS, load_mnli_local, load_xnli_local

    write_xnli(tmp_path / "XNLI-1.0", n_dev=6, n_test=9)
    test = load_xnli_local(tmp_path / "XNLI-1.0", "test", ["en", "fr"])
    assert list(test) == ["en", "fr"] and len(test["fr"]) == 9
    assert test["fr"]["label"][:3] == [0, 1, 2] and test["en"]["pair_id"][:2] == ["1", "2"]
    with pytest.raises(ValueError, match=r"xnli\.dev\.tsv: no dev examples for language\(s\) \['sw'\]"):
        load_xnli_local(tmp_path / "XNLI-1.0", "dev", ["en", "sw"])
    with pytest.raises(FileNotFoundError, match=r"xnli\.test\.tsv"):
        load_xnli_local(tmp_path / "nowhere", "test")

    path, examples = write_mnli(tmp_path / "multinli_1.0", n=12, no_gold=2)
    train, dropped = load_mnli_local(tmp_path / "multinli_1.0")
    assert dropped == 2 and len(train) == 12
    assert train["label"] == [LABELS.index(lab) for _, _, lab in examples]
    # the JSON-lines distribution gives the same data
    jl = tmp_path / "jl" / "multinli_1.0_train.jsonl"
    jl.parent.mkdir()
    jl.write_text("".join(json.dumps({"gold_label": lab, "sentence1": p, "sentence2": h, "pairID": str(i)}) + "\n"
                          for i, (p, h, lab) in enumerate(examples)), encoding="utf-8")
    train_jl, dropped_jl = load_mnli_local(jl)
    assert dropped_jl == 0 and train_jl["premise"] == train["premise"] and train_jl["label"] == train["label"]

    lines = path.read_text(encoding="utf-8").split("\n")
    lines[3] = "\t".join(["maybe"] + lines[3].split("\t")[1:])  # 4th line of the file
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=r"multinli_1\.0_train\.txt:4: gold_label 'maybe'"):
        load_mnli_local(path)
    lines[3] = "neutral\tonly three\tfields"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=r"multinli_1\.0_train\.txt:4: 3 tab-separated fields, the header has 15"):
        load_mnli_local(path)
    lines[3] = ""
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=r"multinli_1\.0_train\.txt:4: empty line"):
        load_mnli_local(path)
    path.write_text(MNLI_HEADER + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"multinli_1\.0_train\.txt: no examples"):
        load_mnli_local(path)


def test_xnli_zero_shot_pipeline(cache, tmp_path):
    from evaluation.xnli import evaluate_xnli

    write_xnli(tmp_path / "XNLI-1.0")
    write_mnli(tmp_path / "multinli_1.0")
    logs = []
    res = evaluate_xnli(cache, xnli_dir=tmp_path / "XNLI-1.0", mnli=tmp_path / "multinli_1.0", langs=["en", "fr", "de"],
                        cross_lingual=True, epochs=15, batch_size=16, pretokenized=True, show_progress=False,
                        log=logs.append)
    r = res["results"]
    assert set(r) == {"en", "fr", "de", "average"} and r["en"]["n"] == 30
    assert res["info"]["dropped_no_gold_label"] == 1 and res["info"]["train_pairs"] == 150
    assert any("1 without gold label dropped" in m for m in logs)
    assert r["en"]["dev_accuracy"] == res["info"]["dev_accuracy"] == res["head"].dev_accuracy
    assert r["en"]["accuracy"] > 60  # chance is 33.3; entailment (h == p) and neutral (h ⊃ p) are learnable
    # the fixture's languages hold identical text: every language and every cell of the matrix agree
    m = res["cross_lingual"]
    assert {lang: m[lang][lang] for lang in m} == {lang: r[lang]["accuracy"] for lang in m}
    assert len({v for row in m.values() for v in row.values()}) == 1
    assert r["average"]["accuracy"] == pytest.approx(np.mean([r[x]["accuracy"] for x in ("en", "fr", "de")]),
                                                     abs=0.006)
    with pytest.raises(ValueError, match="not XNLI languages"):
        evaluate_xnli(cache, xnli_dir=tmp_path / "XNLI-1.0", mnli=tmp_path / "multinli_1.0", langs=["xx"])


# ---------------------------------------------------------------------------------------------- MLDoc
def test_mldoc_reader_and_errors(tmp_path):
    from evaluation.mldoc import load_mldoc_local, read_mldoc_file

    write_mldoc(tmp_path / "MLDoc", n_train=8, n_dev=4, n_test=4)
    de = load_mldoc_local(tmp_path / "MLDoc", "de", "test")  # written as b'...' literals, decoded
    en = read_mldoc_file(tmp_path / "MLDoc" / "english.train.1000")
    assert de["text"] == [t for _, t in mldoc_docs(4, 2)] and de["label"] == [0, 1, 2, 3]
    assert len(en) == 8
    bad = tmp_path / "MLDoc" / "french.test"
    bad.write_text("CCAT\tfine .\nXCAT\tnot a label .\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"french\.test:2: label 'XCAT'"):
        load_mldoc_local(tmp_path / "MLDoc", "fr", "test")
    bad.write_text("CCAT no tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"french\.test:1: no tab"):
        read_mldoc_file(bad)
    bad.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=r"french\.test: empty split"):
        read_mldoc_file(bad)
    with pytest.raises(FileNotFoundError, match=r"italian\.test"):
        load_mldoc_local(tmp_path / "MLDoc", "it", "test")


def test_mldoc_hub_loader_through_datasets(tmp_path):
    from evaluation.mldoc import load_mldoc_hub

    repo = tmp_path / "hub"
    (repo / "en").mkdir(parents=True)
    docs = mldoc_docs(8, 5)
    for split in ("train_1000", "test"):
        (repo / "en" / f"{split}.jsonl").write_text(
            "".join(json.dumps({"text": t, "label": lab}) + "\n" for lab, t in docs), encoding="utf-8")
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: en\n  data_files:\n  - split: train_1000\n    path: en/train_1000.jsonl\n"
        "  - split: test\n    path: en/test.jsonl\n---\n", encoding="utf-8")
    ds = load_mldoc_hub(str(repo), "en", "train.1000")  # MLDoc's split name, mapped to train_1000
    assert ds["text"] == [t for _, t in docs] and ds["label"] == [0, 1, 2, 3] * 2
    with pytest.raises(ValueError, match="no split 'dev'"):
        load_mldoc_hub(str(repo), "en", "dev")
    bad = tmp_path / "bad"
    (bad / "en").mkdir(parents=True)
    (bad / "en" / "test.jsonl").write_text(json.dumps({"text": "x .", "label": "OTHER"}) + "\n", encoding="utf-8")
    (bad / "README.md").write_text("---\nconfigs:\n- config_name: en\n  data_files:\n  - split: test\n"
                                   "    path: en/test.jsonl\n---\n", encoding="utf-8")
    with pytest.raises(ValueError, match="row 0: label 'OTHER' not in"):
        load_mldoc_hub(str(bad), "en", "test")


def test_document_embedding_is_mean_of_sentence_embeddings(encoder, cache):
    from evaluation.cache import split_at_periods

    assert split_at_periods("a b . c d . e .") == ["a b .", "c d .", "e ."]
    assert split_at_periods("a . b") == ["a .", "b"] and split_at_periods("") == [""]
    docs = ["the cat is red . tom is a dog .", "war game sport ."]
    got = cache.embed_documents(docs, "en", pretokenized=True)
    sent = encoder.encode(["the cat is red .", "tom is a dog .", "war game sport ."], pretokenized=True)
    np.testing.assert_allclose(got, np.stack([sent[:2].mean(0), sent[2]]), rtol=1e-6, atol=1e-7)


def test_mldoc_pipeline(cache, tmp_path):
    from evaluation.mldoc import evaluate_mldoc

    write_mldoc(tmp_path / "MLDoc")
    res = evaluate_mldoc(cache, folder=tmp_path / "MLDoc", langs=["en", "de"], epochs=40, pretokenized=True,
                         show_progress=False, log=lambda m: None)
    r = res["results"]
    assert set(r) == {"en", "de", "average"} and res["info"]["train_sizes"] == [1000]
    assert r["en"]["n"] == 16 and "dev_accuracy_1k" in r["en"]
    assert r["en"]["accuracy_1k"] == r["de"]["accuracy_1k"]  # same documents
    assert r["en"]["accuracy_1k"] > 50  # chance 25
    with pytest.raises(FileNotFoundError, match=r"english\.train\.5000"):
        evaluate_mldoc(cache, folder=tmp_path / "MLDoc", langs=["en"], train_sizes=[5000], epochs=1,
                       pretokenized=True, show_progress=False, log=lambda m: None)


# ---------------------------------------------------------------------------------------------- BUCC
def test_bucc_shows_its_progress_on_a_terminal_only(tmp_path, capsys, monkeypatch):
    """#71: a BUCC evaluation printed nothing for 3.7 minutes. The embedding and the search of each split show tqdm
    bars when stderr is a terminal (or show_progress=True), none otherwise (the default in a pipe or a log)."""
    pytest.importorskip("faiss")
    import sys

    from evaluation.bucc import evaluate_bucc
    from hf_laser import DEFAULT_MODEL
    from hf_laser.encoder import LaserEncoder

    write_bucc(tmp_path / "mining")
    encoder = LaserEncoder.from_pretrained(DEFAULT_MODEL)
    capsys.readouterr()
    first = evaluate_bucc(encoder, tmp_path / "mining", "de-en")
    assert capsys.readouterr().err == ""  # (stderr is no terminal here)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    again = evaluate_bucc(encoder, tmp_path / "mining", "de-en")
    err = capsys.readouterr().err
    assert err.count("embedding") >= 4 and "100%" in err, err  # both sides of both splits, each bar to its end
    assert again["eval"] == first["eval"]
    monkeypatch.undo()
    evaluate_bucc(encoder, tmp_path / "mining", "de-en", show_progress=False)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------- run + hub
@pytest.fixture(scope="module")
def results_dir(tiny_dictionary_dir, tmp_path_factory):
    """One `python -m evaluation.run` over all four tasks (fixtures + reference Tatoeba files)."""
    require_shared(TATOEBA_BPE)
    from evaluation import run

    tmp = tmp_path_factory.mktemp("run")
    write_xnli(tmp / "XNLI-1.0")
    write_mnli(tmp / "multinli_1.0")
    write_mldoc(tmp / "MLDoc", langs=("english", "german", "french"))
    write_bucc(tmp / "mining")
    out = tmp / "results"
    rc = run.main(["--model", str(tiny_dictionary_dir), "--tasks", "tatoeba,xnli,mldoc,bucc", "--langs",
                   "fra,deu,en,fr,de", "--tatoeba-dir", str(TATOEBA_BPE), "--tatoeba-suffix", ".bpe",
                   "--xnli-dir", str(tmp / "XNLI-1.0"), "--mnli", str(tmp / "multinli_1.0"), "--xnli-epochs", "5",
                   "--mldoc-dir", str(tmp / "MLDoc"), "--mldoc-epochs", "10", "--bucc-dir", str(tmp / "mining"),
                   "--bucc-pairs", "de-en", "--pretokenized", "--cache-dir", str(tmp / "cache"), "--out", str(out),
                   "--save-classifiers", "-q"])
    assert rc == 0
    return out


def test_run_writes_results_table_and_plots(results_dir):
    res = json.loads((results_dir / "results.json").read_text())
    assert list(res) == ["tatoeba", "xnli", "mldoc", "bucc"]
    assert set(res["tatoeba"]) == {"fra", "deu", "average"}
    assert set(res["tatoeba"]["fra"]) == {"xx2en_error", "en2xx_error", "n"} and res["tatoeba"]["fra"]["n"] == 100
    assert set(res["xnli"]) == {"en", "fr", "de", "average"} and 0 <= res["xnli"]["fr"]["accuracy"] <= 100
    assert set(res["mldoc"]) == {"en", "de", "fr", "average"} and "accuracy_1k" in res["mldoc"]["de"]
    b = res["bucc"]["de-en"]
    assert set(b) >= {"precision", "recall", "f1", "threshold"} and b["n_gold"] == 8 and 0 <= b["f1"] <= 100
    info = json.loads((results_dir / "results_info.json").read_text())
    assert info["tasks"]["xnli"]["dropped_no_gold_label"] == 1 and info["cache"]["misses"] > 0
    assert info["command"].startswith("python -m evaluation.run --model")
    md = (results_dir / "results.md").read_text()
    assert "| fra | " in md and "## XNLI" in md and "## MLDoc" in md and "## BUCC" in md and "(tatoeba.png)" in md
    for name in ("tatoeba.png", "xnli.png", "mldoc.png"):
        assert (results_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from hf_laser.modeling.modeling_laser import LaserForSequenceClassification

    clf = LaserForSequenceClassification.from_pretrained(results_dir / "classifiers" / "xnli")
    assert clf.config.classifier_mode == "pair" and clf.config.id2label[2] == "contradiction"


def test_run_errors(tiny_dictionary_dir, tmp_path, capsys):
    from evaluation import run

    rc = run.main(["--model", str(tiny_dictionary_dir), "--tasks", "tatoeba", "--langs", "zzz", "--tatoeba-dir",
                   str(tmp_path), "--pretokenized", "--out", str(tmp_path / "o"), "--no-cache", "-q"])
    assert rc == 2 and "tatoeba.zzz-eng.zzz" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="unknown task"):
        run.main(["--model", str(tiny_dictionary_dir), "--tasks", "glue", "--out", str(tmp_path / "o")])


def test_model_card_with_results_roundtrips_model_index(results_dir, tiny_dictionary_dir):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    from hf_laser.checkpoints.hub import card_with_results, eval_results_from_results

    res = json.loads((results_dir / "results.json").read_text())
    card = card_with_results(tiny_dictionary_dir, res, repo_id="someone/laser-tiny",
                             plots={"tatoeba": "results/tatoeba.png"})
    parsed = ModelCard(card)
    name, evals = model_index_to_eval_results(parsed.data.to_dict()["model-index"])
    assert name == "laser-tiny" and len(evals) == len(eval_results_from_results(res))
    fra = [e for e in evals if e.dataset_config == "fra-eng" and e.metric_name.startswith("xx→en")]
    assert len(fra) == 1 and fra[0].metric_value == res["tatoeba"]["fra"]["xx2en_error"]
    assert fra[0].dataset_type == "mteb/tatoeba-bitext-mining" and fra[0].dataset_split == "test"
    de_xnli = [e for e in evals if e.dataset_type == "facebook/xnli" and e.dataset_config == "de"]
    assert de_xnli[0].metric_type == "accuracy" and de_xnli[0].metric_value == res["xnli"]["de"]["accuracy"]
    assert "![Tatoeba error per language](results/tatoeba.png)" in parsed.text
    assert "PATH_OR_REPO_ID" not in card and "someone/laser-tiny" in card
    assert parsed.text.count("## Evaluation") == 1 and "## Citation" in parsed.text
    assert parsed.data.library_name == "transformers"


def test_push_dry_run_and_single_commit(results_dir, tiny_dictionary_dir, capsys, monkeypatch):
    from hf_laser.checkpoints import hub
    from hf_laser.cli import main as cli_main

    # dry run through the CLI: lists files, no network
    monkeypatch.setattr("huggingface_hub.HfApi", None)  # any attempt to build a client would fail
    rc = cli_main(["push", str(tiny_dictionary_dir), "--repo-id", "someone/laser-tiny", "--results", str(results_dir),
                   "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "dry run" in out and "someone/laser-tiny" in out
    for path in ("config.json", "model.safetensors", "README.md", "results/results.json", "results/tatoeba.png"):
        assert f"  {path}  (" in out
    monkeypatch.undo()

    class FakeApi:
        def __init__(self):
            self.calls = []

        def create_repo(self, **kw):
            self.calls.append(("create_repo", kw))

        def create_branch(self, **kw):
            self.calls.append(("create_branch", kw))

        def create_commit(self, **kw):
            self.calls.append(("create_commit", kw))
            return type("Info", (), {"commit_url": "https://huggingface.co/someone/laser-tiny/commit/abc"})()

    api = FakeApi()
    summary = hub.push_to_hub(tiny_dictionary_dir, "someone/laser-tiny", results_dir=results_dir, api=api,
                              log=lambda m: None)
    assert [c[0] for c in api.calls] == ["create_repo", "create_commit"]
    assert api.calls[0][1]["exist_ok"] is True
    ops = api.calls[1][1]["operations"]
    paths = [op.path_in_repo for op in ops]
    assert len(paths) == len(set(paths)) and "README.md" in paths and "results/results.json" in paths
    readme = next(op for op in ops if op.path_in_repo == "README.md").path_or_fileobj
    assert b"model-index" in readme and summary["commit"].endswith("/commit/abc")

    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(RuntimeError, match="hf auth login"):
        hub.push_to_hub(tiny_dictionary_dir, "someone/laser-tiny", log=lambda m: None)
    with pytest.raises(ValueError, match="invalid repo id"):
        hub.push_to_hub(tiny_dictionary_dir, "not a repo", dry_run=True, log=lambda m: None)
    with pytest.raises(FileNotFoundError, match="results.json"):
        hub.push_to_hub(tiny_dictionary_dir, "someone/x", results_dir=tiny_dictionary_dir, dry_run=True)
