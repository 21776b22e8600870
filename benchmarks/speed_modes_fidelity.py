"""What the optional speed modes cost in fidelity, on real Tatoeba text.

For each model, the fp32 embeddings (PyTorch) of every Tatoeba v1 file are compared with those of int8 dynamic
quantisation (`LaserEncoder.from_pretrained(..., quantize="int8")`, CPU), bf16 weights and the NumPy engine
(`engine="numpy"`, fp32, the command line's default for a plain model directory): cosine similarity to fp32 and the
change of the Tatoeba error (xx→en / en→xx nearest neighbour by cosine, averaged over languages). Text is tokenized
once; every mode embeds the same ids. The last column is how much a mode's vector of a sentence depends on the
sentences batched with it: every `--alone-every`-th sentence is embedded alone and compared (cosine) with its vector
from the batched run (int8 quantises each batch's activations with that batch's range, so its vectors move; fp32
differs by round-off only). Usage::

    python benchmarks/speed_modes_fidelity.py [--model DIR ...] [--langs fra,deu,...] [--modes int8,bf16,numpy]
                                              [--no-reference] [--alone-every 50]

The reference `laser-ref-tiny.pt` is converted and measured too (random weights: errors near chance, so its error
change mostly shows how often near-ties flip; a paper-size 5×512 encoder, the slowest part on a CPU) unless
`--no-reference`; `--model` adds trained models.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))  # for `evaluation`

from evaluation.tatoeba import TATOEBA_LANGS, available_languages, retrieval_errors, tatoeba_paths  # noqa: E402
from hf_laser import LaserEncoder  # noqa: E402
from hf_laser.encoder import read_lines  # noqa: E402


def tiny_reference_model() -> Path:
    from hf_laser.checkpoints.convert import convert

    out = REPO / ".cache" / "benchmarks" / "laser-ref-tiny"
    if not (out / "model.safetensors").exists():
        ref = SHARED / "reference"
        convert(ref / "checkpoint" / "laser-ref-tiny.pt", out, bpe_codes=ref / "bpe" / "laser-ref.fcodes",
                bpe_vocab=ref / "bpe" / "laser-ref.fvocab")
    return out



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append",
                        help="further model directory (repeatable); the converted laser-ref-tiny is measured too")
    parser.add_argument("--tatoeba-dir", default=str(SHARED / "data" / "tatoeba" / "v1"))
    parser.add_argument("--langs", default=None, help="ISO 639-3 codes (default: all)")
    parser.add_argument("--modes", default="int8,bf16,numpy", help="comma-separated, of int8, bf16, numpy")
    parser.add_argument("--no-reference", action="store_true", help="measure only the --model directories")
    parser.add_argument("--alone-every", type=int, default=50,
                        help="embed every N-th sentence alone too, to measure the batch's influence (0: skip)")
    args = parser.parse_args()
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)
    if unknown := [m for m in args.modes.split(",") if m not in ("int8", "bf16", "numpy")]:
        parser.error(f"unknown mode(s) {', '.join(unknown)}: choose from int8, bf16, numpy")
    if args.no_reference and not args.model:
        parser.error("--no-reference needs at least one --model")
    langs = args.langs.split(",") if args.langs else [x for x in available_languages(args.tatoeba_dir) if x != "eng"]
    models = [] if args.no_reference else [tiny_reference_model()]
    models += [Path(m) for m in args.model or [] if not models or Path(m).resolve() != models[0].resolve()]

    print("| model | mode | mean cosine to fp32 | min cosine | avg xx→en error | avg en→xx error | Δ xx→en | Δ en→xx "
          "| alone vs in its batch: mean / min cosine |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model_dir in models:
        fp32 = LaserEncoder.from_pretrained(model_dir, engine="torch")
        ids = []
        for lang in langs:
            src, tgt = tatoeba_paths(args.tatoeba_dir, lang)
            ids.append((fp32.token_ids(list(read_lines(src)), TATOEBA_LANGS.get(lang, lang)),
                        fp32.token_ids(list(read_lines(tgt)), "en")))
        reference = None
        for mode in ["fp32", *args.modes.split(",")]:
            encoder = fp32 if mode == "fp32" else LaserEncoder.from_pretrained(
                model_dir, quantize="int8" if mode == "int8" else None,
                dtype=torch.bfloat16 if mode == "bf16" else None, engine="numpy" if mode == "numpy" else "torch")
            embs = [(encoder.encode_ids(s).numpy(), encoder.encode_ids(t).numpy()) for s, t in ids]
            errors = np.array([[r["xx2en_errors"] / r["n"], r["en2xx_errors"] / r["n"]]
                               for r in (retrieval_errors(s, t) for s, t in embs)]) * 100
            flat = np.concatenate([e for pair in embs for e in pair])
            if reference is None:
                reference, ref_errors = flat, errors
            cos = row_cosines(flat, reference)
            mean, delta = errors.mean(0), errors.mean(0) - ref_errors.mean(0)
            alone = batch_influence(encoder, [s for pair in ids for s in pair], flat, args.alone_every)
            print(f"| {model_dir.name} | {mode} | {cos.mean():.5f} | {cos.min():.5f} | {mean[0]:.2f} | {mean[1]:.2f} "
                  f"| {delta[0]:+.2f} | {delta[1]:+.2f} | {alone} |", flush=True)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of `a` with the same row of `b`, shape `(n,)`."""
    return np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def batch_influence(encoder: LaserEncoder, id_lists: list[list[list[int]]], batched: np.ndarray, every: int) -> str:
    """Mean / min cosine between every `every`-th sentence embedded alone and its row of `batched` (the same ids
    embedded in batches, in order), as a table cell."""
    if every <= 0:
        return "not measured"
    flat_ids = [ids for part in id_lists for ids in part]
    rows = range(0, len(flat_ids), every)
    alone = np.stack([encoder.encode_ids([flat_ids[i]]).numpy()[0] for i in rows])
    cos = row_cosines(alone, batched[list(rows)])
    return f"{cos.mean():.6f} / {cos.min():.6f} ({len(rows):,} sentences)"


if __name__ == "__main__":
    main()
