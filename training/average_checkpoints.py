"""Averages the encoder weights of several checkpoints of one run (a lever of issue #27: at a constant learning
rate the weights wander around a minimum, and their mean often sits closer to it than any one of them).

    python training/average_checkpoints.py --run OUT --inputs OUT/checkpoints/step-00000750 \
        OUT/checkpoints/step-00001000 --output OUT/averaged [--validate]

Each input is a checkpoint directory of `train.py` (`model.safetensors` of the training model, the encoder under
`laser.`), an encoder directory (`OUT/final`, `OUT/encoders/step-N`) or a `.safetensors` file of either kind. Every
input must hold exactly the encoder's tensors with the same shapes, or nothing is written. The output is a
`LaserModel` directory (float32) with the configuration and tokenizer of the run's `final/` (else `best/`, else
`untrained/`) and a `training_state.json` naming the inputs. `--validate` measures it as the run's validation does
(FLORES-200 and the held-out Tatoeba pairs of the run's config: `valid_error`, `valid_extra_error`, `valid_mean`),
prints those beside the run's best and writes them into `training_state.json`; the Tatoeba v1 test set is never read.
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
from safetensors.torch import load_file  # noqa: E402

TRAINING_PREFIX = "laser."  # LaserForPreTraining keeps its encoder (LaserModel) as `self.laser`


def read_encoder_state(path: Path) -> dict[str, torch.Tensor]:
    """The encoder tensors of a checkpoint / encoder directory or a `.safetensors` file, keyed as in `LaserModel`."""
    file = path / "model.safetensors" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no model.safetensors")
    state = load_file(str(file))
    if any(k.startswith(TRAINING_PREFIX) for k in state):
        extra = sorted(k for k in state if not k.startswith(TRAINING_PREFIX))
        if extra:  # a decoder (translation objective): not part of the encoder, left out on purpose
            print(f"{path}: leaving out {len(extra)} tensors that are not the encoder's ({extra[0]}, ...)")
        state = {k.removeprefix(TRAINING_PREFIX): v for k, v in state.items() if k.startswith(TRAINING_PREFIX)}
    return state


def average_states(states: list[dict[str, torch.Tensor]], names: list[str]) -> dict[str, torch.Tensor]:
    """Element-wise mean (in float64, stored as float32) of state dicts that must match key for key and in shape."""
    if not states:
        raise ValueError("nothing to average")
    keys = set(states[0])
    for state, name in zip(states[1:], names[1:]):
        if set(state) != keys:
            raise ValueError(f"{name} has other tensors than {names[0]}: "
                             f"{sorted(set(state) ^ keys)[:5]}")
        for k in keys:
            if state[k].shape != states[0][k].shape:
                raise ValueError(f"{name}: {k} is {tuple(state[k].shape)}, {names[0]}: {tuple(states[0][k].shape)}")
    return {k: (sum(s[k].double() for s in states) / len(states)).float() for k in sorted(keys)}


def template_dir(run: Path) -> Path:
    for name in ("final", "best", "untrained"):
        if (run / name / "config.json").is_file():
            return run / name
    raise FileNotFoundError(f"{run} has no final/, best/ or untrained/ encoder directory to take the config from")


def write_averaged(run: Path, inputs: list[Path], output: Path) -> Path:
    """Writes the mean of `inputs` as a `LaserModel` directory; the loaded model must use every tensor."""
    from hf_laser import LaserModel, LaserTokenizer

    if output.exists():  # before any work: nothing is overwritten
        raise FileExistsError(f"{output} exists; choose another --output (nothing is overwritten)")
    names = [str(p) for p in inputs]
    averaged = average_states([read_encoder_state(p) for p in inputs], names)
    template = template_dir(run)
    model = LaserModel.from_pretrained(template, dtype=torch.float32)
    expected = model.state_dict()
    if set(expected) != set(averaged):
        raise ValueError(f"the inputs' tensors do not match the run's encoder ({template}): "
                         f"{sorted(set(expected) ^ set(averaged))[:5]}")
    model.load_state_dict(averaged, strict=True)
    tmp = output.with_name(output.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    LaserTokenizer.from_pretrained(template).save_pretrained(tmp)
    (tmp / "training_state.json").write_text(json.dumps({"averaged": names}, indent=1) + "\n")
    tmp.rename(output)
    return output


def validation_errors(run: Path, model_dir: Path, device: str | None = None) -> dict[str, float]:
    """`valid_error` (FLORES), `valid_extra_error` (held-out sets) and `valid_mean` of `model_dir`, measured on the
    languages and sets of the run's validation (`training/report.py`'s baseline measurement)."""
    from training.report import baseline_validation_errors, run_validation, validation_kwargs

    targets = yaml.safe_load((run / "config.yaml").read_text())["data"]["target_languages"]
    vcfg, flores_langs, sets = run_validation(run)
    flores = baseline_validation_errors(**validation_kwargs(model_dir, vcfg, flores_langs, targets, device))
    flores = {lang: e for lang, e in flores.items() if lang in flores_langs}
    result = {"valid_error": sum(flores.values()) / len(flores)}
    if sets:
        held_out = baseline_validation_errors(**validation_kwargs(model_dir, vcfg, None, targets, device, sets))
        result["valid_extra_error"] = sum(held_out.values()) / len(held_out)
        result["valid_mean"] = (result["valid_error"] + result["valid_extra_error"]) / 2
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="the --output-dir of train.py the inputs come from")
    parser.add_argument("--inputs", nargs="+", required=True,
                        help="checkpoint or encoder directories, or .safetensors files, of that run")
    parser.add_argument("--output", required=True, help="new directory for the averaged encoder")
    parser.add_argument("--validate", action="store_true",
                        help="measure the result on the run's validation (FLORES + held-out pairs)")
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    run = Path(args.run)
    if len(args.inputs) < 2:
        parser.error("--inputs needs at least two checkpoints to average")
    output = write_averaged(run, [Path(p) for p in args.inputs], Path(args.output))
    print(f"wrote {output} (mean of {len(args.inputs)} checkpoints)")
    if args.validate:
        errors = validation_errors(run, output, args.device)
        state = json.loads((output / "training_state.json").read_text())
        (output / "training_state.json").write_text(json.dumps({**state, **errors}, indent=1) + "\n")
        best = run / "best" / "training_state.json"
        print("averaged: " + ", ".join(f"{k} {v:.3f}" for k, v in errors.items()))
        if best.is_file():
            print(f"the run's best: {best.read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
