"""Writes a trained encoder as the package's shipped default model (`src/hf_laser/models/laser-mini`).

    python training/report.py --run runs/laser-mini --tatoeba-langs all --bucc-dir ../shared/data/mining --curve --plot
    python training/export_default_model.py --run runs/laser-mini

The weights of `OUT/final` are stored in float16 (half the bytes; `config.json` keeps `dtype: float32`, so
`from_pretrained` loads them as float32), next to the tokenizer files and a model card (`README.md`, also copied to
the repository's `model_card.md`) built from `OUT/report.json`; no code files (`hf_laser.checkpoints.integration_files.
remove_remote_code`: `save_pretrained` / `hf-laser push` write them from the package's sources). The cost of the
float16 storage is measured on the spot: the largest embedding difference against the float32 weights and the
Tatoeba errors of the `FOCUS` languages with both, written into the card, and so is the Tatoeba error on pairs whose
every word the training data has against the others (`training/coverage.py`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make `training`, `evaluation` (and `hf_laser`) importable
    sys.path.insert(0, str(REPO))
    sys.path.append(str(REPO / "src"))

import torch  # noqa: E402
import yaml  # noqa: E402

from training.report import FOCUS, USELESS_ERROR, base_language, tatoeba_errors  # noqa: E402

DEST = REPO / "src" / "hf_laser" / "models" / "laser-mini"
TATOEBA = REPO.parent / "shared" / "data" / "tatoeba" / "v1"


def save_half(run: Path, dest: Path) -> None:
    """Weights (float16), config, tokenizer files; no code: the package registers `laser`, and a directory for the
    Hub (`save_pretrained`, `hf-laser push`) gets its code from the package's sources."""
    from hf_laser import LaserModel, LaserTokenizer
    from hf_laser.checkpoints.integration_files import remove_remote_code

    model = LaserModel.from_pretrained(run / "final", dtype=torch.float32)
    model.half().save_pretrained(dest)
    config = json.loads((dest / "config.json").read_text())
    config["dtype"] = "float32"  # stored in float16, computed in float32
    (dest / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    LaserTokenizer.from_pretrained(run / "final").save_pretrained(dest)
    remove_remote_code(dest)


def storage_cost(run: Path, dest: Path) -> dict | None:
    """Largest |difference| of the embeddings (FOCUS Tatoeba sentences) and FOCUS Tatoeba means, fp32 vs fp16; None
    when the run's `final/` weights are float16 already (a GPU session's export: its float32 weights stayed there),
    where there is nothing to compare with."""
    from safetensors import safe_open

    with safe_open(str(run / "final" / "model.safetensors"), "pt") as weights:
        if any(weights.get_slice(k).get_dtype() != "F32" for k in weights.keys()):
            return None
    from evaluation.tatoeba import read_lines, tatoeba_paths
    from hf_laser import LaserEncoder

    full, half = LaserEncoder.from_pretrained(run / "final"), LaserEncoder.from_pretrained(dest)
    diff = 0.0
    for lang in FOCUS:
        src, _ = tatoeba_paths(TATOEBA, lang)
        lines = list(read_lines(src))[:200]
        code = __import__("evaluation.tatoeba", fromlist=["TATOEBA_LANGS"]).TATOEBA_LANGS[lang]
        diff = max(diff, float(abs(full.encode(lines, lang=code) - half.encode(lines, lang=code)).max()))
    means = {}
    for name, path in (("float32", run / "final"), ("float16", dest)):
        errors = tatoeba_errors(path, FOCUS, TATOEBA, None)
        means[name] = round(sum(errors[lang][k] for lang in FOCUS for k in ("xx2en_error", "en2xx_error"))
                            / (2 * len(FOCUS)), 2)
    return {"max_abs_embedding_diff": diff, "focus_tatoeba_mean": means}


def useless_diagnosis(tatoeba: dict, stats: dict, model_dir: Path, tatoeba_dir: Path = TATOEBA) -> list[dict]:
    """Why the encoder fails a language: one row per useless Tatoeba language (`tatoeba["useless"]`) with its
    training pairs (`data_stats.json`, every corpus code of the language), the script of its Tatoeba sentences, and
    what the model's tokenizer makes of them: the share of unknown tokens (characters the vocabulary lacks) and BPE
    tokens per whitespace word (several times English's: the words are split into pieces it rarely saw, or the script
    writes no spaces). Rows sorted by training pairs, most first."""
    from evaluation.tatoeba import TATOEBA_LANGS, read_lines, tatoeba_paths
    from evaluation.xsim import dominant_script
    from hf_laser import LaserTokenizer

    tokenizer = LaserTokenizer.from_pretrained(model_dir)

    def token_stats(lines: list[str], code: str) -> dict:
        ids = [[i for i in seq if i != tokenizer.eos_token_id] for seq in tokenizer(lines, lang=code)["input_ids"]]
        n_tokens = sum(map(len, ids))
        return {"unknown_tokens": round(100 * sum(seq.count(tokenizer.unk_token_id) for seq in ids)
                                        / max(n_tokens, 1), 1),
                "tokens_per_word": round(n_tokens / max(sum(len(line.split()) for line in lines), 1), 2)}

    pairs: dict[str, int] = {}
    for direction, n in stats["pairs_per_direction"].items():
        code = base_language(direction.split("-")[0])
        pairs[code] = pairs.get(code, 0) + n
    rows = []
    for lang in tatoeba.get("useless", []):
        code = TATOEBA_LANGS.get(lang, lang)
        lines = [line for line in read_lines(tatoeba_paths(tatoeba_dir, lang)[0]) if line.strip()]
        rows.append({"lang": lang, "code": code, "pairs": pairs.get(code, 0), "script": dominant_script(lines),
                     **token_stats(lines, code), "xx2en_error": tatoeba["trained"][lang]["xx2en_error"]})
    rows.sort(key=lambda row: (-row["pairs"], row["lang"]))
    if rows:  # English sides of the same files, for scale (punctuation counts as tokens, not as words)
        english = [line for r in rows for line in read_lines(tatoeba_paths(tatoeba_dir, r["lang"])[1]) if line.strip()]
        rows.append({"lang": "eng (their English sides)", "code": "en", "pairs": pairs.get("en", 0),
                     "script": "Latin", "reference": True, **token_stats(english, "en"), "xx2en_error": None})
    return rows


def diagnosis_markdown(rows: list[dict]) -> str:
    """The table of [`useless_diagnosis`] and a count of the likely causes."""
    if not rows:
        return ""
    lines = ["| language | training pairs | script | unknown tokens | BPE tokens per word | xx→en error |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['lang']} | {'' if r.get('reference') else format(r['pairs'], ',')} | {r['script']} | "
              f"{r['unknown_tokens']:.1f} % | {r['tokens_per_word']:.2f} | "
              f"{'' if r['xx2en_error'] is None else format(r['xx2en_error'], '.1f')} |" for r in rows]
    english = next((r["tokens_per_word"] for r in rows if r.get("reference")), None)
    rows = [r for r in rows if not r.get("reference")]
    split = (lambda r: english is not None and r["tokens_per_word"] >= 2 * english)  # noqa: E731
    no_data = [r["lang"] for r in rows if r["pairs"] == 0]
    few = [r["lang"] for r in rows if 0 < r["pairs"] < 5000]
    enough = [r for r in rows if r["pairs"] >= 5000]
    unknown = [r["lang"] for r in enough if r["unknown_tokens"] >= 5]
    pieces = [r["lang"] for r in enough if r["unknown_tokens"] < 5 and split(r)]
    rest = [r["lang"] for r in enough if r["unknown_tokens"] < 5 and not split(r)]
    causes = [f"no training pair: {len(no_data)} ({', '.join(no_data)})" if no_data else "",
              f"fewer than 5,000 pairs: {len(few)} ({', '.join(few)})" if few else "",
              f"5,000 pairs or more but ≥ 5 % unknown tokens (a script the joint BPE hardly covers): {len(unknown)} "
              f"({', '.join(unknown)})" if unknown else "",
              f"5,000 pairs or more, but words cut into at least twice as many BPE pieces as English's (the joint "
              f"BPE gave the language few merges): {len(pieces)} ({', '.join(pieces)})" if pieces else "",
              f"5,000 pairs or more and a vocabulary that covers them (not explained by data or tokenizer): "
              f"{len(rest)} ({', '.join(rest)})" if rest else ""]
    return "\n".join(lines) + "\n\nLikely causes: " + "; ".join(c for c in causes if c) + ".\n"


def coverage_split(run: Path, dest: Path) -> dict:
    """Mean FOCUS Tatoeba xx→en error (%) of the exported model on pairs whose every word occurs ≥ 3× in the run's
    training text (`covered`) and on the others reweighted to the covered lengths (`rest`): `training/coverage.py`."""
    from training.coverage import mean_row, measure

    result = measure(raw_config(yaml.safe_load((run / "config.yaml").read_text())), str(dest), FOCUS, TATOEBA,
                     min_count=3)
    mean = mean_row(result)
    return {"covered_share": mean["covered"], "covered": mean["xx2en_error_covered"],
            "rest": mean["xx2en_error_rest_length_matched"]}


def source_folders(path: str) -> list[Path]:
    """The folders a corpus's text comes from: itself, or for a pretokenized copy (training/pretokenize.py) the
    folders its manifest names as its files' sources."""
    from training.data import PRETOKENIZED_MANIFEST

    manifest = REPO / path / PRETOKENIZED_MANIFEST
    if not manifest.is_file():
        return [REPO / path]
    files = json.loads(manifest.read_text())["files"].values()
    return sorted({Path(f["source"]).parent for f in files if f.get("source")})


def raw_config(cfg: dict) -> dict:
    """`cfg` with each pretokenized corpus replaced by the folder it was made from (the training text, in words)."""
    corpora = []
    for corpus in cfg["data"]["corpora"]:
        path = corpus.get("path") if isinstance(corpus, dict) else corpus
        sources = source_folders(path) if isinstance(path, str) else []
        if isinstance(path, str) and sources != [REPO / path]:
            if len(sources) != 1:
                raise ValueError(f"pretokenized corpus {path} was made from {len(sources)} folders, not one")
            path = str(sources[0])
        corpora.append({**corpus, "path": path} if isinstance(corpus, dict) else path)
    return {**cfg, "data": {**cfg["data"], "corpora": corpora, "pretokenized": False}}


def tatoeba_split(cfg: dict) -> dict | None:
    """The `split.json` of the Tatoeba validation split (training/split_tatoeba.py) the run trained on, if any (for
    a pretokenized corpus, that of the folder it was made from)."""
    for corpus in raw_config(cfg)["data"]["corpora"]:
        path = corpus.get("path") if isinstance(corpus, dict) else corpus
        if isinstance(path, str) and (REPO / path / ".." / "split.json").is_file():
            return json.loads((REPO / path / ".." / "split.json").read_text())
    return None


LAUNCH = "accelerate launch --config_file training/accelerate_configs/cpu.yaml training/train.py"


STAGE_COUNT = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def run_dir_of(recipe: str) -> str:
    """The --output-dir the card suggests for a config: `training/configs/laser-mini-X.yaml` -> `runs/laser-mini-X`."""
    return Path(recipe).stem.replace("laser-mini", "runs/laser-mini")


def recipe_text(cfg: dict, recipe: str, dest: Path = DEST) -> str:
    """How the run was launched; for a continued run (`training.init_from`), every stage, each earlier one's
    schedule read from the config that the next one's `base` names."""
    if not cfg["training"].get("init_from"):
        return f"`{recipe}` (`{LAUNCH} --config {recipe} --output-dir {run_dir_of(recipe)}`): "
    from training.common import load_config

    def name(path: Path) -> str:
        return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)

    stages = []  # (config file, config) of the earlier stages, first one first
    path = REPO / recipe  # (an absolute `recipe` stays as it is)
    while True:
        base = (yaml.safe_load(path.read_text()) or {}).get("base")
        if base is None:
            raise ValueError(f"{name(path)}: the run continued an encoder (training.init_from) but the recipe names "
                             "no `base` config for the stage before it")
        path = (path.parent / base).resolve()
        stages.insert(0, (path, load_config(path)))
        if not stages[0][1]["training"].get("init_from"):
            break
    def widened(before: dict, now: dict, training: dict) -> str:  # the stage that widened the encoder says so
        if not training.get("init_widen") or now.get("hidden_size") == before.get("hidden_size"):
            return ""
        return (f", widened from {before['num_layers']}×{before['hidden_size']} to {now['num_layers']}×"
                f"{now['hidden_size']} units (`training.init_widen`: the encoder's units kept as they were, new "
                "ones added near 0)")

    parts = []
    for k, (path, stage) in enumerate(stages):
        st = stage["training"]
        launch = (f" (`{LAUNCH} --config {name(path)} --output-dir {run_dir_of(name(path))}`)" if k == 0
                  else ", from that encoder" + widened(stages[k - 1][1]["model"], stage["model"], st))
        over = (f"over {st['max_minutes']:g} minutes" if st.get("lr_schedule_over") == "minutes"
                else f"over {st['max_steps']:,} steps")
        parts.append(f"{'First' if k == 0 else 'Then'} `{name(path)}`{launch}: directions sampled with temperature "
                     f"{stage['batching']['temperature']}, Adam lr {st['learning_rate']} ({st['lr_scheduler']} decay "
                     f"{over}).")
    count = STAGE_COUNT.get(len(stages) + 1, str(len(stages) + 1))
    before = stages[-1][1]["model"]
    return (f"Trained in {count} stages. " + " ".join(parts) + f" Then `{recipe}`, this run, from that encoder "
            f"(`training.init_from`; this run's: {start_text(cfg['training']['init_from'], dest)})"
            f"{widened(before, cfg.get('model', before), cfg['training'])} with the same tokenizer and data: ")


def recipe_differences(cfg: dict, recipe: str) -> list[str]:
    """The settings in which the run's `config.yaml` (`cfg`) and the config `recipe` (read as train.py reads it)
    differ in what the run computes (`training.train.config_differences`: where it started, how it logged aside):
    the card names the recipe as the run's, so it must be the run's."""
    from training.common import config_differences, load_config

    return [f"{key}: recipe {recipe_value!r}, run {run_value!r}"
            for key, recipe_value, run_value in config_differences(load_config(REPO / recipe), cfg)]


def start_text(init_from: str, dest: Path = DEST) -> str:
    """The encoder a continued run started from, named so that the card stays true once `dest` holds the new
    model: a run continued from the shipped directory itself started from the model this export replaces."""
    path = Path(init_from)
    path = path if path.is_absolute() else REPO / path
    if path.resolve() == Path(dest).resolve():
        return f"`{init_from}` as shipped before this model, i.e. the previous stage's encoder stored in float16"
    return f"`{init_from}`"


def step0_text(report: dict, dest: Path = DEST) -> str:
    if report.get("start"):
        return f'"start" is the encoder this run continued ({start_text(report["start"], dest)}) at step 0'
    return '"untrained" is the same architecture at step 0'


def _is_dest(path: str, dest: Path) -> bool:
    path = Path(path)
    return (path if path.is_absolute() else REPO / path).resolve() == Path(dest).resolve()


def baseline_name(baseline: str, dest: Path = DEST) -> str:
    """A `--baseline` as the card names it: by its folder (the reader's machine does not have the path), and the
    shipped directory, which holds the new model once exported, as the model shipped before."""
    return f"{Path(baseline).name}, shipped before this model" if _is_dest(baseline, dest) else Path(baseline).name


def baseline_text(report: dict, dest: Path = DEST) -> str:
    if report.get("baseline"):
        same = " (the same encoder as \"start\")" if report.get("start") and _is_dest(report["start"], dest) \
            and _is_dest(report["baseline"], dest) else ""
        return f'"baseline" the model passed to `--baseline` (`{baseline_name(report["baseline"], dest)}`){same}'
    return '"baseline" (where present) the model passed to `--baseline`'


def report_tables(report_md: str, report: dict, dest: Path = DEST) -> str:
    """report.md without its title, for the card, with a local `--baseline` path named by `baseline_name`."""
    tables = report_md.split("\n", 2)[2]
    if report.get("baseline"):
        tables = tables.replace(f"`{report['baseline']}`", f"`{baseline_name(report['baseline'], dest)}`")
    return tables


def model_card(run: Path, dest: Path, report: dict, report_md: str, cost: dict | None, coverage: dict,
               diagnosis: list[dict], recipe: str = "training/configs/laser-mini.yaml",
               trained_on: str = "2 CPU cores") -> str:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    config = json.loads((dest / "config.json").read_text())
    stats = json.loads((run / "data_stats.json").read_text())
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    tat = report.get("tatoeba", {})
    focus = tat.get("focus_mean", {})
    m, tr = cfg["model"], cfg["training"]
    flores = report.get("flores", {}).get("trained", {})
    flores_mean = sum(flores.values()) / len(flores) if flores else float("nan")
    trained = tat.get("trained", {})
    n_tatoeba = len(tat.get("languages", []))
    all_mean = (sum(trained[lang][k] for lang in tat["languages"] for k in ("xx2en_error", "en2xx_error"))
                / (2 * n_tatoeba)) if n_tatoeba else float("nan")
    pairs_without_english = (" and, from the Tatoeba bitexts without English, each pair of two other languages"
                             if cfg["data"].get("bitext_pairs") == "all" else "")
    metric = tr.get("best_metric", "valid_error")
    selection = {"valid_error": "the one with the lowest FLORES-200 devtest error among the validations",
                 "valid_extra_error": "the one with the lowest error on the held-out Tatoeba training pairs",
                 "valid_mean": "the one with the lowest mean of the FLORES-200 devtest error and the error on the "
                               "held-out Tatoeba training pairs"}[metric] if tr.get("final_model", "best") == "best" \
        else "the last step"
    schedule = (f"{tr['lr_scheduler']} decay to 0 over the launch's {tr['max_minutes']} minutes"
                if tr.get("lr_schedule_over") == "minutes" else f"{tr['lr_scheduler']} decay")
    precision = f", {tr['mixed_precision']} autocast" if tr.get("mixed_precision") not in (None, "no") else ""
    if cost is None:
        storage = ("float16 storage: the run's float32 weights stayed on the machine that trained it (only the "
                   "float16 weights came back), so the cost of storing them in float16 was not measured for this "
                   "model.")
    else:
        storage = (f"float16 storage: largest embedding difference against the float32 weights "
                   f"{cost['max_abs_embedding_diff']:.1e}; mean Tatoeba error over {', '.join(FOCUS)} "
                   f"{cost['focus_tatoeba_mean']['float32']:.2f} % (float32) vs "
                   f"{cost['focus_tatoeba_mean']['float16']:.2f} % (float16).")
    validation_of = f" --validation-of {report['validated_as']}" if report.get("validated_as") else ""
    if diagnosis:
        useless_text = (f"Languages with an xx→en error of {USELESS_ERROR:.0f} % or more are listed at the end of the "
                        "Tatoeba table: the model is useless for them. Why, as far as the data and the tokenizer tell "
                        f"(`export_default_model.useless_diagnosis`):\n\n{diagnosis_markdown(diagnosis)}")
    else:
        useless_text = f"No Tatoeba language has an xx→en error of {USELESS_ERROR:.0f} % or more.\n"
    split = tatoeba_split(cfg)
    if split:
        tatoeba_data = (
            ", and Tatoeba sentence pairs (tatoeba.org, CC BY 2.0 FR; the Tatoeba Challenge test sets of three "
            "releases), as the LASER paper also trained on Tatoeba outside its test set. The shared data removed "
            "every pair with a sentence of the Tatoeba v1 test set (the 112-language set this card reports), exactly "
            "or ignoring case and punctuation, in any language; `training/split_tatoeba.py` then held out "
            f"{sum(split['held_out'].values()):,} pairs ({next(iter(split['held_out'].values()))} for each of "
            f"{len(split['held_out'])} languages) for validation and removed the {split['removed_total']:,} training "
            "pairs that share a sentence with them")
        tatoeba_valid = (" and those held-out Tatoeba pairs; Tatoeba v1 was used for evaluation only, never to "
                         "choose a step or a setting")
    else:
        tatoeba_data = ". Tatoeba was used for evaluation only"
        tatoeba_valid = ""
    return f"""---
library_name: transformers
pipeline_tag: feature-extraction
tags:
- laser
- sentence-embeddings
- multilingual
- hf_laser
license: cc-by-sa-4.0
---

# laser-mini

A small LASER-style sentence encoder trained by the `hf_laser` project on {trained_on}, shipped inside the package
so that embedding works out of the box (`hf_laser.DEFAULT_MODEL`). It is **far weaker than the original LASER
models** (mean Tatoeba error about 5 % on these languages for the original; {focus.get('trained', float('nan')):.1f} %
here): for real work, convert the original `bilstm.93langs.2018-12-26.pt` or `laser2.pt` with `hf-laser convert`.

| | |
|---|---|
| encoder | {m['num_layers']} × BiLSTM, {m['hidden_size']} units per direction, {m['embed_dim']}-d token embeddings, max-pool |
| embedding size | {config['embedding_dim'] if 'embedding_dim' in config else 2 * m['hidden_size']} |
| vocabulary | {config['vocab_size']:,} entries: Moses preprocessing + a joint BPE of {cfg['tokenizer']['bpe_merges']:,} merges learned on the training data |
| parameters | {sum(p.numel() for p in __import__('hf_laser').LaserModel.from_pretrained(dest).parameters()):,} |
| on disk | {size / 1e6:.1f} MB (weights stored in float16, computed in float32) |

## Limitations

A {m['num_layers']}-layer BiLSTM trained on {trained_on}: per-language quality varies widely (tables below). Mean error
FLORES-200 devtest {flores_mean:.1f} % over {len(flores)} languages; Tatoeba {focus.get('trained', float('nan')):.1f} %
over {', '.join(FOCUS)} and {all_mean:.1f} % over all {n_tatoeba} Tatoeba v1 languages (both directions). Of those
{len(FOCUS)} languages' Tatoeba pairs, the {coverage['covered_share']:.1f} % whose every word occurs at least 3 times
in the training text are missed {coverage['covered']:.1f} % of the time (xx→en), the others {coverage['rest']:.1f} %
at the same sentence lengths (`training/coverage.py`).

## Usage

```python
from hf_laser import LaserEncoder

encoder = LaserEncoder.from_pretrained()          # this model
embeddings = encoder.encode(["Hello world.", "Bonjour le monde."], lang=["en", "fr"])
```

```bash
hf-laser embed --lang fr -i sentences.txt -o embeddings.npy
```

## Training

{recipe_text(cfg, recipe, dest)}objective
`{tr['objective']}` (in-batch translation ranking, temperature {tr['ranking_temperature']}, no decoder), every
language of the corpora into English{pairs_without_english}, {stats['pairs']:,} sentence pairs in
{len(stats['pairs_per_direction'])} directions (sides of at most {cfg['data']['max_length']} tokens), batches of at most
{cfg['batching']['max_sentences']} pairs / {cfg['batching']['max_tokens']:,} tokens per side, directions sampled
with temperature {cfg['batching']['temperature']}, Adam lr {tr['learning_rate']} ({schedule}, {tr['warmup_steps']}
warm-up steps{precision}), {report['exported_step']:,} updates. Encoder exported: {selection}.

Training data (`../shared/data/parallel/train` of the project): NTREX-128 (CC BY-SA 4.0), TICO-19 (CC0), WMT news
test sets (de, fr, ru, zh excluded: they are the mining sets), Multi30k, LibreOffice 7.4 interface translations
(MPL-2.0){tatoeba_data}. Validation: FLORES-200 devtest (CC BY-SA 4.0){tatoeba_valid}. The model is derived from
share-alike data, hence its licence.

{storage}

## Evaluation

Produced by `python training/report.py --run {run_dir_of(recipe)} --tatoeba-langs all
--bucc-dir ../shared/data/mining{" --curve" if report.get("curve") else ""}{validation_of} --plot [--baseline PREVIOUS_MODEL]`; {step0_text(report, dest)},
{baseline_text(report, dest)}. Error = nearest-neighbour search by cosine,
in %, lower is better. {useless_text}
{report_tables(report_md, report, dest)}
![Tatoeba error per language](tatoeba.png)

## Citation

```bibtex
@article{{artetxe2019massively,
  title   = {{Massively Multilingual Sentence Embeddings for Zero-Shot Cross-Lingual Transfer and Beyond}},
  author  = {{Artetxe, Mikel and Schwenk, Holger}},
  journal = {{Transactions of the Association for Computational Linguistics}},
  volume  = {{7}},
  pages   = {{597--610}},
  year    = {{2019}}
}}
```
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="the --output-dir of train.py, with report.json (report.py)")
    parser.add_argument("--recipe", default="training/configs/laser-mini.yaml",
                        help="the config the run was launched with, as the card names it; checked against the run's "
                             "config.yaml, its start (training.init_from, tokenizer.path) aside (default: %(default)s)")
    parser.add_argument("--dest", default=str(DEST), help=f"default: {DEST.relative_to(REPO)}")
    parser.add_argument("--repo-card", default=str(REPO / "model_card.md"), help="copy of the card ('' for none)")
    parser.add_argument("--trained-on", default="2 CPU cores",
                        help="the hardware the card names (default: %(default)s), e.g. '2 CPU cores, its last stage on "
                             "one NVIDIA H200 GPU'")
    args = parser.parse_args(argv)
    run, dest = Path(args.run), Path(args.dest)
    if not (run / "report.json").is_file() or not (run / "tatoeba.png").is_file():
        parser.error(f"{run}/report.json or tatoeba.png is missing: run training/report.py --plot first")
    report = json.loads((run / "report.json").read_text())
    differences = recipe_differences(yaml.safe_load((run / "config.yaml").read_text()), args.recipe)
    if differences:
        parser.error(f"--recipe {args.recipe} is not the config {run} ran with; the card would name the wrong "
                     "recipe. Differences:\n  " + "\n  ".join(differences))
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    save_half(run, dest)
    shutil.copy(run / "tatoeba.png", dest / "tatoeba.png")
    cost = storage_cost(run, dest)
    diagnosis = useless_diagnosis(report.get("tatoeba", {}), json.loads((run / "data_stats.json").read_text()), dest)
    card = model_card(run, dest, report, (run / "report.md").read_text(), cost, coverage_split(run, dest), diagnosis,
                      args.recipe, args.trained_on)
    (dest / "README.md").write_text(card, encoding="utf-8")
    if args.repo_card:
        Path(args.repo_card).write_text(card.replace("](tatoeba.png)", "](src/hf_laser/models/laser-mini/tatoeba.png)"),
                                        encoding="utf-8")
    print(json.dumps(cost))
    print(f"wrote {dest} ({sum(p.stat().st_size for p in dest.iterdir()) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
