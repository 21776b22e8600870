"""#50 items 1-2: `training.objective: distillation` (training/distillation.py) on the synthetic cipher: a teacher
(the cipher run's exported encoder) embeds English once, a fresh student learns the reordered cipher (under Wolof's
code, read with its own vocabulary) against it; the teacher's targets are reused only by the same teacher on the same
sentences; the student is routed to by its language beside the teacher; a resumed run ends bit-identical."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from safetensors.torch import load_file
from test_training import cipher_run, cipher_setup, metrics, run_train  # noqa: F401 (fixtures)


def distillation_config(root, teacher, cache, steps=150, source="wo", target_weight=0.0, **training):
    cfg = {
        "seed": 5,
        "data": {"corpora": [str(root / "train")], "source_languages": [source], "target_languages": ["en"],
                 "max_length": 40, "cache_dir": str(root / "cache")},
        "tokenizer": {"bpe_merges": 200},
        "model": {"embed_dim": 32, "hidden_size": 32, "num_layers": 1},
        "batching": {"max_tokens": 400, "num_workers": 0},
        "training": {"objective": "distillation", "max_steps": steps, "learning_rate": 0.01, "log_every": 10,
                     "eval_every": 50, "save_every": 50, "keep_checkpoints": 10, "report_to": None, **training},
        "distillation": {"teacher": str(teacher), "cache_dir": str(cache), "target_weight": target_weight},
        "validation": {"path": str(root / "valid")},
    }
    path = root / f"distill-{steps}-{teacher.name}-{cache.name}-{source}-{target_weight}-{len(training)}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def wolof_cipher(root, into):
    """The cipher's `yy` side under a real language's code (`wo`: Wolof), so that routing by language applies."""
    for split in ("train", "valid"):
        (into / split).mkdir(parents=True)
        for lang, name in (("en", "en"), ("yy", "wo")):
            (into / split / f"{name}.txt").write_text((root / split / f"{lang}.txt").read_text())
    return into


@pytest.fixture(scope="module")
def wolof_students(cipher_setup, cipher_run, tmp_path_factory):  # noqa: F811
    """`(tmp, root, teacher, cache, log)`: a 150-step student of the cipher under Wolof's code (`tmp/student`), and a
    10-step one of the same teacher on the same cache (`tmp/student-2`, its log `log`)."""
    tmp = tmp_path_factory.mktemp("wolof")
    root = wolof_cipher(cipher_setup[0], tmp / "data")
    teacher = cipher_run[0] / "final"
    cache = tmp / "teacher-cache"
    log = run_train(distillation_config(root, teacher, cache), tmp / "student")
    again = run_train(distillation_config(root, teacher, cache, steps=10), tmp / "student-2")
    return tmp, root, teacher, cache, log, again


def test_student_learns_the_teachers_space_and_targets_are_tied_to_the_teacher(wolof_students, cipher_run):  # noqa: F811
    tmp_path, root, teacher, cache, log, again = wolof_students
    assert "teacher targets: en: computed" in log, log[-3000:]
    rows = metrics(tmp_path / "student")
    valid = [r["valid_error"] for r in rows if "valid_error" in r]
    # student(yy) against teacher(en) on the 200 held-out cipher lines: near chance untrained, aligned after training
    assert valid[0] > 80 and valid[-1] < 20, valid
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < 0.5 * losses[0], losses
    config = json.loads((tmp_path / "student" / "final" / "config.json").read_text())
    assert config["hidden_size"] == 32 and config.get("decoder_num_layers", 0) == 0

    # the student is a model directory like a LASER3 student, its language recorded: the teacher and the student
    # given together route each sentence by its language (as a model set does)
    assert config["language"] == "wol_Latn"
    from hf_laser import LaserEncoder  # noqa: PLC0415

    valid = {lang: (root / "valid" / f"{lang}.txt").read_text().splitlines()[:50] for lang in ("en", "wo")}
    routed = LaserEncoder.from_pretrained([teacher, tmp_path / "student" / "final"])
    student = LaserEncoder.from_pretrained(tmp_path / "student" / "final")
    teacher_alone = LaserEncoder.from_pretrained(teacher)
    assert np.array_equal(routed.encode(valid["wo"], lang="wol_Latn"), student.encode(valid["wo"], lang="wol_Latn"))
    assert np.array_equal(routed.encode(valid["en"], lang="en"), teacher_alone.encode(valid["en"], lang="en"))

    # the same teacher and sentences: the targets are reused, not computed again
    assert "teacher targets: en: reused" in again, again[-3000:]

    # another teacher (the cipher run's untrained encoder: other weights) with the same cache: computed again
    other = run_train(distillation_config(root, cipher_run[0] / "untrained", cache, steps=10), tmp_path / "student-3")
    assert "teacher targets: en: computed" in other and "reused" not in other, other[-3000:]


def test_resumed_distillation_ends_where_an_uninterrupted_run_ends(cipher_setup, cipher_run, tmp_path):  # noqa: F811
    """(With the teacher on both sides, `distillation.target_weight`, so that its term is run end to end too.)"""
    root, _ = cipher_setup
    teacher = cipher_run[0] / "final"
    cache = tmp_path / "cache"  # (the cipher's yy side, no language of its own)
    short = {"eval_every": 20, "save_every": 20, "target_weight": 0.5}
    run_train(distillation_config(root, teacher, cache, steps=40, source="yy", **short), tmp_path / "straight")
    run_train(distillation_config(root, teacher, cache, steps=20, source="yy", **short), tmp_path / "resumed")
    run_train(distillation_config(root, teacher, cache, steps=40, source="yy", **short), tmp_path / "resumed",
              "--resume")
    a = load_file(str(sorted((tmp_path / "straight" / "checkpoints").glob("step-*"))[-1] / "model.safetensors"))
    b = load_file(str(sorted((tmp_path / "resumed" / "checkpoints").glob("step-*"))[-1] / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    # the target term trains: the same 20 steps on the source side only end elsewhere
    run_train(distillation_config(root, teacher, cache, steps=20, source="yy", **{**short, "target_weight": 0.0}),
              tmp_path / "source-only")
    c, d = (load_file(str(tmp_path / run / "checkpoints" / "step-00000020" / "model.safetensors"))
            for run in ("source-only", "resumed"))
    assert c.keys() == d.keys() and any(not (c[k] == d[k]).all() for k in c)


def test_a_transformer_student_learns_the_teachers_space(cipher_setup, cipher_run, tmp_path):  # noqa: F811
    """Item 1's other student: LASER3's transformer encoder (`model.encoder_type: transformer`, its sentence the
    max-pool of its last layer, `model.embed_dim` the teacher's dimension); one of another size is refused before a
    teacher target is computed."""
    from hf_laser import LaserEncoder  # noqa: PLC0415

    root = wolof_cipher(cipher_setup[0], tmp_path / "data")
    teacher = cipher_run[0] / "final"
    path = distillation_config(root, teacher, tmp_path / "cache", steps=150, learning_rate=0.001)
    cfg = yaml.safe_load(path.read_text())
    cfg["model"] = {"encoder_type": "transformer", "embed_dim": 64, "ffn_dim": 128, "attention_heads": 4,
                    "num_layers": 2, "dropout": 0.1}
    path.write_text(yaml.safe_dump(cfg))
    run_train(path, tmp_path / "student")
    errors = [r["valid_error"] for r in metrics(tmp_path / "student") if "valid_error" in r]
    assert errors[0] > 80 and min(errors) < 40, errors
    student = LaserEncoder.from_pretrained(tmp_path / "student" / "final")
    assert student.model.config.encoder_type == "transformer" and student.model.config.language == "wol_Latn"
    lines = (root / "valid" / "wo.txt").read_text().splitlines()[:5]
    assert student.encode(lines, lang="wo").shape == (5, 64)

    cfg["model"]["embed_dim"] = 48
    path.write_text(yaml.safe_dump(cfg))
    proc, log = run_train(path, tmp_path / "wrong-size", wait=False)
    assert proc.wait(timeout=600) != 0
    text = log.read_text()
    assert "the student's embedding (model.embed_dim = 48) must have the teacher's dimension 64" in text, text[-2000:]
    assert "teacher targets" not in text


def test_the_teachers_vocabulary_and_weights_as_the_students_start(cipher_setup, cipher_run, tmp_path):  # noqa: F811
    """The config switch between the student's own vocabulary (learned on its language, above) and the teacher's:
    `tokenizer.path` = the teacher and `training.init_from` = the teacher. The student then reads with the teacher's
    vocabulary and starts as the teacher: its untrained weights the teacher's encoder, half-aligned from step 0 (the
    teacher's own error on this reordered cipher; a fresh student is near chance there), better after distillation."""
    root, _ = cipher_setup
    teacher = cipher_run[0] / "final"
    path = distillation_config(root, teacher, tmp_path / "cache", steps=40, source="yy", init_from=str(teacher),
                               eval_every=20, save_every=20)
    cfg = yaml.safe_load(path.read_text())
    cfg["tokenizer"] = {"path": str(teacher)}
    path.write_text(yaml.safe_dump(cfg))
    log = run_train(path, tmp_path / "student")
    assert "encoder initialised from" in log, log[-3000:]
    student = tmp_path / "student" / "final"
    for name in ("vocab.json", "bpe.fcodes"):
        assert (student / name).read_bytes() == (teacher / name).read_bytes()
    start = load_file(str(tmp_path / "student" / "untrained" / "model.safetensors"))
    theirs = load_file(str(teacher / "model.safetensors"))
    shared = [k for k in start if k in theirs]
    assert shared and all((start[k] == theirs[k]).all() for k in shared)
    valid = [r["valid_error"] for r in metrics(tmp_path / "student") if "valid_error" in r]
    assert valid[0] < 60 and valid[-1] < valid[0] / 2, valid


def test_the_target_side_is_measured_by_the_tokenizer_that_reads_it(tmp_path):
    """A student that never reads the target side (target_weight 0) must not have its pairs filtered by how its own
    vocabulary cuts the targets: a Latin-script student's BPE cuts Russian into letters, so every ru target looked
    longer than `max_length` and the pairs were skipped (a Basque student lost 70 % of its eu-ru pairs). With the
    teacher's tokenizer as `target_tokenizer` the targets are counted in the teacher's tokens."""
    from hf_laser.models import DEFAULT_MODEL
    from hf_laser.text.tokenization_laser import LaserTokenizer
    from training.data import BatchSchedule, prepare_training_data
    from training.learn_bpe import learn_bpe

    rng = np.random.default_rng(3)
    latin = "ka lo mi tu ne sa ri po".split()
    russian = "дом кот книга вода город день ночь друг".split()
    src = [" ".join(rng.choice(latin, size=10)) for _ in range(40)]
    ru = [" ".join(rng.choice(russian, size=10)) + "." for _ in range(40)]
    ru[0] = " ".join(["книга"] * 40)  # too long for the teacher as well: still skipped
    (tmp_path / "mp").mkdir()
    (tmp_path / "mp" / "eu.txt").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (tmp_path / "mp" / "ru.txt").write_text("".join(s + "\n" for s in ru), encoding="utf-8")
    student = learn_bpe({"eu": src}, tmp_path / "bpe", merges=40, log=lambda _: None)
    teacher = LaserTokenizer.from_pretrained(DEFAULT_MODEL)
    cfg = {"corpora": [str(tmp_path / "mp")], "source_languages": ["eu"], "target_languages": ["ru"],
           "max_length": 30, "max_length_ratio": 3.0, "cache_dir": str(tmp_path / "cache")}
    assert all(len(ids) > 30 for ids in student.encode_lines(ru, lang="ru"))  # (the student's view of the targets)

    with pytest.raises(ValueError, match="every sentence pair was skipped"):
        prepare_training_data(cfg, student, log=lambda _: None)
    data = prepare_training_data(cfg, student, log=lambda _: None, target_tokenizer=teacher)
    assert len(data) == 39 and data.stats["skipped"]["too_long"] == 1, data.stats
    kept = {tuple(data.tokens.get(s)) for s in data.src}
    assert kept == {tuple(ids) for ids in student.encode_lines(src[1:], lang="eu")}

    # nor are its batches cut by the length of targets it never reads: only the source side counts
    both = BatchSchedule(data, max_tokens=100, seed=1).epoch(0)
    source_only = BatchSchedule(data, max_tokens=100, seed=1, source_only=True).epoch(0)
    assert sorted(np.concatenate(source_only).tolist()) == list(range(len(data)))
    assert all(len(b) * data.src_lengths[b].max() <= 100 for b in source_only)
    assert max(len(b) * data.tgt_lengths[b].max() for b in source_only) > 100  # (the targets did not count)
    assert len(source_only) < len(both) / 2, (len(source_only), len(both))


def test_a_student_set_routes_a_language_to_the_student_only_where_flores_says_it_beats_the_teacher(
        wolof_students, cipher_setup, tmp_path):  # noqa: F811
    """training/student_set.py: the teacher alone, and each student through the set, measured as the runs validate;
    the language goes to the lowest error, beyond noise below the teacher's; float16 copies; a language without data
    stays."""
    from hf_laser import LaserEncoder  # noqa: PLC0415
    from training.student_set import choose, main  # noqa: PLC0415

    runs, root, teacher, _, _, _ = wolof_students
    out, tatoeba = tmp_path / "set", tmp_path / "tatoeba"
    tatoeba.mkdir()  # Tatoeba's layout: the Wolof cipher, and (any other language) the xx cipher under French
    for name, lang, source in (("wol", "wo", root), ("fra", "xx", cipher_setup[0])):
        (tatoeba / f"tatoeba.{name}-eng.{name}").write_text((source / "valid" / f"{lang}.txt").read_text())
        (tatoeba / f"tatoeba.{name}-eng.eng").write_text((source / "valid" / "en.txt").read_text())
    assert main(["--teacher", str(teacher), "--student", str(runs / "student"), "--student", str(runs / "student-2"),
                 "--out", str(out), "--half", "--tatoeba-dir", str(tatoeba), "--cache-dir", str(tmp_path / "cache")]) == 0
    report = json.loads((out / "selection.json").read_text())
    row = report["flores"]["wo"]
    # the student's figure is the one its run validated its exported encoder with (the same measure; the run
    # batches and pads its own way, so a nearest neighbour may differ)
    best_step = min((r for r in metrics(runs / "student") if "valid_error" in r), key=lambda r: r["valid_error"])
    assert abs(row["students"][str(runs / "student")] - best_step["valid_error_wo"]) <= 1.0, (row, best_step)
    # ten steps from a random start are far from the teacher's space; 150 steps are not
    assert row["students"][str(runs / "student-2")] > 50 > row["students"][str(runs / "student")], row
    # the teacher never saw Wolof's code with this text: the trained student beats it, the 10-step one does not
    assert row["students"][str(runs / "student")] < row["teacher"] < row["students"][str(runs / "student-2")], row
    assert report["chosen"]["wo"]["student"] == str(runs / "student"), report["chosen"]
    routed = LaserEncoder.from_pretrained(out)
    assert routed.route("wo") == "wol_Latn" and routed.route("fr") == "default"
    lines = (root / "valid" / "wo.txt").read_text().splitlines()[:20]
    # the set's copy is the student in float16 weights (computed in float32)
    full = LaserEncoder.from_pretrained(runs / "student" / "final").encode(lines, lang="wol_Latn")
    assert 0 < np.abs(full - routed.encode(lines, lang="wo")).max() < 1e-2
    assert np.array_equal(routed.encode(lines, lang="en"), LaserEncoder.from_pretrained(teacher).encode(lines, lang="en"))
    # Tatoeba, only reported: Wolof through the student, French through the teacher (the very figure of the teacher
    # alone), and the means over both
    t = report["tatoeba"]
    assert t["member"] == {"fra": "default", "wol": "wol_Latn"}
    assert t["set"]["fra"] == t["teacher"]["fra"] and t["set"]["wol"]["xx2en_error"] < t["teacher"]["wol"]["xx2en_error"]
    for side in ("teacher", "set"):
        assert t[side]["average"]["xx2en_error"] == pytest.approx((t[side]["wol"]["xx2en_error"]
                                                                   + t[side]["fra"]["xx2en_error"]) / 2, abs=0.01)
    card = (out / "README.md").read_text()
    assert "| wol | wol_Latn |" in card and "except the 1 below" in card and "`student`" in card

    # the choice: the lowest student, where its gain's bootstrap bound is above 0 (e below the teacher by noise)
    def bound(lower):
        return {"lower": lower, "confidence": 0.95}
    flores = {"a": {"teacher": 30.0, "students": {"r1": 20.0, "r2": 10.0}, "significance": {"r1": bound(8.0),
                                                                                            "r2": bound(17.0)}},
              "b": {"teacher": 10.0, "students": {"r1": 12.0}, "significance": {"r1": bound(-3.5)}},
              "c": {"teacher": 5.0, "students": {"r1": 5.0}, "significance": {"r1": bound(-1.0)}},
              "e": {"teacher": 40.0, "students": {"r1": 39.2}, "significance": {"r1": bound(-0.3)}}}
    chosen = choose({"r1": ["a", "b", "c", "d", "e"], "r2": ["a"]}, flores)
    assert [chosen[k]["student"] for k in "abcde"] == ["r2", None, None, None, None]
    assert "no FLORES-200 data" in chosen["d"]["why"] and "no gain beyond noise" in chosen["e"]["why"]
    assert report["flores"]["wo"]["significance"][str(runs / "student")]["lower"] > 0

    # a budget too small for any student: the set written again over this one is the teacher alone, and the
    # student's copy of the set it replaces is gone (a stale member would ship in the wheel unrouted)
    assert (out / "student").is_dir()
    assert main(["--teacher", str(teacher), "--student", str(runs / "student"), "--out", str(out), "--half",
                 "--max-megabytes", "0.01"]) == 0
    report = json.loads((out / "selection.json").read_text())
    assert report["chosen"]["wo"]["student"] is None and "left out for the 0.01 MB budget" in report["chosen"]["wo"]["why"]
    assert report["sizes"][str(runs / "student")] > 0.01e6 and not (out / "student").exists()
    assert LaserEncoder.from_pretrained(out).route("wo") == "default"


def test_a_size_budget_keeps_the_students_that_fit_with_the_lowest_flores_error(capsys):
    from training.student_set import choose, main  # noqa: PLC0415

    def row(teacher, **students):
        return {"teacher": teacher, "students": students,
                "significance": {run: {"lower": teacher - error - 1, "confidence": 0.95} for run, error in students.items()}}
    runs = {"multi": ["a", "b", "c"], "own-a": ["a"], "own-b": ["b"]}
    flores = {"a": row(40.0, multi=30.0, **{"own-a": 20.0}), "b": row(50.0, multi=35.0, **{"own-b": 33.0}),
              "c": row(30.0, multi=20.0)}
    sizes = {"multi": 24e6, "own-a": 10e6, "own-b": 10e6}
    def routes(budget, runs=runs, flores=flores, sizes=sizes):
        chosen = choose(runs, flores, sizes=sizes, budget=budget)
        return [chosen[lang]["student"] for lang in sorted(chosen)], chosen
    assert routes(None)[0] == ["own-a", "own-b", "multi"] == routes(44e6)[0]  # 44 MB: all fit
    # 35 MB: multi + own-a (a 20, b 35, c 20: 75 points) beats multi + own-b (83) and own-a + own-b (83)
    got, chosen = routes(35e6)
    assert got == ["own-a", "multi", "multi"]
    assert "own-b (FLORES 33.00 %) left out for the 35 MB budget (10.0 MB)" in chosen["b"]["why"]
    assert "left out" not in chosen["a"]["why"] + chosen["c"]["why"]
    # 25 MB: the two small ones (20 + 33 + the teacher's 30 on c = 83) beat multi alone (85)
    assert routes(25e6)[0] == ["own-a", "own-b", None]
    assert routes(15e6)[0] == ["own-a", None, None] and routes(5e6)[0] == [None, None, None]
    with pytest.raises(SystemExit):  # a negative budget is refused before anything is measured
        main(["--teacher", "t", "--student", "s", "--out", "o", "--max-megabytes", "-1"])
    assert "--max-megabytes must be 0 or more" in capsys.readouterr().err
    # two students of one language (Welsh's, English targets or not): leaving out the better one frees nothing while
    # the other takes its language, so under a budget for one student the better one stays
    two = {"a": row(30.0, x=11.3, y=12.0), "b": row(40.0, m=30.0)}
    assert routes(19.9e6, {"x": ["a"], "y": ["a"], "m": ["b"]}, two, {"x": 10e6, "y": 10e6, "m": 10e6})[0] == ["x", None]
