"""`hf-laser push`: a model directory, its model card with evaluation results, and the results files → the Hub.

The card (`README.md`) gets
- the results as Markdown tables ([`results_markdown`]) and the plots written by `python -m evaluation.run`,
- `model-index` metadata in the Hub's format, built with `huggingface_hub`'s `EvalResult` / `ModelCardData` and
  checked by parsing the final text back with `ModelCard` ([`validate_card`]).

Everything goes up in one commit (`create_repo(exist_ok=True)` + `create_commit`). `--dry-run` builds and validates
the card and lists what would be uploaded, without any network access. The token is whatever `huggingface_hub`
finds (`HF_TOKEN`, or `hf auth login`); it is never printed.

Command line (`hf_laser/commands/push.py`)::

    hf-laser push MODEL_DIR --repo-id user/laser-xx [--results RESULTS_DIR] [--private] [--dry-run]
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from ..defaults import MODEL_SET_FILE
from ..model_set import read_model_set, write_model_set
from .integration_files import write_integration_files

__all__ = [
    "TASKS",
    "results_markdown",
    "eval_results_from_results",
    "card_with_results",
    "validate_card",
    "collect_files",
    "with_remote_code",
    "push_to_hub",
]

# How each task of results.json is described in model-index (dataset ids are the Hub datasets the loaders use).
TASKS = {
    "tatoeba": {"task_type": "sentence-similarity", "task_name": "Tatoeba similarity search (xx↔en)",
                "dataset_type": "mteb/tatoeba-bitext-mining", "dataset_name": "Tatoeba v1 (LASER, 112 languages)",
                "split": "test", "config": "{lang}-eng",
                "metrics": {"xx2en_error": ("error", "xx→en error (%)"), "en2xx_error": ("error", "en→xx error (%)"),
                            "xx2en_error_margin": ("error", "xx→en error, margin (%)"),
                            "en2xx_error_margin": ("error", "en→xx error, margin (%)")}},
    "xnli": {"task_type": "text-classification", "task_name": "Natural language inference (zero-shot from English)",
             "dataset_type": "facebook/xnli", "dataset_name": "XNLI", "split": "test", "config": "{lang}",
             "metrics": {"accuracy": ("accuracy", "accuracy (%)")}},
    "mldoc": {"task_type": "text-classification", "task_name": "Document classification (zero-shot from English)",
              "dataset_type": "mldoc", "dataset_name": "MLDoc", "split": "test", "config": "{lang}",
              "metrics": {}},  # accuracy_1k, accuracy_2k, ... (see _metric_spec)
    "bucc": {"task_type": "translation", "task_name": "Bitext mining (BUCC 2018)", "dataset_type": "bucc2018",
             "dataset_name": "BUCC 2018", "split": "test", "config": "{lang}",
             "metrics": {"f1": ("f1", "F1 (%)"), "precision": ("precision", "precision (%)"),
                         "recall": ("recall", "recall (%)")}},
}

_SUMMARY_KEYS = ("average",)


def _metric_spec(task: str, key: str):
    spec = TASKS.get(task, {}).get("metrics", {})
    if key in spec:
        return spec[key]
    m = re.fullmatch(r"accuracy_(\w+)", key)
    if task == "mldoc" and m:
        return "accuracy", f"accuracy, {m.group(1)} English training documents (%)"
    return None


# ---------------------------------------------------------------------------------------------- markdown
def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return "" if v is None else str(v)


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def results_markdown(results: dict, plots: dict[str, str] | None = None, heading_level: int = 3) -> str:
    """Markdown for a `results.json` dict: one section per task (Tatoeba: a row per language; XNLI: a row with
    a column per language, as the paper's Table 2, plus the cross-lingual matrix when present; MLDoc: a row per
    training size; BUCC: a row per pair). `plots` maps a task to an image path shown under its table."""
    plots = plots or {}
    h = "#" * heading_level
    out = []
    tat = results.get("tatoeba")
    if tat:
        langs = sorted(k for k in tat if k not in _SUMMARY_KEYS)
        extra = [k for k in ("xx2en_error_margin", "en2xx_error_margin", "xx2en_error_text", "en2xx_error_text")
                 if any(k in tat[lang] for lang in langs)]
        names = {"xx2en_error_margin": "xx→en, margin (%)", "en2xx_error_margin": "en→xx, margin (%)",
                 "xx2en_error_text": "xx→en, textual (%)", "en2xx_error_text": "en→xx, textual (%)"}
        header = ["language", "xx→en error (%)", "en→xx error (%)"] + [names[k] for k in extra] + ["n"]
        rows = []
        if "average" in tat:
            a = tat["average"]
            rows.append([f"**average ({a.get('languages', len(langs))})**", a.get("xx2en_error"),
                         a.get("en2xx_error")] + [a.get(k) for k in extra] + [a.get("n")])
        rows += [[lang, tat[lang].get("xx2en_error"), tat[lang].get("en2xx_error")]
                 + [tat[lang].get(k) for k in extra] + [tat[lang].get("n")] for lang in langs]
        out.append(f"{h} Tatoeba similarity search\n\nError rate of cosine nearest-neighbour retrieval (lower is "
                   f"better), LASER's Tatoeba v1 test set.\n\n" + _table(header, rows))
        if "tatoeba" in plots:
            out.append(f"![Tatoeba error per language]({plots['tatoeba']})")
    xnli = results.get("xnli")
    if xnli:
        langs = [k for k in xnli if k not in _SUMMARY_KEYS]
        header = ["", *langs] + (["avg"] if "average" in xnli else [])
        row = ["accuracy (%)", *[xnli[lang].get("accuracy") for lang in langs]]
        if "average" in xnli:
            row.append(xnli["average"].get("accuracy"))
        text = (f"{h} XNLI\n\nTest accuracy of a classifier trained on English MultiNLI only (model selection on "
                f"the English dev set), applied to every language.\n\n" + _table(header, [row]))
        if "en" in xnli and "dev_accuracy" in xnli["en"]:
            text += f"\n\nEnglish dev accuracy of the selected classifier: {xnli['en']['dev_accuracy']:.2f}%."
        out.append(text)
        if "xnli" in plots:
            out.append(f"![XNLI accuracy per language]({plots['xnli']})")
    cross = results.get("xnli_cross_lingual")
    if cross:
        hyp = list(next(iter(cross.values())).keys())
        rows = [[f"**{p}**", *[cross[p].get(x) for x in hyp]] for p in cross]
        out.append(f"{h} XNLI, premise language × hypothesis language\n\n"
                   + _table(["premise \\ hypothesis", *hyp], rows))
    mld = results.get("mldoc")
    if mld:
        langs = [k for k in mld if k not in _SUMMARY_KEYS]
        sizes = sorted({k for lang in langs for k in mld[lang] if k.startswith("accuracy_")},
                       key=lambda k: float(re.sub(r"\D", "", k) or 0))
        rows = [[k[len("accuracy_"):], *[mld[lang].get(k) for lang in langs]]
                + ([mld["average"].get(k)] if "average" in mld else []) for k in sizes]
        header = ["English training docs", *langs] + (["avg"] if "average" in mld else [])
        out.append(f"{h} MLDoc\n\nTest accuracy of a document classifier trained on English only.\n\n"
                   + _table(header, rows))
        if "mldoc" in plots:
            out.append(f"![MLDoc accuracy per language]({plots['mldoc']})")
    bucc = results.get("bucc")
    if bucc:
        rows = [[pair, v.get("precision"), v.get("recall"), v.get("f1"),
                 f"{v['threshold']:.4f}" if isinstance(v.get("threshold"), float) else v.get("threshold")]
                for pair, v in bucc.items()]
        out.append(f"{h} BUCC bitext mining\n\n" + _table(["pair", "precision (%)", "recall (%)", "F1 (%)",
                                                            "threshold"], rows))
    return "\n\n".join(out)


# ---------------------------------------------------------------------------------------------- model-index
def eval_results_from_results(results: dict, *, include_languages: bool = True) -> list:
    """`huggingface_hub.EvalResult`s for a `results.json` dict: the averages (dataset config `average`) and, with
    `include_languages`, every language."""
    # lazy: the Hub client, needed for Hub calls only
    from huggingface_hub import EvalResult

    out = []
    for task, per_lang in results.items():
        spec = TASKS.get(task)
        if spec is None or not isinstance(per_lang, dict):
            continue
        for lang, metrics in per_lang.items():
            if not isinstance(metrics, dict) or (lang not in _SUMMARY_KEYS and not include_languages):
                continue
            config = "average" if lang in _SUMMARY_KEYS else spec["config"].format(lang=lang)
            for key, value in metrics.items():
                ms = _metric_spec(task, key)
                if ms is None or not isinstance(value, (int, float)):
                    continue
                metric_type, metric_name = ms
                out.append(EvalResult(task_type=spec["task_type"], task_name=spec["task_name"],
                                      dataset_type=spec["dataset_type"], dataset_name=spec["dataset_name"],
                                      dataset_config=config, dataset_split=spec["split"], metric_type=metric_type,
                                      metric_name=metric_name, metric_value=float(value)))
    return out


def _replace_section(text: str, heading: str, body: str) -> str:
    """Replaces the body of the `## heading` section (up to the next `## `), or appends the section."""
    pattern = re.compile(rf"(^## {re.escape(heading)}[ \t]*\n)(.*?)(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        return pattern.sub(lambda m: m.group(1) + "\n" + body.strip() + "\n\n", text, count=1)
    return text.rstrip() + f"\n\n## {heading}\n\n{body.strip()}\n"


def card_with_results(model_dir: str | Path, results: dict | None, *, repo_id: str | None = None,
                      plots: dict[str, str] | None = None, model_name: str | None = None,
                      include_languages: bool = True) -> str:
    """The card text for `model_dir`: its `README.md` (or the package template) with the Evaluation section holding
    [`results_markdown`] and the metadata holding `model-index`; `PATH_OR_REPO_ID` placeholders become `repo_id`."""
    # lazy: the Hub client, needed for Hub calls only
    from huggingface_hub import ModelCard, ModelCardData

    model_dir = Path(model_dir)
    readme = model_dir / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8")
    elif (model_dir / MODEL_SET_FILE).is_file():
        default, students = read_model_set(model_dir)
        name = model_name or (repo_id or model_dir.name)
        text = (f"---\nlibrary_name: hf_laser\ntags: [laser, sentence-embeddings, hf-laser]\n---\n\n# {name}\n\n"
                f"An hf_laser model set: each sentence is embedded by the model of its language ("
                f"{len(students)} languages routed to students; the others to "
                f"`{default.name if default is not None else 'none'}`).\n\n```python\nfrom hf_laser import "
                f"LaserEncoder\n\nencoder = LaserEncoder.from_pretrained(\"{name}\")\n```\n")
    else:
        # lazy: modeling.configuration_laser imports transformers
        from ..modeling.configuration_laser import LaserConfig

        # lazy: checkpoints.model_card imports transformers
        from .model_card import render_model_card

        config = LaserConfig.from_pretrained(model_dir)
        text = render_model_card(config, model_name=model_name or model_dir.name, repo_id=repo_id or model_dir.name)
    if repo_id:
        text = text.replace("PATH_OR_REPO_ID", repo_id)
    card = ModelCard(text)
    name = model_name or (repo_id.split("/")[-1] if repo_id else model_dir.name)
    if results:
        body = results_markdown(results, plots)
        body += ("\n\nReproduce: `python -m evaluation.run --model MODEL --tasks "
                 + ",".join(t for t in results if t in TASKS) + " --out RESULTS_DIR` (hf_laser).")
        card.text = _replace_section(card.text, "Evaluation", body)
        evals = eval_results_from_results(results, include_languages=include_languages)
        if evals:
            data = card.data.to_dict()
            data.pop("model-index", None)
            data.pop("model_name", None)
            data.pop("eval_results", None)
            card.data = ModelCardData(**data, model_name=name, eval_results=evals)
    content = str(card)
    expected = len(eval_results_from_results(results, include_languages=include_languages)) if results else None
    validate_card(content, expected_results=expected)
    return content


def validate_card(content: str, expected_results: int | None = None) -> dict:
    """Parses a card back with `huggingface_hub` (`ModelCard`, `metadata_load`) and checks its `model-index`.

    Returns the metadata dict; raises ValueError when the YAML does not parse or `model-index` does not round-trip
    to `expected_results` evaluation results."""
    # lazy: the Hub client, needed for Hub calls only
    from huggingface_hub import ModelCard, metadata_load
    from huggingface_hub.repocard_data import model_index_to_eval_results

    card = ModelCard(content)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "README.md"
        path.write_text(content, encoding="utf-8")
        meta = metadata_load(path)
    if meta is None:
        raise ValueError("the model card has no YAML metadata block")
    if card.data.to_dict().get("library_name") != meta.get("library_name"):
        raise ValueError("ModelCard and metadata_load disagree on the card metadata")
    if "model-index" in meta:
        name, evals = model_index_to_eval_results(meta["model-index"])
        if not name:
            raise ValueError("model-index has no model name")
        if expected_results is not None and len(evals) != expected_results:
            raise ValueError(f"model-index round-trips to {len(evals)} results, expected {expected_results}")
    elif expected_results:
        raise ValueError("the model card has no model-index")
    return meta


# ---------------------------------------------------------------------------------------------- upload
_SKIP_DIRS = {".git", "__pycache__", ".cache", ".ipynb_checkpoints"}


def collect_files(model_dir: str | Path, results_dir: str | Path | None = None) -> list[tuple[str, Path]]:
    """`(path_in_repo, local_path)` of the model directory or model set (without its README.md, which is
    regenerated) and, under `results/`, the results files (`results.json`, `results.md`, `results_info.json`,
    `*.png`)."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file() and not (model_dir / MODEL_SET_FILE).is_file():
        raise FileNotFoundError(f"{model_dir} is not a model directory (no config.json) nor a model set (no "
                                f"{MODEL_SET_FILE})")
    files = []
    for path in sorted(model_dir.rglob("*")):
        rel = path.relative_to(model_dir)
        if not path.is_file() or any(part in _SKIP_DIRS or part.startswith(".") for part in rel.parts):
            continue
        if rel.as_posix() == "README.md" or path.name.endswith(".progress.json"):
            continue
        files.append((rel.as_posix(), path))
    if results_dir is not None:
        results_dir = Path(results_dir)
        if not (results_dir / "results.json").is_file():
            raise FileNotFoundError(f"{results_dir / 'results.json'} not found (run python -m evaluation.run first)")
        for path in sorted(results_dir.iterdir()):
            if path.is_file() and (path.name in ("results.json", "results.md", "results_info.json")
                                   or path.suffix == ".png"):
                files.append((f"results/{path.name}", path))
    return files


# files rewritten by `write_integration_files` (copied into the staging directory; the others are linked)
_REWRITTEN = {"config.json", "tokenizer_config.json", "modules.json", "config_sentence_transformers.json"}


def with_remote_code(model_dir: str | Path, staging: str | Path) -> Path:
    """`model_dir` as the Hub gets it: for a LASER directory, a copy in `staging` (large files linked, not copied)
    completed by `hf_laser.checkpoints.integration_files.write_integration_files` (code files from the package's sources,
    `auto_map`, `custom_pipelines`, sentence-transformers files); any other directory as it is."""

    model_dir, staging = Path(model_dir), Path(staging)
    if (model_dir / MODEL_SET_FILE).is_file():
        return _stage_model_set(model_dir, staging)
    config = model_dir / "config.json"
    try:
        laser = json.loads(config.read_text(encoding="utf-8")).get("model_type") == "laser"
    except (OSError, ValueError, AttributeError):
        laser = False
    if not laser:
        return model_dir
    for rel, path in collect_files(model_dir):
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in _REWRITTEN or path.suffix == ".py":
            shutil.copyfile(path, target)
        else:
            target.symlink_to(path.resolve())
    write_integration_files(staging)
    return staging


def _stage_model_set(set_dir: Path, staging: Path) -> Path:
    """A model set as one repository: every member inside it (a member outside the set's directory, such as the
    shipped laser-mini-set's `../laser-mini`, is copied in under its directory's name), each completed as
    [`with_remote_code`] completes a directory, the set file naming them by their places in the repository, and
    the set's other files (its README.md is the card)."""
    default, students = read_model_set(set_dir)
    names: dict[Path, str] = {}

    def place(member: Path) -> str:
        real = member.resolve()
        if real not in names:
            try:
                name = real.relative_to(set_dir.resolve()).as_posix()
            except ValueError:  # outside the set's directory
                name = member.name
            while name in names.values() or (set_dir / name).exists() and (set_dir / name).resolve() != real:
                name += "-member"
            names[real] = name
            target = staging / name
            target.mkdir(parents=True)
            staged = with_remote_code(member, target)
            if staged != target:  # not a LASER directory (SONAR's carries its code): its files as they are
                for rel, path in collect_files(member):
                    (target / rel).parent.mkdir(parents=True, exist_ok=True)
                    (target / rel).symlink_to(path.resolve())
        return names[real]

    default_name = None if default is None else place(default)
    student_names = {code: place(path) for code, path in students.items()}
    member_dirs = {real for real in names}
    for path in sorted(set_dir.iterdir()):
        if path.is_file() and path.name not in (MODEL_SET_FILE,) and not path.name.startswith("."):
            (staging / path.name).symlink_to(path.resolve())
        elif path.is_dir() and path.resolve() not in member_dirs and path.name not in _SKIP_DIRS:
            raise ValueError(f"{set_dir}: {path.name}/ is no member of the set; a set is pushed with its members only")
    write_model_set(staging, default=None if default_name is None else staging / default_name,
                    students={code: staging / name for code, name in student_names.items()})
    return staging


def push_to_hub(model_dir: str | Path, repo_id: str, *, results_dir: str | Path | None = None,
                private: bool = False, revision: str | None = None, commit_message: str | None = None,
                dry_run: bool = False, include_languages: bool = True, api=None, log=print) -> dict:
    """Uploads model files + card (+ results) to `repo_id` in one commit. A LASER directory goes up with its
    remote code written from the package's sources ([`with_remote_code`]), whether or not it holds a copy (the
    shipped laser-mini holds none).

    Returns `{"repo_id", "files": [(path_in_repo, bytes)], "card": str, "commit": url or None}`.
    """
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", repo_id or ""):
        raise ValueError(f"invalid repo id {repo_id!r} (expected 'user/name')")
    with tempfile.TemporaryDirectory(prefix="hf_laser_push_") as staging:
        files = collect_files(with_remote_code(model_dir, staging), results_dir)
        return _push(model_dir, repo_id, files, results_dir=results_dir, private=private, revision=revision,
                     commit_message=commit_message, dry_run=dry_run, include_languages=include_languages, api=api,
                     log=log)


def _push(model_dir, repo_id, files, *, results_dir, private, revision, commit_message, dry_run, include_languages,
          api, log) -> dict:
    results, plots = None, {}
    if results_dir is not None:
        results = json.loads((Path(results_dir) / "results.json").read_text(encoding="utf-8"))
        for task in ("tatoeba", "xnli", "mldoc"):
            if (Path(results_dir) / f"{task}.png").is_file():
                plots[task] = f"results/{task}.png"
    card = card_with_results(model_dir, results, repo_id=repo_id, plots=plots, include_languages=include_languages)
    card_bytes = card.encode("utf-8")
    listing = [(p, src.stat().st_size) for p, src in files] + [("README.md", len(card_bytes))]
    summary = {"repo_id": repo_id, "files": listing, "card": card, "commit": None}
    if dry_run:
        log(f"dry run: would upload {len(listing)} files ({sum(s for _, s in listing) / 1e6:.1f} MB) to "
            f"https://huggingface.co/{repo_id}" + (f" (revision {revision})" if revision else "") + " in one commit:")
        for path, size in listing:
            log(f"  {path}  ({size:,} bytes)")
        return summary
    # lazy: the Hub client, needed for Hub calls only
    from huggingface_hub import CommitOperationAdd, HfApi, get_token

    if api is None:
        if get_token() is None:
            raise RuntimeError("no Hugging Face token found: run `hf auth login` or set HF_TOKEN")
        api = HfApi()
    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(src)) for p, src in files]
    ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card_bytes))
    api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    if revision:
        api.create_branch(repo_id=repo_id, branch=revision, exist_ok=True)
    info = api.create_commit(repo_id=repo_id, operations=ops, revision=revision,
                             commit_message=commit_message or "Upload LASER model with hf_laser")
    summary["commit"] = getattr(info, "commit_url", None) or str(info)
    log(f"uploaded {len(ops)} files to https://huggingface.co/{repo_id}: {summary['commit']}")
    return summary
