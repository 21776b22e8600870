"""#50 item 4: the shipped model set `laser-mini-set` (src/hf_laser/models/laser-mini-set, written by
training/student_set.py): laser-mini for every language, the distilled student for the languages its selection
routed to it on FLORES-200; loadable by name; each language's embeddings are those of the model its card names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hf_laser
from conftest import SHARED, require_shared
from hf_laser import LaserEncoder
from hf_laser.model_set import read_model_set
from hf_laser.models import LASER_MINI_SET

FLORES = SHARED / "data" / "parallel" / "valid" / "flores200-devtest"


@pytest.fixture(scope="module")
def selection() -> dict:
    return json.loads((Path(LASER_MINI_SET) / "selection.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def shipped_set():
    return LaserEncoder.from_pretrained("laser-mini-set")


def student_languages(selection) -> list[str]:
    return sorted(lang for lang, row in selection["chosen"].items() if row["student"])


def test_the_set_is_laser_mini_and_the_students_its_selection_chose(selection, shipped_set):
    from training.student_set import choose, student_key

    default, students = read_model_set(LASER_MINI_SET)
    assert default.resolve() == Path(hf_laser.DEFAULT_MODEL).resolve()
    chosen = student_languages(selection)
    assert chosen and sorted(students) == sorted(student_key(lang) for lang in chosen)
    for lang, row in selection["chosen"].items():
        assert shipped_set.route(lang) == (student_key(lang) if row["student"] else "default"), lang
    # routed on FLORES by student_set.choose's rule (the lowest error whose gain's bootstrap bound is above 0,
    # within the set's size budget): replayed on the recorded measurements, it gives the shipped routes
    runs = {}
    for lang, row in selection["flores"].items():
        for run in row["students"]:
            runs.setdefault(run, []).append(lang)
    budget = selection.get("max_megabytes")
    replay = choose(runs, selection["flores"], sizes=selection.get("sizes"), budget=budget and budget * 1e6)
    for lang, flores in selection["flores"].items():
        student = selection["chosen"][lang]["student"]
        assert replay[lang]["student"] == student, (lang, replay[lang], selection["chosen"][lang])
        if student:
            assert flores["students"][student] < flores["teacher"] and flores["significance"][student]["lower"] > 0
    if budget:
        assert sum(selection["sizes"][run] for run in {row["student"] for row in replay.values()} - {None}) <= budget * 1e6
    # the card names every routed language, and the set holds weights and tokenizer files, no code
    card = (Path(LASER_MINI_SET) / "README.md").read_text(encoding="utf-8")
    assert all(f"| {lang} | {student_key(lang)} |" in card for lang in chosen)
    assert not list(Path(LASER_MINI_SET).rglob("*.py"))
    # no directory but the members' (a stale student would ship in the wheel, routed from nowhere)
    assert {p.resolve() for p in Path(LASER_MINI_SET).iterdir() if p.is_dir()} == {p.resolve() for p in students.values()}


def test_each_language_is_embedded_by_the_model_the_card_names(selection, shipped_set):
    lines = ["Hello world.", "The weather is nice today."]
    mini = LaserEncoder.from_pretrained(hf_laser.DEFAULT_MODEL)
    assert np.array_equal(shipped_set.encode(lines, lang="en"), mini.encode(lines, lang="en"))
    _, students = read_model_set(LASER_MINI_SET)
    lang = student_languages(selection)[0]
    from training.student_set import student_key

    student = LaserEncoder.from_pretrained(students[student_key(lang)])
    assert np.array_equal(shipped_set.encode(lines, lang=lang), student.encode(lines, lang=student_key(lang)))
    assert not np.allclose(shipped_set.encode(lines, lang=lang), mini.encode(lines, lang=lang))


def test_a_routed_language_finds_its_translations_better_than_laser_mini(selection, shipped_set):
    """On FLORES-200 devtest (what the routing was chosen on): the student's language against laser-mini's English
    beats laser-mini alone, for the language the set gains most on."""
    require_shared(FLORES)
    from training.report import model_flores_errors

    lang = max(student_languages(selection), key=lambda k: selection["flores"][k]["teacher"]
               - min(selection["flores"][k]["students"].values()))
    through_set = model_flores_errors(shipped_set, FLORES, [lang, "en"], ["en"], max_sentences=300)[lang]
    alone = model_flores_errors(LaserEncoder.from_pretrained(hf_laser.DEFAULT_MODEL), FLORES, [lang, "en"], ["en"],
                                max_sentences=300)[lang]
    assert through_set < alone - 2, (lang, through_set, alone)


def test_the_readme_and_the_docs_give_the_sizes_the_set_has():
    """README and docs/laser-mini.md state the set's size beside laser-mini's: they must follow a re-shipped set."""
    import re

    def megabytes(folder: Path) -> int:
        return round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6)

    students, mini = megabytes(Path(LASER_MINI_SET)), megabytes(Path(hf_laser.DEFAULT_MODEL))
    repo = Path(__file__).resolve().parents[1]
    readme = (repo / "README.md").read_text(encoding="utf-8")
    stated = re.search(r"(\d+) MB more, (\d+) MB in all\)", readme)
    assert stated and (int(stated[1]), int(stated[2])) == (students, students + mini), (stated, students, mini)
    page = (repo / "docs" / "laser-mini.md").read_text(encoding="utf-8")
    stated = re.search(r"LASER_MINI_SET`, (\d+) MB beside laser-mini's\s+(\d+) MB\)", page)
    assert stated and (int(stated[1]), int(stated[2])) == (students, mini), (stated, students, mini)
