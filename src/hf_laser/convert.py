"""Conversion of original LASER checkpoints (`bilstm.93langs.2018-12-26.pt`, `laser2.pt`) to Hugging Face directories.

Usage::

    hf-laser convert bilstm.93langs.2018-12-26.pt laser-93langs --bpe-codes 93langs.fcodes --bpe-vocab 93langs.fvocab
    hf-laser convert laser2.pt laser2 --spm-model laser2.spm --spm-vocab laser2.cvocab
    python -m hf_laser.convert CHECKPOINT OUT_DIR ...
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from .configuration_laser import LaserConfig
from .modeling_laser import LaserModel

EXPECTED_PARAMS = (
    "num_embeddings", "padding_idx", "embed_dim", "hidden_size", "num_layers", "bidirectional",
)
SPECIAL_TOKENS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
EXPECTED_FORMAT = (
    "a LASER BiLSTM checkpoint: a torch.save'd dict with keys 'params' (num_embeddings, padding_idx, embed_dim, "
    "hidden_size, num_layers, bidirectional, left_pad, padding_value), 'model' (embed_tokens.weight and "
    "lstm.weight_ih_l{k}[_reverse] ... state dict) and 'dictionary' (token -> id, '<s>'=0 '<pad>'=1 '</s>'=2 "
    "'<unk>'=3)"
)


class NotALaserCheckpoint(ValueError):
    """The file is not an original LASER BiLSTM checkpoint."""


def load_laser_checkpoint(path: str | Path) -> dict:
    """Loads and validates an original LASER checkpoint with `torch.load(weights_only=True)`.

    Returns the dict with `params`, `model` (state dict) and `dictionary`. Raises [`NotALaserCheckpoint`] naming what
    was expected when the file is something else.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle errors, zip errors, unsafe globals...
        raise NotALaserCheckpoint(f"{path} could not be read as {EXPECTED_FORMAT}: {err}") from err
    if not isinstance(checkpoint, dict) or not {"params", "model", "dictionary"} <= set(checkpoint):
        found = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise NotALaserCheckpoint(f"{path} is not {EXPECTED_FORMAT}; found {found}")
    params, state, dictionary = checkpoint["params"], checkpoint["model"], checkpoint["dictionary"]
    missing = [k for k in EXPECTED_PARAMS if k not in params]
    if missing:
        raise NotALaserCheckpoint(f"{path}: 'params' lacks {missing}; expected {EXPECTED_FORMAT}")
    for token, idx in SPECIAL_TOKENS.items():
        if dictionary.get(token) != idx:
            raise NotALaserCheckpoint(
                f"{path}: dictionary has {token!r} -> {dictionary.get(token)!r}, expected {idx}"
            )
    if params["padding_idx"] != SPECIAL_TOKENS["<pad>"]:
        raise NotALaserCheckpoint(f"{path}: padding_idx is {params['padding_idx']}, expected 1 (<pad>)")
    if len(dictionary) != params["num_embeddings"] or sorted(dictionary.values()) != list(range(len(dictionary))):
        raise NotALaserCheckpoint(
            f"{path}: dictionary ({len(dictionary)} entries) must map to ids 0..num_embeddings-1 "
            f"(num_embeddings={params['num_embeddings']})"
        )
    if "embed_tokens.weight" not in state or not any(k.startswith("lstm.") for k in state):
        raise NotALaserCheckpoint(f"{path}: 'model' lacks embed_tokens/lstm weights; expected {EXPECTED_FORMAT}")
    return checkpoint


def config_from_params(params: dict, **overrides) -> LaserConfig:
    """Builds a [`LaserConfig`] from the `params` of an original checkpoint."""
    return LaserConfig(
        vocab_size=int(params["num_embeddings"]),
        embed_dim=int(params["embed_dim"]),
        hidden_size=int(params["hidden_size"]),
        num_layers=int(params["num_layers"]),
        bidirectional=bool(params["bidirectional"]),
        left_pad=bool(params.get("left_pad", True)),
        padding_value=float(params.get("padding_value", 0.0)),
        pad_token_id=int(params["padding_idx"]),
        **overrides,
    )


def model_from_checkpoint(checkpoint: dict) -> LaserModel:
    """Builds a [`LaserModel`] holding exactly the weights of an original checkpoint (float32)."""
    config = config_from_params(checkpoint["params"])
    model = LaserModel(config)
    state = {k: v.float() for k, v in checkpoint["model"].items()}
    expected = model.state_dict()
    unexpected = sorted(set(state) - set(expected))
    missing = sorted(set(expected) - set(state))
    if unexpected or missing:
        raise NotALaserCheckpoint(f"state dict does not match the params: missing {missing}, unexpected {unexpected}")
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise NotALaserCheckpoint(f"{key}: shape {tuple(tensor.shape)} != {tuple(expected[key].shape)} from params")
    model.load_state_dict(state, strict=True)
    return model.eval()


def save_tokenizer_files(
    out_dir: Path,
    dictionary: dict[str, int],
    *,
    bpe_codes: Path | None = None,
    bpe_vocab: Path | None = None,
    spm_model: Path | None = None,
    spm_vocab: Path | None = None,
) -> None:
    """Writes a `LaserTokenizer` (dictionary + BPE codes/vocab or SentencePiece model) into `out_dir`."""
    from .tokenization_laser import LaserTokenizer

    tokenizer = LaserTokenizer.from_laser_files(
        dictionary, bpe_codes=bpe_codes, bpe_vocab=bpe_vocab, spm_model=spm_model
    )
    tokenizer.save_pretrained(out_dir)
    if spm_vocab is not None:
        # Only LASER3 (transformer) checkpoints read the cvocab; kept for provenance.
        shutil.copyfile(spm_vocab, out_dir / "spm.cvocab")


def convert(
    checkpoint_path: str | Path,
    out_dir: str | Path,
    *,
    bpe_codes: str | Path | None = None,
    bpe_vocab: str | Path | None = None,
    spm_model: str | Path | None = None,
    spm_vocab: str | Path | None = None,
    model_card: bool = True,
) -> Path:
    """Converts an original LASER checkpoint into a Hugging Face directory.

    Args:
        checkpoint_path: the original `.pt` file.
        out_dir: output directory (created).
        bpe_codes, bpe_vocab: fastBPE codes and vocabulary (LASER1).
        spm_model, spm_vocab: SentencePiece model and `.cvocab` (LASER2).
        model_card: write a `README.md` model card from the package template.

    Returns:
        The output directory, loadable with `AutoModel.from_pretrained` and `AutoTokenizer.from_pretrained`.
    """
    bpe = bpe_codes is not None or bpe_vocab is not None
    spm = spm_model is not None or spm_vocab is not None
    if bpe and spm:
        raise ValueError("give either --bpe-codes/--bpe-vocab (LASER1) or --spm-model/--spm-vocab (LASER2), not both")
    if bpe and (bpe_codes is None or bpe_vocab is None):
        raise ValueError("LASER1 conversion needs both --bpe-codes and --bpe-vocab")
    if spm and spm_model is None:
        raise ValueError("LASER2 conversion needs --spm-model")
    for f in (bpe_codes, bpe_vocab, spm_model, spm_vocab):
        if f is not None and not Path(f).is_file():
            raise FileNotFoundError(f"file not found: {f}")

    checkpoint = load_laser_checkpoint(checkpoint_path)
    model = model_from_checkpoint(checkpoint)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if bpe or spm:
        save_tokenizer_files(
            out_dir,
            checkpoint["dictionary"],
            bpe_codes=Path(bpe_codes) if bpe_codes else None,
            bpe_vocab=Path(bpe_vocab) if bpe_vocab else None,
            spm_model=Path(spm_model) if spm_model else None,
            spm_vocab=Path(spm_vocab) if spm_vocab else None,
        )
    else:
        # No subword model given: the dictionary still lets `encode(..., pretokenized=True)` work.
        with open(out_dir / "vocab.json", "w", encoding="utf-8") as f:
            json.dump(checkpoint["dictionary"], f, ensure_ascii=False)
    if model_card:
        from .model_card import write_model_card

        write_model_card(
            out_dir,
            base_model=Path(checkpoint_path).name,
            tokenizer="SentencePiece (LASER2)" if spm else "Moses + fastBPE (LASER1)" if bpe else "none (dictionary only)",
        )
    return out_dir


def add_convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="original LASER checkpoint (.pt)")
    parser.add_argument("out_dir", help="output directory")
    parser.add_argument("--bpe-codes", help="fastBPE codes (LASER1, e.g. 93langs.fcodes)")
    parser.add_argument("--bpe-vocab", help="fastBPE vocabulary (LASER1, e.g. 93langs.fvocab)")
    parser.add_argument("--spm-model", help="SentencePiece model (LASER2, e.g. laser2.spm)")
    parser.add_argument("--spm-vocab", help="SentencePiece .cvocab (LASER2, e.g. laser2.cvocab)")
    parser.add_argument("--no-model-card", action="store_true", help="do not write README.md")


def run_convert(args: argparse.Namespace) -> int:
    try:
        out = convert(
            args.checkpoint,
            args.out_dir,
            bpe_codes=args.bpe_codes,
            bpe_vocab=args.bpe_vocab,
            spm_model=args.spm_model,
            spm_vocab=args.spm_vocab,
            model_card=not args.no_model_card,
        )
    except (NotALaserCheckpoint, ValueError, FileNotFoundError) as err:
        print(f"hf-laser convert: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_laser.convert", description=__doc__.splitlines()[0])
    add_convert_arguments(parser)
    return run_convert(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
