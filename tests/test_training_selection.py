"""Model selection without the test set: the Tatoeba validation split (training/split_tatoeba.py), pairs between two
non-target languages (`data.bitext_pairs: all`), extra validation sets and `training.best_metric`."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import pytest
import yaml
from conftest import REPO

sys.path.insert(0, str(REPO))
from test_training import cipher, metrics, run_train, write_cipher_corpus  # noqa: E402
from training.data import collect_pairs, resolve_corpora  # noqa: E402
from training.split_tatoeba import normalise, split  # noqa: E402
from training.train import load_config  # noqa: E402

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def write_gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return fh.read().splitlines()


@pytest.fixture
def tatoeba_folder(tmp_path):
    """de-en (300 pairs), fr-en (40 pairs: below --min-pairs) and de-fr bitexts that share sentences with de-en."""
    rng = np.random.default_rng(0)
    en = [" ".join(rng.choice(WORDS, size=rng.integers(2, 6))) + f" {i}." for i in range(300)]
    de = [f"DE {s}" for s in en]
    fr = [f"FR {s}" for s in en]
    src = tmp_path / "tatoeba"
    write_gz(src / "tatoeba.de-en.de.gz", de)
    write_gz(src / "tatoeba.de-en.en.gz", en)
    write_gz(src / "tatoeba.fr-en.fr.gz", fr[:40])
    write_gz(src / "tatoeba.fr-en.en.gz", en[:40])
    # the same German sentences paired with French, with other punctuation and case: must go where they are held out
    write_gz(src / "tatoeba.de-fr.de.gz", [s.upper().replace(".", "!") for s in de])
    write_gz(src / "tatoeba.de-fr.fr.gz", fr)
    return src, de, en, fr


def test_split_holds_out_pairs_and_removes_every_pair_sharing_a_sentence(tmp_path, tatoeba_folder):
    src, de, en, fr = tatoeba_folder
    out = tmp_path / "split"
    result = split(src, out, per_lang=50, min_pairs=100, seed=3)
    assert result["held_out"] == {"de": 50}  # fr-en has only 40 pairs
    valid_de = (out / "valid" / "de-en" / "de.txt").read_text().splitlines()
    valid_en = (out / "valid" / "de-en" / "en.txt").read_text().splitlines()
    assert len(valid_de) == len(valid_en) == 50 and len(set(valid_de)) == 50
    assert all(de.index(d) == en.index(e) for d, e in zip(valid_de, valid_en))  # still aligned
    assert all(len(e.split()) >= 3 for e in valid_en)  # Tatoeba v1's selection rule
    held = {normalise(s) for s in valid_de + valid_en}
    for path in (out / "train").iterdir():
        assert not held & {normalise(s) for s in read_gz(path)}, path.name
    # the held-out German sentences also left the de-fr bitext (matched ignoring case and punctuation), and the
    # fr-en pairs whose English side is held out left fr-en; the other pairs stay, aligned
    train_de, train_en = read_gz(out / "train" / "tatoeba.de-en.de.gz"), read_gz(out / "train" / "tatoeba.de-en.en.gz")
    assert len(train_de) == 250 and all(d == f"DE {e}" for d, e in zip(train_de, train_en))
    assert len(read_gz(out / "train" / "tatoeba.de-fr.de.gz")) == 250
    removed_fr = sum(normalise(e) in held for e in en[:40])
    assert len(read_gz(out / "train" / "tatoeba.fr-en.fr.gz")) == 40 - removed_fr
    assert result["removed_total"] == 50 + 50 + removed_fr
    # deterministic, and a second run with the same arguments and sources does nothing
    again = split(src, tmp_path / "again", per_lang=50, min_pairs=100, seed=3)
    assert (tmp_path / "again" / "valid" / "de-en" / "de.txt").read_text() == "\n".join(valid_de) + "\n"
    assert again["held_out"] == result["held_out"]
    stamp = (out / "train" / "tatoeba.de-en.de.gz").stat().st_mtime_ns
    split(src, out, per_lang=50, min_pairs=100, seed=3)
    assert (out / "train" / "tatoeba.de-en.de.gz").stat().st_mtime_ns == stamp
    # another seed gives another split
    other = split(src, tmp_path / "other", per_lang=50, min_pairs=100, seed=4)
    assert (tmp_path / "other" / "valid" / "de-en" / "de.txt").read_text().splitlines() != valid_de
    assert other["held_out"] == {"de": 50}


def test_split_cli_rejects_a_missing_folder(tmp_path, capsys):
    from training.split_tatoeba import main

    assert main(["--src", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_bitext_pairs_all_takes_bitexts_between_non_targets(tmp_path, tatoeba_folder):
    src, *_ = tatoeba_folder
    corpora = resolve_corpora([str(src)])
    only_en = collect_pairs(corpora, None, ["en"])
    assert sorted(only_en.directions) == [("de", "en"), ("fr", "en")]
    every = collect_pairs(corpora, None, ["en"], bitext_pairs="all")
    assert sorted(every.directions) == [("de", "en"), ("de", "fr"), ("fr", "en")]  # de-fr once, not twice
    d = every.directions.index(("de", "fr"))
    assert sum(1 for x in every.direction if x == d) == 300
    # source_languages still applies: without fr as a source, no de-fr pairs
    assert ("de", "fr") not in collect_pairs(corpora, ["de"], ["en"], bitext_pairs="all").directions
    # the BPE sample is the text of the pairs with a target language either way (runs compare on the same tokens)
    from training.learn_bpe import training_text

    cfg = {"corpora": [str(src)], "target_languages": ["en"]}
    assert training_text({**cfg, "bitext_pairs": "all"}) == training_text(cfg)


def test_config_checks_for_the_new_keys(tmp_path):
    cfg = REPO / "training" / "configs" / "tiny-cpu.yaml"
    with pytest.raises(ValueError, match="best_metric"):
        load_config(cfg, ["training.best_metric=tatoeba"])
    with pytest.raises(ValueError, match="needs validation.extra_path"):
        load_config(cfg, ["training.best_metric=valid_mean"])
    with pytest.raises(ValueError, match="bitext_pairs must be"):
        load_config(cfg, ["data.bitext_pairs=some"])
    with pytest.raises(ValueError, match="needs training.objective: ranking"):
        load_config(cfg, ["data.bitext_pairs=all", "training.objective=translation"])
    mini = load_config(REPO / "training" / "configs" / "laser-mini.yaml")
    assert mini["training"]["best_metric"] == "valid_mean" and mini["validation"]["extra_path"]
    assert "data/tatoeba-split/train" in mini["data"]["corpora"]


def test_extra_validation_selects_the_best_step_by_the_mean(tmp_path):
    """A short ranking run on the cipher data with a de-fr-like bitext between two non-targets and two extra
    validation sets: the metrics, the best step's record and the exported card follow `best_metric`."""
    write_cipher_corpus(tmp_path / "train", 600, seed=0)
    write_cipher_corpus(tmp_path / "valid", 80, seed=1)
    rng = np.random.default_rng(5)
    rows = [" ".join(rng.choice(["man", "dog", "cat", "tree", "city", "book"], size=4)) for _ in range(200)]
    xx = [" ".join(cipher(w, 1) for w in r.split()) for r in rows]
    yy = [" ".join(cipher(w, 2) for w in r.split()[::-1]) for r in rows]
    write_gz(tmp_path / "bi" / "tatoeba.xx-yy.xx.gz", xx)
    write_gz(tmp_path / "bi" / "tatoeba.xx-yy.yy.gz", yy)
    for lang, shift in (("xx", 1), ("yy", 2)):
        held = [" ".join(rng.choice(["woman", "child", "house", "car"], size=3)) for _ in range(40)]
        folder = tmp_path / "extra" / f"{lang}-en"
        folder.mkdir(parents=True)
        (folder / "en.txt").write_text("\n".join(held) + "\n")
        ciphered = [" ".join(cipher(w, shift) for w in (h.split() if lang == "xx" else h.split()[::-1]))
                    for h in held]
        (folder / f"{lang}.txt").write_text("\n".join(ciphered) + "\n")
    (tmp_path / "extra" / "zz-en").mkdir()  # a set of a language the run does not have: left out, named
    (tmp_path / "extra" / "zz-en" / "zz.txt").write_text("a\n")
    (tmp_path / "extra" / "zz-en" / "en.txt").write_text("b\n")
    cfg = {
        "seed": 2,
        "data": {"corpora": [str(tmp_path / "train"), str(tmp_path / "bi")], "target_languages": ["en"],
                 "bitext_pairs": "all", "max_length": 40, "cache_dir": str(tmp_path / "cache")},
        "tokenizer": {"bpe_merges": 200},
        "model": {"embed_dim": 16, "hidden_size": 16, "num_layers": 1},
        "batching": {"max_tokens": 400, "num_workers": 0},
        "training": {"objective": "ranking", "max_steps": 40, "learning_rate": 0.01, "log_every": 10,
                     "eval_every": 20, "save_every": 20, "report_to": None, "best_metric": "valid_mean"},
        "validation": {"path": str(tmp_path / "valid"), "extra_path": str(tmp_path / "extra"),
                       "decoder_loss": False},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    log = run_train(config, out)
    assert "left out: ['zz-en']" in log
    stats = json.loads((out / "data_stats.json").read_text())
    assert stats["pairs_per_direction"]["xx-yy"] == 200
    validated = [r for r in metrics(out) if "valid_mean" in r]
    assert [r["step"] for r in validated] == [0, 20, 40]
    for r in validated:
        assert set(r) >= {"valid_error", "valid_extra_error", "valid_extra_error_xx-en", "valid_extra_error_yy-en"}
        assert r["valid_extra_error"] == pytest.approx((r["valid_extra_error_xx-en"] + r["valid_extra_error_yy-en"]) / 2)
        assert r["valid_mean"] == pytest.approx((r["valid_error"] + r["valid_extra_error"]) / 2)
    best = min(validated[1:], key=lambda r: r["valid_mean"])
    state = json.loads((out / "best" / "training_state.json").read_text())
    assert state == {"step": best["step"], "valid_mean": pytest.approx(best["valid_mean"])}
    assert f"best validation error {best['valid_mean']:.2f}% (valid_mean) at step {best['step']}" in (out / "final" / "README.md").read_text()

    # report.py: the held-out sets get a table; a --baseline is measured on them as the validation measured the run
    # (here the untrained encoder: its step-0 figures, exactly)
    from training.report import main as report_main

    assert report_main(["--run", str(out), "--tatoeba-dir", "none", "--baseline", str(out / "untrained")]) == 0
    report = json.loads((out / "report.json").read_text())
    step0 = validated[0]
    assert report["held_out"]["trained"] == {name: pytest.approx(best[f"valid_extra_error_{name}"])
                                             for name in ("xx-en", "yy-en")}
    assert report["held_out"]["baseline"] == {name: pytest.approx(step0[f"valid_extra_error_{name}"], abs=1e-6)
                                              for name in ("xx-en", "yy-en")}
    assert report["flores"]["baseline"] == pytest.approx(report["flores"]["untrained"], abs=1e-6)
    assert "| xx-en |" in (out / "report.md").read_text()
    # --validation-of: a run that did not validate (the same run, its validation rows removed) is measured here on
    # the validation of one that did, and gets exactly the figures that validation gave; a run that validated is refused
    novalid = tmp_path / "novalid"
    shutil.copytree(out, novalid, ignore=shutil.ignore_patterns("report_parts", "report.*"))
    (novalid / "metrics.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if not k.startswith("valid")}) + "\n" for r in metrics(out)))
    with pytest.raises(SystemExit):
        report_main(["--run", str(out), "--tatoeba-dir", "none", "--validation-of", str(out)])
    assert report_main(["--run", str(novalid), "--tatoeba-dir", "none", "--validation-of", str(out)]) == 0
    measured = json.loads((novalid / "report.json").read_text())
    assert measured["flores"]["untrained"] == pytest.approx(report["flores"]["untrained"], abs=1e-6)
    assert measured["flores"]["trained"] == pytest.approx(report["flores"]["trained"], abs=1e-6)
    assert measured["held_out"]["trained"] == pytest.approx(report["held_out"]["trained"], abs=1e-6)
    assert measured["validated_as"] == str(out) and "the run did not validate" in (novalid / "report.md").read_text()

    # average_checkpoints.py (same run, to spare a second one): the mean of one checkpoint with itself validates as
    # that step did; the mean of two is their element-wise mean; inputs that do not match are refused
    from safetensors.torch import load_file, save_file

    from training.average_checkpoints import main as average_main
    from training.average_checkpoints import read_encoder_state

    step20, step40 = out / "checkpoints" / "step-00000020", out / "checkpoints" / "step-00000040"
    assert average_main(["--run", str(out), "--inputs", str(step40), str(step40), "--output", str(out / "same"),
                         "--validate"]) == 0
    same = json.loads((out / "same" / "training_state.json").read_text())
    assert same["valid_mean"] == pytest.approx(validated[-1]["valid_mean"], abs=1e-6)
    assert same["valid_extra_error"] == pytest.approx(validated[-1]["valid_extra_error"], abs=1e-6)
    assert average_main(["--run", str(out), "--inputs", str(step20), str(step40 / "model.safetensors"),
                         "--output", str(out / "mean")]) == 0
    a, b = read_encoder_state(step20), read_encoder_state(step40)
    mean = load_file(str(out / "mean" / "model.safetensors"))
    assert set(mean) == set(a) and not torch.equal(a["lstm.weight_hh_l0"], b["lstm.weight_hh_l0"])
    for k in a:
        torch.testing.assert_close(mean[k], (a[k] + b[k]) / 2)
    with pytest.raises(FileExistsError):
        average_main(["--run", str(out), "--inputs", str(step20), str(step40), "--output", str(out / "mean")])
    save_file({**a, "lstm.weight_hh_l0": a["lstm.weight_hh_l0"][:, :4].contiguous()}, str(out / "narrow.safetensors"))
    with pytest.raises(ValueError, match="lstm.weight_hh_l0"):
        average_main(["--run", str(out), "--inputs", str(step20), str(out / "narrow.safetensors"),
                      "--output", str(out / "never")])
    assert not (out / "never").exists()


def test_model_card_finds_the_tatoeba_split_the_run_trained_on(tmp_path, tatoeba_folder):
    from training.export_default_model import tatoeba_split

    src, *_ = tatoeba_folder
    result = split(src, tmp_path / "split", per_lang=50, min_pairs=100, seed=3)
    cfg = {"data": {"corpora": ["../shared/data/parallel/train/ntrex128", {"path": str(tmp_path / "split" / "train")}]}}
    assert tatoeba_split(cfg) == json.loads(json.dumps(result))
    assert tatoeba_split({"data": {"corpora": [str(src)]}}) is None  # the raw corpus: no split record
    # a pretokenized copy (training/pretokenize.py's manifest names each file's source): the split it was made from
    pre = tmp_path / "pretok" / "train"
    pre.mkdir(parents=True)
    (pre / ".hf_laser_pretokenized.json").write_text(json.dumps({"format": 1, "files": {"tatoeba.de-en.de": {
        "source": str(tmp_path / "split" / "train" / "tatoeba.de-en.de.gz"), "language": "de"}}}))
    assert tatoeba_split({"data": {"corpora": [{"path": str(pre)}]}}) == json.loads(json.dumps(result))


def test_model_card_names_every_stage_of_a_continued_run(tmp_path):
    from training.export_default_model import recipe_text

    first = {"data": {"corpora": ["x"]}, "batching": {"temperature": 2.0},
             "training": {"max_steps": 10000, "learning_rate": 0.002, "lr_scheduler": "linear"}}
    (tmp_path / "stage1.yaml").write_text(yaml.safe_dump(first))
    (tmp_path / "stage2.yaml").write_text(yaml.safe_dump({"base": "stage1.yaml", "training": {"init_from": "m"}}))
    fresh = recipe_text({"training": {"init_from": None}}, str(tmp_path / "stage1.yaml"))
    assert fresh.startswith(f"`{tmp_path / 'stage1.yaml'}` (`accelerate launch") and "two stages" not in fresh
    text = recipe_text({"training": {"init_from": "runs/x/final"}}, str(tmp_path / "stage2.yaml"))
    assert "two stages" in text and str(tmp_path / "stage1.yaml") in text and "temperature 2.0" in text
    assert "Adam lr 0.002 (linear decay over 10,000 steps)" in text and "`runs/x/final`" in text
    with pytest.raises(ValueError, match="no `base`"):  # a continued run whose recipe hides its first stage
        recipe_text({"training": {"init_from": "runs/x/final"}}, str(tmp_path / "stage1.yaml"))
    # a third stage continues the second: all three named, in order, each with its own schedule
    (tmp_path / "stage3.yaml").write_text(yaml.safe_dump({"base": "stage2.yaml", "training": {"learning_rate": 5e-4}}))
    text = recipe_text({"training": {"init_from": "runs/y/final"}}, str(tmp_path / "stage3.yaml"))
    assert "three stages" in text and "`runs/y/final`" in text
    assert text.index("stage1.yaml") < text.index("stage2.yaml") < text.index("stage3.yaml")
    assert text.count("Adam lr 0.002 (linear decay over 10,000 steps)") == 2  # stage 2 keeps stage 1's schedule
    # a stage whose schedule ran over minutes (a GPU session's) names them, not a step count it did not have
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump({"base": "stage2.yaml", "training": {
        "init_from": "m", "max_steps": None, "max_minutes": 8.5, "lr_schedule_over": "minutes"}}))
    (tmp_path / "gpu2.yaml").write_text(yaml.safe_dump({"base": "gpu.yaml"}))
    text = recipe_text({"training": {"init_from": "runs/z/final"}}, str(tmp_path / "gpu2.yaml"))
    assert "four stages" in text and "Adam lr 0.002 (linear decay over 8.5 minutes)" in text
    # a run continued from the shipped directory itself says so: once exported, that directory holds the new model
    from training.export_default_model import DEST, step0_text

    shipped = str(DEST.relative_to(REPO))
    text = recipe_text({"training": {"init_from": shipped}}, str(tmp_path / "stage2.yaml"))
    assert f"`{shipped}` as shipped before this model" in text
    assert "as shipped before" not in recipe_text({"training": {"init_from": "runs/x/final"}},
                                                  str(tmp_path / "stage2.yaml"))
    assert "as shipped before this model" in step0_text({"start": shipped})
    assert "widened" not in text
    # a widened last stage (training.init_widen) says from which width to which
    (tmp_path / "stage2.yaml").write_text(yaml.safe_dump({"base": "stage1.yaml", "training": {"init_from": "m"},
                                                          "model": {"num_layers": 1, "hidden_size": 256}}))
    text = recipe_text({"training": {"init_from": "runs/x/final", "init_widen": True},
                        "model": {"num_layers": 1, "hidden_size": 512}}, str(tmp_path / "stage3.yaml"))
    assert "widened from 1×256 to 1×512 units (`training.init_widen`" in text
    # the baseline given as a local path is named by its folder in the card's tables
    from training.export_default_model import report_tables

    md = "# title\n\nTatoeba; baseline: `/root/runs/old-model`:\n| a |"
    assert report_tables(md, {"baseline": "/root/runs/old-model"}) == "Tatoeba; baseline: `old-model`:\n| a |"
    # the shipped directory as the baseline: once exported it holds the new model, so the card says "before"
    from training.export_default_model import baseline_text

    md = f"# title\n\nTatoeba; baseline: `{shipped}`:\n| a |"
    assert report_tables(md, {"baseline": shipped}) == (
        f"Tatoeba; baseline: `{DEST.name}, shipped before this model`:\n| a |")
    assert baseline_text({"baseline": shipped, "start": shipped}).endswith(
        f'(`{DEST.name}, shipped before this model`) (the same encoder as "start")')
    assert "same encoder" not in baseline_text({"baseline": shipped, "start": "runs/x/final"})
    # a stage that widened the encoder says so, whichever stage it is (here the second of three)
    (tmp_path / "stage3.yaml").write_text(yaml.safe_dump({"base": "stage2.yaml",
                                                          "training": {"init_from": "m", "init_widen": True},
                                                          "model": {"num_layers": 1, "hidden_size": 512}}))
    (tmp_path / "stage4.yaml").write_text(yaml.safe_dump({"base": "stage3.yaml", "training": {"init_from": "m"}}))
    text = recipe_text({"training": {"init_from": "runs/x/final"}, "model": {"num_layers": 1, "hidden_size": 512}},
                       str(tmp_path / "stage4.yaml"))
    assert text.count("widened") == 1 and text.index("stage3.yaml") < text.index("widened from 1×256 to 1×512") \
        < text.index("stage4.yaml")
    assert step0_text({"start": "runs/x/final"}) == (
        '"start" is the encoder this run continued (`runs/x/final`) at step 0')


def test_export_does_not_claim_a_float16_cost_it_cannot_measure(tmp_path):
    """A GPU session brings back float16 weights only: the export's float32-vs-float16 comparison would compare the
    float16 weights with themselves (a difference of 0), so it is skipped and the card says why."""
    from safetensors.torch import save_file

    from training.export_default_model import storage_cost

    (tmp_path / "final").mkdir()
    save_file({"lstm.weight_hh_l0": torch.zeros(4, 2, dtype=torch.float16)}, str(tmp_path / "final" / "model.safetensors"))
    assert storage_cost(tmp_path, tmp_path / "dest") is None


def test_export_refuses_a_recipe_that_is_not_the_runs_config(tmp_path, capsys):
    """The card names --recipe as the run's config: a recipe that differs from the run's config.yaml in what the run
    learned (not in where it started from) stops the export before anything is written."""
    from training.export_default_model import main as export_main, recipe_differences
    from training.train import load_config

    (tmp_path / "stage1.yaml").write_text(yaml.safe_dump({"data": {"corpora": ["x"]}, "training": {"max_steps": 10}}))
    recipe = tmp_path / "stage2.yaml"
    recipe.write_text(yaml.safe_dump({"base": "stage1.yaml", "batching": {"max_tokens": 24000},
                                      "training": {"init_from": "runs/stage1/final"}}))
    ran = load_config(recipe, ["training.init_from=src/hf_laser/models/laser-mini", "tokenizer.path=elsewhere",
                               "data.num_proc=8"])
    assert recipe_differences(ran, str(recipe)) == []  # another copy of the start, more processes: the same recipe
    del ran["batching"]["corpus_weights"]  # a run older than a setting ran with its default
    assert recipe_differences(ran, str(recipe)) == []
    ran["batching"]["max_tokens"] = 12000
    ran["training"]["ranking_margin"] = 0.3
    assert recipe_differences(ran, str(recipe)) == [
        "batching.max_tokens: recipe 24000, run 12000", "training.ranking_margin: recipe 0.0, run 0.3"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(ran))
    (run / "report.json").write_text("{}")
    (run / "tatoeba.png").write_bytes(b"")
    with pytest.raises(SystemExit):
        export_main(["--run", str(run), "--recipe", str(recipe), "--dest", str(tmp_path / "dest"), "--repo-card", ""])
    assert "batching.max_tokens: recipe 24000, run 12000" in capsys.readouterr().err
    assert not (tmp_path / "dest").exists()


def test_config_differences_are_what_changes_the_run(tmp_path):
    """Resuming (train.py's warning) and exporting (the recipe check) compare configs on what the run computes: how
    a launch logs, saves, stops (a step schedule) or where it loads its start from is no difference."""
    import copy

    from training.train import config_differences, load_config

    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data": {"corpora": ["x"]}, "training": {"max_steps": 10}}))
    cfg = load_config(tmp_path / "c.yaml")
    later = load_config(tmp_path / "c.yaml", ["training.save_every=25", "training.max_minutes=34", "data.num_proc=8",
                                              "training.init_from=elsewhere", "training.log_every=1"])
    assert config_differences(cfg, later) == []
    later["training"]["learning_rate"] = 1e-4
    del later["batching"]["corpus_weights"]  # a config written before a key existed: its default
    assert config_differences(cfg, later) == [("training.learning_rate", cfg["training"]["learning_rate"], 1e-4)]
    # where the schedule counts minutes, max_minutes is what the run computes
    by_minutes = copy.deepcopy(cfg)
    by_minutes["training"].update(lr_schedule_over="minutes", max_minutes=30)
    longer = copy.deepcopy(by_minutes)
    longer["training"]["max_minutes"] = 60
    assert config_differences(by_minutes, longer) == [("training.max_minutes", 30, 60)]


def test_learn_bpe_reads_the_config_as_train_does(tmp_path, tatoeba_folder, capsys):
    """learn_bpe.py --config reads `base` configs and train.py's --set overrides: a BPE learned without one of the
    corpora (the lever "a BPE learned with the Tatoeba text included") has none of its characters."""
    from training.learn_bpe import main as learn_bpe_main

    src, *_ = tatoeba_folder
    other = tmp_path / "other"
    other.mkdir()
    (other / "en.txt").write_text("".join(f"word {i}\n" for i in range(50)), encoding="utf-8")
    (other / "qq.txt").write_text("".join(f"ŋaŋ ŋoŋ {i}\n" for i in range(50)), encoding="utf-8")
    base = {"data": {"corpora": [str(src), str(other)], "target_languages": ["en"]},
            "tokenizer": {"bpe_merges": 40}, "training": {"max_steps": 1}}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "child.yaml").write_text("base: base.yaml\ntokenizer:\n  bpe_merges: 30\n")

    def learned(out: str, *args: str) -> tuple[list[str], int]:
        learn_bpe_main(["--config", str(tmp_path / "child.yaml"), *args, "--output-dir", str(tmp_path / out)])
        vocab = json.loads((tmp_path / out / "vocab.json").read_text(encoding="utf-8"))
        codes = (tmp_path / out / "bpe.fcodes").read_text(encoding="utf-8").splitlines()
        return list(vocab), len(codes)

    every, merges = learned("every")
    assert merges == 30  # the child's merges over its base's
    assert any("ŋ" in token for token in every)
    without, _ = learned("without", "--set", f"data.corpora=[{src}]")
    assert not any("ŋ" in token for token in without) and any("de" in token for token in without)
    with pytest.raises(SystemExit):
        learn_bpe_main(["--input", f"en:{other / 'en.txt'}", "--set", "seed=2", "--output-dir", str(tmp_path / "x")])
    assert "--set needs --config" in capsys.readouterr().err
