"""Training: LaserForPreTraining, BPE learning, the data pipeline, and `training/train.py` end to end (learning on a
synthetic cipher, DDP with two processes, kill-and-resume, a real-data smoke run)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO, SHARED, require_shared
from safetensors.torch import load_file
from transformers import AutoModel

import hf_laser  # noqa: F401  (registers the "laser" model type)
from hf_laser import LaserConfig, LaserModel
from hf_laser.text.bpe import read_codes, read_vocab
from hf_laser.modeling.modeling_laser import LaserForPreTraining, shift_tokens_right

sys.path.insert(0, str(REPO))
from training.data import (  # noqa: E402
    BatchSchedule,
    PairBatches,
    collect_pairs,
    prepare_training_data,
    resolve_corpora,
)
from training.learn_bpe import balance_lines, learn_bpe  # noqa: E402
from training.train import load_config  # noqa: E402

PARALLEL = SHARED / "data" / "parallel"

# ---------------------------------------------------------------------------------------------- synthetic data
WORDS = ("man woman child dog cat house car tree river city book letter song friend teacher doctor "
         "sees likes finds takes gives reads writes buys big small old new red green").split()


def cipher(word: str, shift: int) -> str:
    """A deterministic word-for-word cipher: reversed letters, vowels rotated by `shift`, a `q` prefix."""
    vowels = "aeiou"
    return "q" + "".join(vowels[(vowels.index(c) + shift) % 5] if c in vowels else c for c in word[::-1])


def write_cipher_corpus(folder: Path, n: int, seed: int) -> None:
    """Multi-parallel folder: English word sequences (`en`), their cipher (`xx`) and a reordered cipher (`yy`)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    en = [rng.choice(WORDS, size=rng.integers(3, 8)).tolist() for _ in range(n)]
    sides = {"en": [" ".join(s) for s in en],
             "xx": [" ".join(cipher(w, 1) for w in s) for s in en],
             "yy": [" ".join(cipher(w, 2) for w in s[::-1]) for s in en]}
    for lang, lines in sides.items():
        (folder / f"{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def cipher_setup(tmp_path_factory):
    """Cipher train/valid folders and a tiny training config. `en` and `xx` are the decoder's target languages
    (like the paper's en/es); `yy` is only a source."""
    root = tmp_path_factory.mktemp("cipher")
    write_cipher_corpus(root / "train", 2000, seed=0)
    write_cipher_corpus(root / "valid", 200, seed=1)
    cfg = {
        "seed": 3,
        "data": {"corpora": [str(root / "train")], "source_languages": "all", "target_languages": ["en", "xx"],
                 "max_length": 40, "cache_dir": str(root / "cache")},
        "tokenizer": {"bpe_merges": 300},
        "model": {"embed_dim": 32, "hidden_size": 32, "num_layers": 1, "decoder_embed_dim": 32,
                  "decoder_hidden_size": 64, "lang_embed_dim": 8},
        "batching": {"max_tokens": 400, "num_workers": 0},
        "training": {"max_steps": 700, "learning_rate": 0.01, "log_every": 10, "eval_every": 100,
                     "save_every": 100, "keep_checkpoints": 10, "report_to": None},
        "validation": {"path": str(root / "valid")},
    }
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    return root, config


def run_train(config: Path, out: Path, *extra: str, launcher: list[str] | None = None, wait: bool = True):
    """Runs training/train.py in a subprocess; returns its output (or, with `wait=False`, `(process, log_path)`)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]))
    cmd = (launcher or [sys.executable]) + [str(REPO / "training" / "train.py"), "--config", str(config),
                                            "--output-dir", str(out), *extra]
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.parent / f"{out.name}-{time.monotonic_ns()}.log"
    with open(log_path, "w") as log:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if not wait:
        return proc, log_path
    proc.wait(timeout=600)
    output = log_path.read_text()
    assert proc.returncode == 0, output[-4000:]
    return output


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def cipher_run(cipher_setup, tmp_path_factory):
    """One uninterrupted training run of 700 steps on the cipher data."""
    _, config = cipher_setup
    out = tmp_path_factory.mktemp("cipher-run") / "out"
    log = run_train(config, out)
    return out, log


# ---------------------------------------------------------------------------------------------- model
def tiny_config(**kw) -> LaserConfig:
    cfg = dict(vocab_size=60, embed_dim=12, hidden_size=10, num_layers=2, decoder_embed_dim=8,
               decoder_hidden_size=16, lang_embed_dim=4, target_languages=["en", "es"])
    cfg.update(kw)
    return LaserConfig(**cfg)


def test_pretraining_forward_shapes_loss_and_padding():
    torch.manual_seed(0)
    model = LaserForPreTraining(tiny_config()).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 1, 1]])
    labels = torch.tensor([[11, 12, 2, -100], [13, 14, 15, 2]])
    lang = torch.tensor([0, 1])
    out = model(input_ids=src, labels=labels, target_lang_ids=lang)
    assert out.logits.shape == (2, 4, 60)
    assert out.sentence_embedding.shape == (2, 20)
    assert out.encoder_last_hidden_state.shape == (2, 5, 20)
    # the loss is the mean cross-entropy over the non-ignored target tokens, nothing else
    expected = torch.nn.functional.cross_entropy(out.logits[labels != -100], labels[labels != -100])
    torch.testing.assert_close(out.loss, expected)
    # teacher forcing starts with </s>; a padded row gives the same logits as the row alone
    assert shift_tokens_right(labels, 1, 2).tolist() == [[2, 11, 12, 2], [2, 13, 14, 15]]
    alone = model(input_ids=src[1:, :3], labels=labels[1:], target_lang_ids=lang[1:])
    torch.testing.assert_close(alone.logits, out.logits[1:])
    # the target language id matters, and so does the source (through the sentence embedding only)
    other = model(input_ids=src, labels=labels, target_lang_ids=1 - lang)
    assert not torch.allclose(other.logits, out.logits)
    smoothed = LaserForPreTraining(tiny_config(label_smoothing=0.1))
    smoothed.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert float(smoothed.eval()(input_ids=src, labels=labels, target_lang_ids=lang).loss) > float(out.loss)
    with pytest.raises(ValueError, match="target_lang_ids is required"):
        model(input_ids=src, labels=labels)


def test_pretraining_gradients_and_bf16_autocast():
    torch.manual_seed(0)
    model = LaserForPreTraining(tiny_config(num_layers=1, decoder_num_layers=2)).train()
    src = torch.randint(4, 60, (3, 6))
    labels = torch.randint(4, 60, (3, 5))
    # no padding: encoder and decoder both take the unpacked LSTM path, which under CPU autocast needs a bf16
    # kernel that oneDNN lacks on CPUs without native bf16 (cpu_autocast_lstm)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=src, labels=labels, target_lang_ids=torch.tensor([0, 1, 0]))
    assert torch.backends.mkldnn.enabled  # the flag is restored after each call
    assert out.logits.dtype == torch.bfloat16  # the model did run in bf16
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    # every parameter gets a gradient except the <pad> rows' (which are not used here)
    assert missing == []


def test_save_encoder_loads_with_automodel(tmp_path):
    torch.manual_seed(0)
    model = LaserForPreTraining(tiny_config()).eval()
    model.save_pretrained(tmp_path / "pretraining")
    model.save_encoder(tmp_path / "encoder")
    config = json.loads((tmp_path / "encoder" / "config.json").read_text())
    assert config["architectures"] == ["LaserModel"]
    assert model.config.architectures == ["LaserForPreTraining"]  # the shared config is left as it was
    ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 1]])
    expected = model.laser(ids).pooler_output
    encoder = AutoModel.from_pretrained(tmp_path / "encoder").eval()
    assert type(encoder) is LaserModel
    torch.testing.assert_close(encoder(ids).pooler_output, expected, rtol=0, atol=0)
    from_full = LaserModel.from_pretrained(tmp_path / "pretraining").eval()
    torch.testing.assert_close(from_full(ids).pooler_output, expected, rtol=0, atol=0)
    reloaded = LaserForPreTraining.from_pretrained(tmp_path / "pretraining").eval()
    labels = torch.tensor([[3, 4, 2]] * 2)
    lang = torch.tensor([0, 1])
    torch.testing.assert_close(reloaded(input_ids=ids, labels=labels, target_lang_ids=lang).logits,
                               model(input_ids=ids, labels=labels, target_lang_ids=lang).logits)


# ---------------------------------------------------------------------------------------------- BPE
@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory):
    """A BPE learned on a few synthetic sentences (English words and their cipher)."""
    rng = np.random.default_rng(5)
    en = [" ".join(rng.choice(WORDS, size=6)) + "." for _ in range(300)]
    xx = [" ".join(cipher(w, 1) for w in s[:-1].split()) for s in en]
    out = tmp_path_factory.mktemp("bpe")
    return learn_bpe({"en": en, "xx": xx}, out, merges=120, log=lambda _: None), out


def test_learn_bpe_writes_fastbpe_files_that_round_trip(small_tokenizer):
    tokenizer, out = small_tokenizer
    codes, vocab = read_codes(out / "bpe.fcodes"), read_vocab(out / "bpe.fvocab")
    assert len(codes) == 120 and len(set(codes)) == 120
    assert all(c[1].endswith("</w>") or "</w>" not in "".join(c) for c in codes)
    dictionary = json.loads((out / "vocab.json").read_text())
    assert [dictionary[t] for t in ("<s>", "<pad>", "</s>", "<unk>")] == [0, 1, 2, 3]
    assert set(vocab) == set(dictionary) - {"<s>", "<pad>", "</s>", "<unk>"}
    stats = json.loads((out / "bpe_stats.json").read_text())
    assert all(r["failures"] == 0 and r["lines"] > 0 for r in stats["roundtrip"].values())
    # applying the codes with LaserTokenizer gives subwords that join back into the preprocessed text
    from hf_laser.text.tokenization_laser import LaserTokenizer

    reloaded = LaserTokenizer.from_pretrained(str(out))
    text = "Big dog reads old letter."  # words of the BPE training text
    pieces = reloaded.tokenize(text, lang="en")
    assert reloaded.convert_tokens_to_string(pieces) == reloaded.preprocess(text, lang="en")
    assert reloaded.unk_token_id not in reloaded.encode_lines([text], lang="en")[0]


def test_learn_bpe_cli_is_deterministic_across_processes(tmp_path):
    """The tokenizers trainer numbers word-final symbols in hash order (a new seed per process); learn_bpe.py pins
    them, so two processes learn the same codes from the same text (without the fix, nearly every run differs)."""
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(2, 7))) for _ in range(400)]
    inputs = []
    for lang in ("aa", "bb"):
        write(tmp_path / f"in.{lang}.txt", [" ".join(rng.choice(words, size=8)) for _ in range(300)])
        inputs += ["--input", f"{lang}:{tmp_path / f'in.{lang}.txt'}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    for run in ("a", "b"):
        subprocess.run([sys.executable, str(REPO / "training" / "learn_bpe.py"), *inputs, "--merges", "300",
                        "--output-dir", str(tmp_path / run)], env=env, check=True, capture_output=True)
    for name in ("bpe.fcodes", "bpe.fvocab", "vocab.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert len(read_codes(tmp_path / "a" / "bpe.fcodes")) == 300


def test_balance_lines_follows_alpha():
    lines = {"big": [f"b{i}" for i in range(900)], "small": [f"s{i}" for i in range(100)]}
    natural = balance_lines(lines, alpha=1.0)
    assert (len(natural["big"]), len(natural["small"])) == (900, 100)
    flat = balance_lines(lines, alpha=0.0)
    assert (len(flat["big"]), len(flat["small"])) == (500, 500)
    assert set(flat["small"]) == set(lines["small"])  # upsampled: every line, repeated
    assert len(set(flat["big"])) == 500  # downsampled without repetition


# ---------------------------------------------------------------------------------------------- data
def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_bitext_line_count_mismatch_is_rejected_naming_the_files(tmp_path):
    write(tmp_path / "c" / "news.de-en.de", ["a", "b", "c"])
    write(tmp_path / "c" / "news.de-en.en", ["a", "b"])
    with pytest.raises(ValueError, match=r"news\.de-en\.de has 3 lines but .*news\.de-en\.en has 2"):
        collect_pairs(resolve_corpora([str(tmp_path / "c")]), ["de"], ["en"])


def test_multiparallel_line_count_mismatch_is_rejected(tmp_path):
    for lang in ("en", "fr", "de"):
        write(tmp_path / "m" / f"{lang}.txt", ["x"] * 4)
    write(tmp_path / "m" / "es.txt", ["x"] * 3)
    with pytest.raises(ValueError, match=r"most have 4, but .*es\.txt \(3 lines\)"):
        collect_pairs(resolve_corpora([str(tmp_path / "m")]), None, ["en"])


def test_empty_corpus_and_corpus_without_pairs_are_rejected(tmp_path):
    write(tmp_path / "e" / "news.fr-en.fr", [])
    write(tmp_path / "e" / "news.fr-en.en", [])
    with pytest.raises(ValueError, match="is empty"):
        collect_pairs(resolve_corpora([str(tmp_path / "e")]), ["fr"], ["en"])
    write(tmp_path / "n" / "news.fr-en.fr", ["bonjour"])
    write(tmp_path / "n" / "news.fr-en.en", ["hello"])
    with pytest.raises(ValueError, match="gives no sentence pair"):
        collect_pairs(resolve_corpora([str(tmp_path / "n")]), ["de"], ["es"])
    with pytest.raises(FileNotFoundError):
        resolve_corpora([str(tmp_path / "missing.de-en")])


def test_pairing_filters_and_alignment(tmp_path, small_tokenizer):
    import gzip

    tokenizer, _ = small_tokenizer

    def cip(line, shift):
        return " ".join(cipher(w, shift) for w in line.split())

    # a gzip bitext: row 1/2 have an empty side, row 3 is too long, row 4 has a length ratio of 4.5 or more
    de = ["dog sees cat", "", "big tree", "man " * 40, "a", "the red car"]
    en = ["dog sees cat", "big book", "", "man", "man woman child dog cat house car tree", "red car"]
    de = [cip(line, 1) for line in de]
    for lang, lines in (("de", de), ("en", en)):
        (tmp_path / "bi").mkdir(exist_ok=True)
        with gzip.open(tmp_path / "bi" / f"news.de-en.{lang}.gz", "wt", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
    # a multi-parallel folder: empty lines are missing translations
    mp = {"en": ["man dog", "", "cat tree"], "fr": ["man dog", "old car", "cat tree"],
          "es": ["man dog", "old car", ""]}
    mp["fr"] = [cip(line, 1) for line in mp["fr"]]  # (the tokenizer knows English words and this cipher)
    mp["es"] = [" ".join(line.split()[::-1]) for line in mp["es"]]
    for lang, lines in mp.items():
        write(tmp_path / "mp" / f"{lang}.txt", lines)
    cfg = {"corpora": [str(tmp_path / "bi"), str(tmp_path / "mp")], "source_languages": "all",
           "target_languages": ["en", "es"], "max_length": 30, "max_length_ratio": 3.0,
           "cache_dir": str(tmp_path / "cache")}
    data = prepare_training_data(cfg, tokenizer, log=lambda _: None)
    bi, multi = data.stats["corpora"]
    assert bi["skipped"] == {"empty": 2, "too_long": 1, "length_ratio": 1} and bi["pairs"] == 2
    # multi-parallel: en->es, fr->en, fr->es, es->en (never en->en or es->es); 6 of 12 combinations are missing
    assert multi["pairs"] == 6 and multi["missing"] == 6 and multi["skipped"] == dict.fromkeys(bi["skipped"], 0)
    assert sorted(data.directions) == [("de", "en"), ("en", "es"), ("es", "en"), ("fr", "en"), ("fr", "es")]
    # every kept pair is still aligned: decode both sides and find the pair in the source files
    allowed = {("de", "en"): set(zip(de, en))}
    for s_lang, t_lang in data.directions[1:]:
        allowed[(s_lang, t_lang)] = set(zip(mp[s_lang], mp[t_lang]))

    def text(seg):
        return tokenizer.convert_tokens_to_string(tokenizer.convert_ids_to_tokens(data.tokens.get(seg)[:-1].tolist()))

    seen = set()
    for s_seg, t_seg, d in zip(data.src, data.tgt, data.direction):
        pair = data.directions[d]
        assert (text(s_seg), text(t_seg)) in allowed[pair]
        seen.add((pair, text(s_seg)))
    assert len(seen) == len(data) == 8
    # the second call is served from the cache
    again = prepare_training_data(cfg, tokenizer, log=lambda m: pytest.fail(f"rebuilt: {m}"))
    assert again.path == data.path and np.array_equal(again.src, data.src)


def test_unknown_language_code_warns_and_uses_the_defaults(tmp_path, small_tokenizer):
    tokenizer, _ = small_tokenizer
    write(tmp_path / "u" / "news.qqq-en.qqq", ["qnem qgob"])
    write(tmp_path / "u" / "news.qqq-en.en", ["man dog"])
    cfg = {"corpora": [str(tmp_path / "u")], "source_languages": ["qqq"], "target_languages": ["en"],
           "max_length": 20, "cache_dir": str(tmp_path / "cache")}
    from hf_laser.text import preprocessing

    preprocessing.warned_codes.discard("qqq")
    with pytest.warns(UserWarning, match="unknown language code 'qqq'.*Moses defaults"):
        data = prepare_training_data(cfg, tokenizer, log=lambda _: None)
    assert len(data) == 1
    assert list(data.tokens.get(int(data.src[0]))) == tokenizer.encode_lines(["qnem qgob"], lang="en")[0]


def test_datasets_translation_column(tmp_path, small_tokenizer):
    import datasets

    tokenizer, _ = small_tokenizer
    rows = [{"de": "der hund", "en": "the dog"}, {"de": "die katze", "en": "the cat", "es": "el gato"},
            {"de": "", "en": "empty source"}]
    datasets.Dataset.from_dict({"translation": rows}).save_to_disk(str(tmp_path / "ds"))
    cfg = {"corpora": [{"dataset": str(tmp_path / "ds")}], "source_languages": ["de", "es"],
           "target_languages": ["en", "es"], "max_length": 20, "cache_dir": str(tmp_path / "cache")}
    data = prepare_training_data(cfg, tokenizer, log=lambda _: None)
    # de->en ×2, de->es ×1, es->en ×1; the empty German line is skipped and counted
    assert sorted(data.stats["pairs_per_direction"].items()) == [("de-en", 2), ("de-es", 1), ("es-en", 1)]
    assert data.stats["skipped"]["empty"] == 1


def test_batch_schedule_token_budget_directions_and_determinism(tmp_path, small_tokenizer):
    tokenizer, _ = small_tokenizer
    rng = np.random.default_rng(0)
    n = 600
    en = [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) for _ in range(n)]
    write(tmp_path / "big" / "en.txt", en)
    write(tmp_path / "big" / "xx.txt", [" ".join(cipher(w, 1) for w in s.split()) for s in en])
    write(tmp_path / "small" / "en.txt", en[:60])
    write(tmp_path / "small" / "yy.txt", [" ".join(cipher(w, 2) for w in s.split()) for s in en[:60]])
    cfg = {"corpora": [str(tmp_path / "big"), str(tmp_path / "small")], "source_languages": ["xx", "yy"],
           "target_languages": ["en"], "max_length": 30, "cache_dir": str(tmp_path / "cache")}
    data = prepare_training_data(cfg, tokenizer, log=lambda _: None)
    schedule = BatchSchedule(data, max_tokens=120, seed=4)
    batches = schedule.epoch(0)
    # each pair exactly once per epoch, one direction per batch, padded size within the budget on both sides
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(data)))
    for b in batches:
        assert len(set(data.direction[b].tolist())) == 1
        assert len(b) * max(data.src_lengths[b].max(), data.tgt_lengths[b].max()) <= 120
    # batches are length-bucketed: far less padding than random batches of the same sizes
    pad = sum(len(b) * data.src_lengths[b].max() - data.src_lengths[b].sum() for b in batches)
    perm = np.random.default_rng(1).permutation(len(data))
    random_batches = np.split(perm, np.cumsum([len(b) for b in batches])[:-1])
    random_pad = sum(len(b) * data.src_lengths[b].max() - data.src_lengths[b].sum() for b in random_batches)
    assert pad < random_pad / 3
    # "alternate": the small direction's batches are spread over the epoch, not left to its end
    small = data.directions.index(("yy", "en"))
    positions = [i for i, b in enumerate(batches) if data.direction[b[0]] == small]
    assert positions[-1] < len(batches) // 2
    # a pure function of (seed, epoch); epochs differ
    again = BatchSchedule(data, max_tokens=120, seed=4).epoch(0)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again)) and len(again) == len(batches)
    assert any(not np.array_equal(a, b) for a, b in zip(batches, schedule.epoch(1)))
    # shards: disjoint, same size on every process
    shards = [schedule.shard(0, r, 3, multiple=2) for r in range(3)]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) % 2 == 0
    # temperature sampling gives the small direction more batches than its natural share
    hot = BatchSchedule(data, max_tokens=120, seed=4, sampling="temperature", temperature=5.0).epoch(0)
    share = np.mean([data.direction[b[0]] == small for b in hot])
    assert share > 2 * len(positions) / len(batches)
    # collation: right padding, -100 in the labels, target language ids
    batch = PairBatches(data, ["en"])[batches[0]]
    lengths = data.src_lengths[batches[0]]
    assert batch["attention_mask"].sum(1).tolist() == lengths.tolist()
    assert (batch["input_ids"][batch["attention_mask"] == 0] == 1).all()
    assert (batch["labels"] != -100).sum(1).tolist() == data.tgt_lengths[batches[0]].tolist()
    assert batch["target_lang_ids"].tolist() == [0] * len(batches[0])


def test_batch_schedule_corpus_weights_raise_a_share_without_copies_in_a_batch(tmp_path, small_tokenizer):
    tokenizer, _ = small_tokenizer
    rng = np.random.default_rng(2)
    en = [" ".join(rng.choice(WORDS, size=rng.integers(1, 8))) for _ in range(660)]
    for name, rows in (("news", en[:600]), ("conv", en[600:])):  # two corpora of the same direction xx-en
        write(tmp_path / name / f"{name}.xx-en.en", rows)
        write(tmp_path / name / f"{name}.xx-en.xx", [" ".join(cipher(w, 1) for w in r.split()) for r in rows])
    corpora = [str(tmp_path / "news"), str(tmp_path / "conv")]
    cfg = {"corpora": corpora, "source_languages": ["xx"], "target_languages": ["en"], "max_length": 30,
           "cache_dir": str(tmp_path / "cache")}
    data = prepare_training_data(cfg, tokenizer, log=lambda _: None)
    conv = {i for i in range(len(data)) if data.stats["corpora"][data.corpus[i]]["corpus"].startswith(corpora[1])}
    assert len(conv) == 60

    def conv_share(batches):
        return np.mean([b[0] in conv for b in batches])

    plain = BatchSchedule(data, max_tokens=60, seed=1, sampling="temperature", temperature=1.0)
    weighted = BatchSchedule(data, max_tokens=60, seed=1, sampling="temperature", temperature=1.0,
                             corpus_weights={corpora[1]: 8})
    batches = weighted.epoch(0)
    for b in batches:  # one corpus per batch, never a pair twice in it (copies would be false negatives)
        assert len({i in conv for i in b.tolist()}) == 1 and len(set(b.tolist())) == len(b)
    with_weights, without = weighted.weighted_corpora_share()
    assert with_weights == pytest.approx(8 * 60 / (8 * 60 + 600)) and without == pytest.approx(60 / 660)
    assert conv_share(batches) > 2.5 * conv_share(plain.epoch(0))
    assert abs(conv_share(batches) - with_weights) < 0.15
    # a weight of 1 splits the units but keeps every share
    same = BatchSchedule(data, max_tokens=60, sampling="temperature", temperature=1.0, corpus_weights={corpora[1]: 1})
    assert same.weighted_corpora_share()[0] == pytest.approx(without)
    with pytest.raises(ValueError, match="names no corpus"):
        BatchSchedule(data, max_tokens=60, sampling="temperature", corpus_weights={"nowhere": 2})
    with pytest.raises(ValueError, match="needs batching.sampling: temperature"):
        BatchSchedule(data, max_tokens=60, corpus_weights={corpora[1]: 2})
    with pytest.raises(ValueError, match="positive"):
        BatchSchedule(data, max_tokens=60, sampling="temperature", corpus_weights={corpora[1]: 0})


def test_corpus_weights_are_checked_before_any_data_is_read():
    mini = REPO / "training" / "configs" / "laser-mini.yaml"
    cfg = load_config(mini, ["batching.corpus_weights={data/tatoeba-split/train: 2}"])
    assert cfg["batching"]["corpus_weights"] == {"data/tatoeba-split/train": 2}
    with pytest.raises(ValueError, match=r"\['data/tatoeba'\] not among data.corpora"):
        load_config(mini, ["batching.corpus_weights={data/tatoeba: 2}"])
    with pytest.raises(ValueError, match="positive numbers"):
        load_config(mini, ["batching.corpus_weights={data/tatoeba-split/train: -1}"])
    with pytest.raises(ValueError, match="needs batching.sampling: temperature"):
        load_config(mini, ["batching.corpus_weights={data/tatoeba-split/train: 2}", "batching.sampling=alternate"])


# ---------------------------------------------------------------------------------------------- train.py
def test_training_learns_the_cipher(cipher_run):
    out, log = cipher_run
    rows = metrics(out)
    untrained, last = rows[0], rows[-1]
    assert untrained["step"] == 0 and last["step"] == 700
    # English and its word-for-word cipher: retrieval error from ~98% to far below
    assert untrained["valid_error_en"] > 90
    assert last["valid_error_en"] < 20, [(r["step"], r.get("valid_error_en")) for r in rows if "valid_error" in r]
    assert last["valid_error"] < untrained["valid_error"] / 2
    losses = [r["loss"] for r in rows if "loss" in r]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.0
    # the exported model: encoder + tokenizer + card, loadable by AutoModel and LaserEncoder
    final = out / "final"
    assert {"config.json", "model.safetensors", "vocab.json", "bpe.fcodes", "README.md"} <= {
        p.name for p in final.iterdir()}
    assert type(AutoModel.from_pretrained(final)) is LaserModel
    from hf_laser import LaserEncoder

    enc = LaserEncoder.from_pretrained(final)
    sentence = "man sees dog"
    emb = enc.encode([sentence, " ".join(cipher(w, 1) for w in sentence.split()), "city book"],
                     lang=["en", "xx", "en"], normalize_embeddings=True)
    assert emb @ emb[0] @ np.array([0, 1, -1]) > 0  # the cipher of a sentence is nearer than another sentence
    card = (final / "README.md").read_text()
    assert "Sentence pairs: 8,000" in card and "best validation error" in card


def test_kill_and_resume_matches_uninterrupted_run(cipher_setup, cipher_run, tmp_path):
    _, config = cipher_setup
    reference, _ = cipher_run
    out = tmp_path / "killed"
    proc, log_path = run_train(config, out, wait=False)
    marker = out / "checkpoints" / "step-00000200" / "COMPLETE"
    deadline = time.time() + 300
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, log_path.read_text()[-3000:]
    assert marker.exists() and not (out / "final").exists()  # killed mid-run, after the step-200 checkpoint
    resumed = run_train(config, out, "--resume")
    assert "resumed from" in resumed
    for name in ("step-00000700", "step-00000600"):
        a = load_file(reference / "checkpoints" / name / "model.safetensors")
        b = load_file(out / "checkpoints" / name / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    key = ("step", "loss", "valid_error", "valid_loss")
    assert [[r.get(k) for k in key] for r in metrics(out)] == [[r.get(k) for k in key] for r in metrics(reference)]
    # running again without --resume refuses to overwrite
    proc, log_path = run_train(config, out, wait=False)
    assert proc.wait(timeout=300) != 0 and "pass --resume" in log_path.read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_stay_synchronised(cipher_setup, tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` on CPU (gloo); accelerate's `--cpu` launcher would start a
    single process."""
    _, config = cipher_setup
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                  "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                  "--main_process_port", str(free_port())]
    out = tmp_path / "ddp"
    # with gradient accumulation: the first micro-batch of each step runs under no_sync, the second all-reduces
    log = run_train(config, out, "--set", "training.max_steps=3", "--set", "training.check_sync_every=1",
                    "--set", "training.eval_every=0", "--set", "training.gradient_accumulation_steps=2",
                    launcher=accelerate)
    assert "2 process(es)" in log
    rows = [r for r in metrics(out) if "param_sync_max_diff" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert len(r["loss_per_process"]) == 2
        assert r["loss_per_process"][0] != r["loss_per_process"][1]  # different batches on the two processes...
        assert r["param_sync_max_diff"] == 0.0  # ...and identical parameters after every update


def test_time_budget_stops_cleanly_resumes_and_reports(cipher_setup, tmp_path):
    """`training.max_minutes` ends a run with a checkpoint and an export; `--resume` continues it; the report
    compares the exported encoder with the untrained one."""
    _, config = cipher_setup
    out = tmp_path / "timed"
    log = run_train(config, out, "--set", "training.max_steps=null", "--set", "training.max_minutes=0.02",
                    "--set", "training.eval_every=1000000")
    assert "training.max_minutes (0.02) reached" in log
    rows = metrics(out)
    stop = rows[-1]["step"]
    assert rows[0]["step"] == 0 and 1 <= stop < 100000 and "valid_error" in rows[-1]  # validated when stopping
    assert (out / "checkpoints" / f"step-{stop:08d}" / "COMPLETE").is_file()
    assert json.loads((out / "final" / "training_state.json").read_text())["step"] == stop
    assert type(AutoModel.from_pretrained(out / "untrained")) is LaserModel
    log = run_train(config, out, "--resume", "--set", f"training.max_steps={stop + 3}",
                    "--set", "training.eval_every=1000000")
    assert f"(step {stop}," in log and metrics(out)[-1]["step"] == stop + 3

    report = subprocess.run([sys.executable, str(REPO / "training" / "report.py"), "--run", str(out),
                             "--tatoeba-dir", "none"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert report.returncode == 0, report.stderr[-3000:]
    data = json.loads((out / "report.json").read_text())
    assert data["exported_step"] in (stop, stop + 3)  # the better of the two validations (final_model: best)
    untrained, trained = data["flores"]["untrained"], data["flores"]["trained"]
    assert set(untrained) == set(trained) == {"en", "xx", "yy"}
    by_step = {r["step"]: {k[len("valid_error_"):]: v for k, v in r.items() if k.startswith("valid_error_")}
               for r in metrics(out) if "valid_error" in r}
    assert untrained == by_step[0] and trained == by_step[data["exported_step"]]
    assert "| xx |" in (out / "report.md").read_text()
    # a run directory without metrics is refused with a message
    bad = subprocess.run([sys.executable, str(REPO / "training" / "report.py"), "--run", str(tmp_path)],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert bad.returncode == 2 and "missing" in bad.stderr


def test_time_schedule_decays_to_zero_at_the_budget_and_refuses_resume(cipher_setup, tmp_path):
    """`lr_schedule_over: minutes`: warm-up by steps, then a linear decay that reaches 0 when `max_minutes` is
    spent, whatever the machine's speed; such a run cannot be resumed (its decay depended on that speed)."""
    from training.train import time_linear_schedule

    param = torch.nn.Parameter(torch.zeros(1))
    progress = [0.0]
    optimizer = torch.optim.SGD([param], lr=2.0)
    scheduler = time_linear_schedule(optimizer, 4, progress)
    lrs = []
    for share in (0.0, 0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 1.5):
        progress[0] = share
        optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    assert lrs == pytest.approx([0.5, 1.0, 1.5, 2.0, 1.5, 1.0, 0.0, 0.0])

    _, config = cipher_setup
    out = tmp_path / "time-schedule"
    log = run_train(config, out, "--set", "training.max_steps=null", "--set", "training.max_minutes=0.3",
                    "--set", "training.lr_scheduler=linear", "--set", "training.lr_schedule_over=minutes",
                    "--set", "training.warmup_steps=3", "--set", "training.log_every=1",
                    "--set", "training.eval_every=1000000")
    assert "training.max_minutes (0.3) reached" in log and "cannot be resumed" in log and "--resume continues" not in log
    logged = [(r["step"], r["lr"]) for r in metrics(out) if "lr" in r]
    assert logged[0][1] == pytest.approx(0.01 / 3)  # step 1: warm-up 1/3, no time spent yet at its update
    # steps 2 and 3: the warm-up factor times 1 - (share of time spent), a share that only grows
    time_factors = [lr / (0.01 * step / 3) for step, lr in logged[:3]]
    assert all(1 >= a >= b > 0 for a, b in zip(time_factors, time_factors[1:]))
    decay = [lr for step, lr in logged if step > 3]
    assert len(decay) > 3 and all(b <= a for a, b in zip(decay, decay[1:]))  # no step back up
    assert decay[-1] < 0.25 * 0.01  # close to 0 at the budget (a step or two of lag)
    resumed = subprocess.run([sys.executable, str(REPO / "training" / "train.py"), "--config", str(config),
                              "--output-dir", str(out), "--resume", "--set", "training.max_steps=null",
                              "--set", "training.max_minutes=0.1", "--set", "training.lr_scheduler=linear",
                              "--set", "training.lr_schedule_over=minutes"],
                             capture_output=True, text=True, cwd=REPO,
                             env=dict(os.environ, CUDA_VISIBLE_DEVICES="",
                                      PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)])))
    assert resumed.returncode == 2 and "schedule over minutes cannot be continued" in resumed.stderr
    with pytest.raises(ValueError, match="lr_schedule_over: minutes needs"):
        load_config(config, ["training.lr_schedule_over=minutes", "training.max_minutes=5"])  # constant scheduler
    with pytest.raises(ValueError, match="lr_schedule_over: minutes needs"):
        load_config(config, ["training.lr_schedule_over=minutes", "training.lr_scheduler=linear"])  # no budget
    with pytest.raises(ValueError, match="lr_schedule_over must be"):
        load_config(config, ["training.lr_schedule_over=hours"])


def test_shipped_configs_load_and_overrides_are_checked():
    paper = load_config(REPO / "training" / "configs" / "paper.yaml")
    assert paper["model"]["num_layers"] == 5 and paper["data"]["target_languages"] == ["en", "es"]
    base = load_config(REPO / "training" / "configs" / "laser-base.yaml")  # the GPU run: laser-mini's BPE, bigger
    mini = load_config(REPO / "training" / "configs" / "laser-mini.yaml")
    assert base["data"]["corpora"] == mini["data"]["corpora"] and (REPO / base["tokenizer"]["path"]).is_dir()
    assert base["training"]["objective"] == mini["training"]["objective"] == "ranking"
    assert base["model"]["num_layers"] * base["model"]["hidden_size"] > mini["model"]["num_layers"] * 256
    tiny = load_config(REPO / "training" / "configs" / "tiny-cpu.yaml",
                       ["training.mixed_precision=no", "training.max_steps=7", "model.hidden_size=32"])
    # YAML reads a bare `no` as false; accelerate needs the string
    assert tiny["training"]["mixed_precision"] == "no"
    assert tiny["training"]["max_steps"] == 7 and tiny["model"]["hidden_size"] == 32
    # YAML 1.1 reads `1e-3` (no dot) as a string: a numeric key takes the number; a non-number stays and is refused
    lr = load_config(REPO / "training" / "configs" / "tiny-cpu.yaml", ["training.learning_rate=1e-3"])
    assert lr["training"]["learning_rate"] == 1e-3 and isinstance(lr["training"]["learning_rate"], float)
    assert load_config(REPO / "training" / "configs" / "tiny-cpu.yaml",
                       ["training.init_from=1e-3"])["training"]["init_from"] == "1e-3"  # its default is no number
    with pytest.raises(ValueError, match="mixed_precision"):
        load_config(REPO / "training" / "configs" / "tiny-cpu.yaml", ["training.mixed_precision=fp64"])
    with pytest.raises(ValueError, match="unknown config key"):
        load_config(REPO / "training" / "configs" / "tiny-cpu.yaml", ["training.max_stepz=7"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        load_config(REPO / "training" / "configs" / "tiny-cpu.yaml", ["training.max_steps"])
    with pytest.raises(ValueError, match="max_minutes must be positive"):
        load_config(REPO / "training" / "configs" / "tiny-cpu.yaml", ["training.max_minutes=0"])
    with pytest.raises(ValueError, match="set training.max_steps"):
        load_config(REPO / "training" / "configs" / "tiny-cpu.yaml", ["training.max_steps=null"])


def test_the_bpe_is_learned_on_the_target_languages_named(tmp_path):
    """`tokenizer.bpe_target_languages`: a distillation student trained against several target languages it never
    reads learns its BPE on its own languages and English only, not on the others."""
    from training.train import get_tokenizer

    write_cipher_corpus(tmp_path / "mp", 200, seed=2)
    (tmp_path / "mp" / "de.txt").write_text((tmp_path / "mp" / "yy.txt").read_text())  # a second target language
    cfg = {"data": {"corpora": [str(tmp_path / "mp")], "source_languages": ["xx"], "target_languages": ["en", "de"],
                    "max_length": 40, "cache_dir": str(tmp_path / "cache")},
           "tokenizer": {"bpe_merges": 50, "bpe_target_languages": ["en"]},
           "training": {"objective": "distillation", "max_steps": 1}, "distillation": {"teacher": "t"}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    get_tokenizer(load_config(tmp_path / "cfg.yaml"), tmp_path / "run", log=lambda _: None)
    assert sorted(json.loads((tmp_path / "run" / "tokenizer" / "bpe_stats.json").read_text())["lines"]) == ["en", "xx"]
    get_tokenizer(load_config(tmp_path / "cfg.yaml", ["tokenizer.bpe_target_languages=null"]), tmp_path / "all",
                  log=lambda _: None)
    assert sorted(json.loads((tmp_path / "all" / "tokenizer" / "bpe_stats.json").read_text())["lines"]) == \
        ["de", "en", "xx"]
    with pytest.raises(ValueError, match="must be some of data.target_languages"):
        get_tokenizer(load_config(tmp_path / "cfg.yaml", ["tokenizer.bpe_target_languages=[fr]"]), tmp_path / "bad",
                      log=lambda _: None)


def test_every_shipped_config_loads():
    """Every config in training/configs passes the key and value checks (a typo in one would fail at its launch)."""
    configs = sorted((REPO / "training" / "configs").glob("*.yaml"))
    assert len(configs) > 5
    for path in configs:
        cfg = load_config(path)
        assert cfg["data"]["corpora"] and cfg["training"]["objective"], path


def test_config_base_chain_merges_and_loops_are_refused(tmp_path):
    (tmp_path / "first.yaml").write_text(yaml.safe_dump({
        "data": {"corpora": ["a", "b"], "max_length": 50}, "model": {"hidden_size": 64, "num_layers": 2},
        "training": {"max_steps": 100, "learning_rate": 0.002}}))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "second.yaml").write_text(yaml.safe_dump({
        "base": "../first.yaml", "data": {"corpora": ["c"]}, "training": {"learning_rate": 0.001}}))
    cfg = load_config(tmp_path / "sub" / "second.yaml", ["model.num_layers=3"])
    assert cfg["data"]["corpora"] == ["c"] and cfg["data"]["max_length"] == 50  # lists replaced, sections merged
    assert cfg["model"] == {**cfg["model"], "hidden_size": 64, "num_layers": 3}
    assert cfg["training"]["max_steps"] == 100 and cfg["training"]["learning_rate"] == 0.001
    (tmp_path / "first.yaml").write_text(yaml.safe_dump({"base": "sub/second.yaml"}))
    with pytest.raises(ValueError, match="loops back"):
        load_config(tmp_path / "sub" / "second.yaml")


def test_real_data_smoke_run(tmp_path):
    require_shared(PARALLEL / "train" / "ntrex128", PARALLEL / "train" / "multi30k",
                   PARALLEL / "valid" / "flores200-devtest")
    cfg = {
        "data": {"corpora": [{"path": "../shared/data/parallel/train/ntrex128", "languages": ["de", "en", "es"]},
                             {"path": "../shared/data/parallel/train/multi30k", "languages": ["de", "en"]}],
                 "source_languages": ["de", "es", "en"], "target_languages": ["en", "es"], "max_length": 200,
                 "cache_dir": str(tmp_path / "cache")},
        "tokenizer": {"bpe_merges": 500, "bpe_max_lines": 3000},
        "model": {"embed_dim": 16, "hidden_size": 16, "num_layers": 1, "decoder_embed_dim": 16,
                  "decoder_hidden_size": 32},
        "batching": {"max_tokens": 2000, "num_workers": 0},
        "training": {"max_steps": 3, "log_every": 1, "eval_every": 3, "save_every": 3, "report_to": "tensorboard"},
        "validation": {"path": "../shared/data/parallel/valid/flores200-devtest", "max_sentences": 40},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run_train(config, tmp_path / "out")
    out = tmp_path / "out"
    rows = metrics(out)
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and all(np.isfinite(r["loss"]) for r in rows[1:])
    assert {"valid_error_de", "valid_error_es", "valid_error_en", "valid_loss"} <= set(rows[-1])
    stats = json.loads((out / "data_stats.json").read_text())
    assert set(stats["pairs_per_direction"]) == {"de-en", "de-es", "es-en", "en-es"}
    # every line is accounted for: kept, skipped (and counted) or missing
    ntrex = [c for c in stats["corpora"] if c["kind"] == "multiparallel"]
    bitexts = [c for c in stats["corpora"] if c["kind"] == "bitext"]
    assert len(ntrex) == 1 and len(bitexts) == 4  # Multi30k: 4 de-en test sets
    assert ntrex[0]["pairs"] + sum(ntrex[0]["skipped"].values()) + ntrex[0]["missing"] == 1997 * 4
    assert sum(c["pairs"] + sum(c["skipped"].values()) for c in bitexts) == 3532
    assert sum(c["pairs"] for c in bitexts) > 3000 and ntrex[0]["pairs"] > 4 * 1500
    assert any((out / "logs").rglob("events.out.tfevents*"))
    from hf_laser import LaserEncoder

    emb = LaserEncoder.from_pretrained(out / "final").encode(["Guten Tag!", "Good morning!"], lang=["de", "en"])
    assert emb.shape == (2, 32) and np.isfinite(emb).all()

    # the per-language report: FLORES from the run's validation, Tatoeba (deu, spa) embedded by both encoders
    require_shared(SHARED / "data" / "tatoeba" / "v1")
    report = subprocess.run([sys.executable, str(REPO / "training" / "report.py"), "--run", str(out)],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert report.returncode == 0, report.stderr[-3000:]
    data = json.loads((out / "report.json").read_text())
    tatoeba = data["tatoeba"]
    assert tatoeba["languages"] == ["deu", "spa"]
    for model in ("untrained", "trained"):
        assert {"deu", "spa", "average"} <= set(tatoeba[model])
        assert all(0 <= tatoeba[model][lang]["xx2en_error"] <= 100 for lang in ("deu", "spa"))
    assert tatoeba["untrained"]["deu"] != tatoeba["trained"]["deu"]
    assert "| deu |" in report.stdout and "| es |" in report.stdout
    # --baseline: another encoder's errors as a third column (here the untrained one again: the same figures)
    report = subprocess.run([sys.executable, str(REPO / "training" / "report.py"), "--run", str(out), "--baseline",
                             str(out / "untrained")], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert report.returncode == 0, report.stderr[-3000:]
    tatoeba = json.loads((out / "report.json").read_text())["tatoeba"]
    assert tatoeba["baseline"] == tatoeba["untrained"] != tatoeba["trained"]
    assert "xx→en baseline" in report.stdout
    # the first report's Tatoeba measurements were kept (OUT/report_parts/) and reused, saying so; the baseline's new
    assert "tatoeba-untrained: reusing the measurement" in report.stderr
    assert "tatoeba-trained: reusing the measurement" in report.stderr
    assert "tatoeba-baseline: reusing" not in report.stderr and (out / "report_parts" / "tatoeba-baseline.json").is_file()
    first = (out / "report.json").read_text()
    fresh = subprocess.run([sys.executable, str(REPO / "training" / "report.py"), "--run", str(out), "--baseline",
                            str(out / "untrained"), "--fresh"], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert fresh.returncode == 0 and "reusing" not in fresh.stderr  # --fresh measures all again: the same figures
    assert json.loads((out / "report.json").read_text()) == json.loads(first)
    # the baseline's FLORES is measured as the run's validation was: on the untrained encoder, its step-0 figures
    flores = json.loads((out / "report.json").read_text())["flores"]
    assert set(flores["baseline"]) == set(flores["untrained"]) == {"de", "es", "en"}
    assert flores["baseline"] == pytest.approx(flores["untrained"], abs=1e-6)
    assert "FLORES baseline" in report.stdout
    bad = subprocess.run([sys.executable, str(REPO / "training" / "report.py"), "--run", str(out), "--baseline",
                          str(tmp_path)], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert bad.returncode == 2 and "is not a model directory" in bad.stderr


def test_an_output_dir_with_checkpoints_is_refused_in_one_line(tmp_path):
    """Without --resume, a run into an OUT that has checkpoints stops before any work: one line, exit 2; through
    `accelerate launch -q` no CalledProcessError traceback follows it (exit 1, accelerate's own status)."""
    out = tmp_path / "out"
    (out / "checkpoints" / "step-00000007").mkdir(parents=True)
    (out / "checkpoints" / "step-00000007" / "COMPLETE").write_text("7")
    config = REPO / "training" / "configs" / "tiny-cpu.yaml"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    direct = subprocess.run([sys.executable, str(REPO / "training" / "train.py"), "--config", str(config),
                             "--output-dir", str(out)], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert direct.returncode == 2, direct.stderr[-2000:]
    assert "Traceback" not in direct.stderr
    assert "already has checkpoints (step-00000007); pass --resume" in direct.stderr
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--config_file",
                str(REPO / "training" / "accelerate_configs" / "cpu.yaml")]
    launched = subprocess.run([*launcher, str(REPO / "training" / "train.py"), "--config", str(config),
                               "--output-dir", str(out)], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert launched.returncode == 1 and "Traceback" not in launched.stderr, launched.stderr[-2000:]
    assert "already has checkpoints" in launched.stderr
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints"]  # nothing written


def test_init_from_continues_an_exported_model_and_refuses_a_mismatched_one(cipher_setup, cipher_run, tmp_path):
    """`training.init_from`: step 0 of the continued run is the exported encoder (its validation error is the one
    the first run selected it by); another vocabulary or encoder shape is refused before any training."""
    _, config = cipher_setup
    first, _ = cipher_run
    final = first / "final"
    selected = min((r for r in metrics(first) if "valid_error" in r and r["step"] > 0), key=lambda r: r["valid_error"])
    out = tmp_path / "continued"
    log = run_train(config, out, "--set", f"training.init_from={final}", "--set", f"tokenizer.path={final}",
                    "--set", "training.max_steps=20", "--set", "training.eval_every=20")
    assert "encoder initialised from" in log
    rows = metrics(out)
    assert rows[0]["step"] == 0 and rows[0]["valid_error"] == pytest.approx(selected["valid_error"], abs=1e-9)
    fresh = [r for r in metrics(first) if r["step"] == 0][0]
    assert rows[0]["valid_error"] < fresh["valid_error"] / 2  # not the untrained model
    # the report names step 0 for what it is: the encoder the run continued, not an untrained one
    from training.report import main as report_main

    assert report_main(["--run", str(out), "--tatoeba-dir", "none"]) == 0
    markdown = (out / "report.md").read_text()
    assert "| language | FLORES start | FLORES trained |" in markdown and f"step 0: `{final}`" in markdown
    assert "untrained" not in markdown
    # another encoder shape, then another vocabulary: refused, naming what differs
    proc, log_path = run_train(config, tmp_path / "wide", "--set", f"training.init_from={final}", "--set",
                               f"tokenizer.path={final}", "--set", "model.hidden_size=48", wait=False)
    assert proc.wait(timeout=300) != 0 and "hidden_size" in log_path.read_text()
    assert "training.init_widen: true" in log_path.read_text()  # the error names the way to widen on purpose
    widened = tmp_path / "widened"
    log = run_train(config, widened, "--set", f"training.init_from={final}", "--set", f"tokenizer.path={final}",
                    "--set", "model.hidden_size=48", "--set", "training.init_widen=true",
                    "--set", "training.max_steps=10", "--set", "training.eval_every=10")
    assert "training.init_widen: hidden_size 32 -> 48" in log
    step0 = metrics(widened)[0]  # the start's encoder plus near-zero dimensions: its error within 2 points
    assert step0["step"] == 0 and step0["valid_error"] == pytest.approx(selected["valid_error"], abs=2.0)
    proc, log_path = run_train(config, tmp_path / "vocab", "--set", f"training.init_from={final}", "--set",
                               "tokenizer.bpe_merges=200", wait=False)
    assert proc.wait(timeout=300) != 0
    text = log_path.read_text()
    assert "vocab_size" in text or "another vocabulary" in text, text[-2000:]


@pytest.mark.parametrize("num_layers,bidirectional", [(1, True), (2, True), (2, False)])
def test_widened_encoder_keeps_the_start_embedding_in_its_old_dimensions(num_layers, bidirectional):
    """`training.init_widen`: the old units compute what they did (the start's embedding, in their dimensions, to
    float rounding); the new ones start small, distinct, and then learn (they get gradients)."""
    from training.train import widen_encoder_state

    torch.manual_seed(0)
    small = LaserModel(tiny_config(hidden_size=6, num_layers=num_layers, bidirectional=bidirectional)).eval()
    wide = LaserModel(tiny_config(hidden_size=10, num_layers=num_layers, bidirectional=bidirectional)).eval()
    state = widen_encoder_state(small.state_dict(), 6, 10, num_layers, bidirectional, 0.01,
                                torch.Generator().manual_seed(0))
    wide.load_state_dict(state, strict=True)
    ids = torch.randint(4, 60, (5, 9))
    ids[:, -1] = 2
    ids[0, :4] = 1  # a left-padded sentence
    old_dims = torch.cat([torch.arange(6) + d * 10 for d in range(2 if bidirectional else 1)])
    new_dims = torch.tensor([i for i in range(wide.config.embedding_dim) if i not in set(old_dims.tolist())])
    with torch.no_grad():
        start, widened = small(input_ids=ids).pooler_output, wide(input_ids=ids).pooler_output
    assert torch.allclose(widened[:, old_dims], start, atol=1e-6, rtol=0)
    assert widened[:, new_dims].abs().max() < 0.1 * start.abs().max()
    hh = state["lstm.weight_hh_l0"]
    assert hh[:6, 6:].abs().max() == 0 and hh[10:16, 6:].abs().max() == 0  # new units do not feed old gates
    assert len(set(hh[6:10].flatten().tolist())) == hh[6:10].numel()  # new units start distinct
    wide.train()
    wide(input_ids=ids).pooler_output[:, new_dims].sum().backward()
    assert wide.lstm.weight_ih_l0.grad[6:10].abs().sum() > 0
    with pytest.raises(ValueError, match="smaller"):
        widen_encoder_state(wide.state_dict(), 10, 6, num_layers, bidirectional, 0.01, torch.Generator())
