"""Conversion of original LASER checkpoints (`bilstm.93langs.2018-12-26.pt`, `laser2.pt`) to Hugging Face directories.

Usage::

    hf-laser convert bilstm.93langs.2018-12-26.pt laser-93langs --bpe-codes 93langs.fcodes --bpe-vocab 93langs.fvocab
    hf-laser convert laser2.pt laser2 --spm-model laser2.spm --spm-vocab laser2.cvocab
    hf-laser convert laser3-wol_Latn.v1.pt laser3-wol_Latn --spm-model laser2.spm --spm-vocab laser2.cvocab
    hf-laser convert CHECKPOINT OUT_DIR --no-tokenizer        # dictionary only: pre-tokenized input
    python -m hf_laser.checkpoints.convert CHECKPOINT OUT_DIR ...    # = hf-laser convert (hf_laser/commands/convert.py)

Before anything is written the converter checks that the checkpoint file is intact (zip CRCs), that its
`params` / `dictionary` / weights are well formed and finite, and that the subword files belong to the checkpoint
(their vocabulary is the checkpoint's dictionary). A non-empty OUT_DIR is only replaced with `--overwrite`.

LASER3 (NLLB's per-language students): the BiLSTM ones have LASER2's format and convert as LASER2; the transformer
ones (`cfg` + `model`, read as data by [`~fairseq_checkpoint.load_fairseq_checkpoint`], no fairseq needed) take their
dictionary from the `.cvocab` (`--spm-vocab`, required: the student's own, or `laser2.cvocab` for students without
one, as laser_encoders does) and their SentencePiece model from `--spm-model`; the tokenizer is laser_encoders'
`LaserTokenizer` (LASER2's preprocessing with English punctuation rules for every language).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from ..modeling.configuration_laser import LaserConfig
from ..modeling.modeling_laser import LaserModel
from ..text.bpe import read_fields
from ..text.languages import is_flores_code, student_code
from ..text.tokenization_laser import LaserTokenizer
from .fairseq_checkpoint import (
    EXPECTED_FORMAT as LASER3_EXPECTED_FORMAT,
)
from .fairseq_checkpoint import (
    NotALaser3Checkpoint,
    encoder_state,
    fairseq_dictionary,
    laser3_model_config,
    load_fairseq_checkpoint,
    scan_checkpoint,
)
from .model_card import write_model_card

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
    """The file is not an original LASER BiLSTM checkpoint (or a damaged one)."""

class TokenizerMismatch(ValueError):
    """The subword files (BPE codes/vocab, SentencePiece model/cvocab) do not belong to the checkpoint."""

POSITIVE_INT_PARAMS = ("num_embeddings", "embed_dim", "hidden_size", "num_layers")
# fairseq pads a dictionary to a multiple of 8 with these; no tokenizer ever produces them.
FAIRSEQ_PADDING = re.compile(r"^madeupword\d{4}$")


def verify_zip_crc(path: str | Path) -> bool:
    """Checks the CRC-32 of every member of a zip-format (`torch.save` >= 1.6) checkpoint.

    `torch.load` does not check them, so flipped bytes in the tensor data would load as silently wrong weights.
    Returns False for a legacy (non-zip) checkpoint, which carries no checksums; raises [`NotALaserCheckpoint`]
    when a member is damaged.
    """
    path = Path(path)
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError, ValueError) as err:
        raise NotALaserCheckpoint(f"{path} is damaged (its zip structure cannot be read: {err}); "
                                  "download or copy it again") from err
    if bad is not None:
        raise NotALaserCheckpoint(f"{path} is damaged: CRC check failed for {bad!r} (the file was corrupted on "
                                  "disk or in transfer); download or copy it again")
    return True


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_params(path: Path, params) -> None:
    if not isinstance(params, dict):
        raise NotALaserCheckpoint(f"{path}: 'params' is a {type(params).__name__}, expected a dict; "
                                  f"expected {EXPECTED_FORMAT}")
    missing = [k for k in EXPECTED_PARAMS if k not in params]
    if missing:
        raise NotALaserCheckpoint(f"{path}: 'params' lacks {missing}; expected {EXPECTED_FORMAT}")
    for key in POSITIVE_INT_PARAMS:
        if not _is_int(params[key]) or params[key] <= 0:
            raise NotALaserCheckpoint(f"{path}: params[{key!r}] is {params[key]!r}, expected a positive integer")
    if not _is_int(params["padding_idx"]):
        raise NotALaserCheckpoint(f"{path}: params['padding_idx'] is {params['padding_idx']!r}, expected an integer")
    for key in ("bidirectional", "left_pad"):
        if key in params and not (isinstance(params[key], bool) or params[key] in (0, 1)):
            raise NotALaserCheckpoint(f"{path}: params[{key!r}] is {params[key]!r}, expected true or false")
    value = params.get("padding_value", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise NotALaserCheckpoint(f"{path}: params['padding_value'] is {value!r}, expected a finite number")


def _check_dictionary(path: Path, dictionary) -> None:
    if not isinstance(dictionary, dict):
        raise NotALaserCheckpoint(f"{path}: 'dictionary' is a {type(dictionary).__name__}, expected a dict "
                                  "token -> id")
    for token, idx in dictionary.items():
        if not isinstance(token, str) or not _is_int(idx):
            raise NotALaserCheckpoint(f"{path}: 'dictionary' entry {token!r} -> {idx!r} is not a token (str) -> "
                                      "id (int) pair")


def _check_state(path: Path, state) -> None:
    if not isinstance(state, dict):
        raise NotALaserCheckpoint(f"{path}: 'model' is a {type(state).__name__}, expected a state dict")
    for key, tensor in state.items():
        if not isinstance(key, str) or not isinstance(tensor, torch.Tensor):
            raise NotALaserCheckpoint(f"{path}: 'model' entry {key!r} is a {type(tensor).__name__}, expected a "
                                      "tensor")
        if not tensor.is_floating_point():
            raise NotALaserCheckpoint(f"{path}: weight {key} has dtype {tensor.dtype}, expected floating point")
    bad = [key for key, tensor in state.items() if not bool(torch.isfinite(tensor).all())]
    if bad:
        raise NotALaserCheckpoint(f"{path}: NaN or infinite values in {', '.join(sorted(bad))}; the checkpoint is "
                                  "damaged (or from a diverged training run)")


def not_a_torch_file(path: Path) -> str | None:
    """Why `path` is evidently no PyTorch file (those are zip archives, or pickles for torch < 1.6), or None; read
    from its first bytes, so that a text file is not reported as torch's "Unsupported operand 76"."""
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":
        return None
    kind = "an empty file" if not head else "a text file" if all(b in b"\t\r\n" or 32 <= b < 127 or b >= 0xC2
                                                               for b in head) else "another binary format"
    return f"{path} is not a PyTorch checkpoint ({kind}; a checkpoint is a zip archive or a pickle made by torch.save)"


def load_laser_checkpoint(path: str | Path) -> dict:
    """Loads and validates an original LASER checkpoint with `torch.load(weights_only=True)`.

    Returns the dict with `params`, `model` (state dict) and `dictionary`. Raises [`NotALaserCheckpoint`] naming what
    was expected when the file is something else.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    if why := not_a_torch_file(path):
        raise NotALaserCheckpoint(why)
    verify_zip_crc(path)
    try:  # the limits on what a file may declare (docs/convert.md, "Untrusted inputs"), before anything is read
        scan_checkpoint(path, check_names=False)
    except NotALaser3Checkpoint as err:
        raise NotALaserCheckpoint(f"{path} could not be read as {EXPECTED_FORMAT}: {err}") from None
    except (OSError, zipfile.BadZipFile, EOFError, ValueError):
        pass  # torch's own reading says what is wrong below
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (Exception, RecursionError) as err:  # pickle errors, zip errors, unsafe globals...
        text = " ".join(str(err).split())
        if "Weights only load failed" in text:
            # torch's message advises weights_only=False (running the file's code): not an option here
            detail = text.split("WeightsUnpickler error:", 1)[-1].split(". ", 1)[0].strip() \
                if "WeightsUnpickler error:" in text else "objects other than tensors"
            raise NotALaserCheckpoint(
                f"{path} could not be read as {EXPECTED_FORMAT}: it holds Python objects a LASER checkpoint does not "
                f"have ({detail}); hf-laser loads checkpoints with weights_only=True and never runs code from them"
            ) from err
        raise NotALaserCheckpoint(f"{path} could not be read as {EXPECTED_FORMAT}: {text}") from err
    if not isinstance(checkpoint, dict) or not {"params", "model", "dictionary"} <= set(checkpoint):
        found = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise NotALaserCheckpoint(f"{path} is not {EXPECTED_FORMAT}; found {found}")
    params, state, dictionary = checkpoint["params"], checkpoint["model"], checkpoint["dictionary"]
    _check_params(path, params)
    _check_dictionary(path, dictionary)
    _check_state(path, state)
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


def _first_difference(expected: list[str], found: list[str], what: str) -> str:
    for i, (a, b) in enumerate(zip(expected, found)):
        if a != b:
            return f"first difference at entry {i + 1}: the dictionary has {a!r} (id {i + 4}), {what} has {b!r}"
    shorter = "the dictionary" if len(expected) < len(found) else what
    i = min(len(expected), len(found))
    extra = found[i] if len(expected) < len(found) else expected[i]
    return f"{shorter} ends after entry {i}, the other goes on with {extra!r}"


def dictionary_tokens(dictionary: dict[str, int]) -> list[str]:
    """The checkpoint's tokens in id order, without the 4 special tokens and fairseq's `madeupwordNNNN` padding."""
    tokens = [t for t, _ in sorted(dictionary.items(), key=lambda kv: kv[1]) if t not in SPECIAL_TOKENS]
    while tokens and FAIRSEQ_PADDING.match(tokens[-1]):
        tokens.pop()
    return tokens


def _mismatch(kind: str, files: str, expected: list[str], found: list[str], what: str, ordered: bool) -> str:
    expected_set, found_set = set(expected), set(found)
    not_in_dict = [t for t in found if t not in expected_set]
    not_in_files = [t for t in expected if t not in found_set]
    parts = [f"the {kind} files ({files}) do not belong to this checkpoint: its dictionary has {len(expected)} "
             f"tokens (without <s> <pad> </s> <unk>), {what} has {len(found)}"]
    if not_in_dict:
        parts.append(f"{len(not_in_dict)} of {what}'s tokens are not in the dictionary and would become <unk> "
                     f"(first: {', '.join(map(repr, not_in_dict[:5]))})")
    if not_in_files:
        parts.append(f"{len(not_in_files)} dictionary tokens are not in {what} (first: "
                     f"{', '.join(map(repr, not_in_files[:5]))})")
    if ordered and not not_in_dict and not not_in_files:
        parts.append(_first_difference(expected, found, what))
    return "; ".join(parts) + ". Give the subword files that came with this checkpoint"


def check_tokenizer_files(
    dictionary: dict[str, int],
    *,
    bpe_vocab: str | Path | None = None,
    spm_model: str | Path | None = None,
    spm_vocab: str | Path | None = None,
) -> None:
    """Checks that subword files belong to a checkpoint's dictionary; raises [`TokenizerMismatch`] otherwise.

    The original encoder looks every subword token up in the checkpoint's dictionary (a miss becomes `<unk>`), so
    the tokenizer's vocabulary must be exactly the dictionary (after `<s> <pad> </s> <unk>`, and ignoring trailing
    fairseq `madeupwordNNNN` padding):
    - fastBPE (LASER1): the `.fvocab` tokens are the dictionary's tokens, same count, none missing on either side.
      Their order is not compared: fastBPE only uses the `.fvocab` as a set (to undo merges into unknown tokens)
      and the ids come from the dictionary.
    - SentencePiece (LASER2): the model's pieces (without its control and unknown pieces) are the dictionary's
      tokens; the `.cvocab`, when given, is the dictionary itself in fairseq's text format (`piece count` lines),
      so it must list the same pieces in the same order (fairseq's `Dictionary.load` gives ids 4, 5, ... in file
      order).
    """

    expected = dictionary_tokens(dictionary)
    if bpe_vocab is not None:
        try:
            found = [fields[0] for fields in read_fields(bpe_vocab, 2, "token count")]
        except (ValueError, UnicodeDecodeError) as err:
            raise TokenizerMismatch(f"{bpe_vocab} is not a fastBPE vocabulary ('token count' lines): {err}") from err
        found = [t for t in found if t not in SPECIAL_TOKENS]
        if len(found) != len(expected) or set(found) != set(expected):
            raise TokenizerMismatch(_mismatch("BPE", str(bpe_vocab), expected, found, "the fvocab", ordered=False))
    if spm_model is not None:
        # lazy: needed by LASER2 tokenizers only
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.Load(str(spm_model))
        except (OSError, RuntimeError) as err:
            raise TokenizerMismatch(f"{spm_model} is not a SentencePiece model: {err}") from err
        found = [processor.IdToPiece(i) for i in range(processor.GetPieceSize())
                 if not (processor.IsControl(i) or processor.IsUnknown(i))]
        found = [t for t in found if t not in SPECIAL_TOKENS]
        if len(found) != len(expected) or set(found) != set(expected):
            raise TokenizerMismatch(_mismatch("SentencePiece", str(spm_model), expected, found, "the spm model",
                                              ordered=False))
    if spm_vocab is not None:
        try:
            found = [fields[0] for fields in read_fields(spm_vocab, 2, "piece count")]
        except (ValueError, UnicodeDecodeError) as err:
            raise TokenizerMismatch(f"{spm_vocab} is not a fairseq dictionary ('piece count' lines): {err}") from err
        found = [t for t in found if t not in SPECIAL_TOKENS and not FAIRSEQ_PADDING.match(t)]
        if found != expected:
            raise TokenizerMismatch(_mismatch("SentencePiece", str(spm_vocab), expected, found, "the cvocab",
                                              ordered=True))


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"output {out_dir} exists and is not a directory; choose a directory path")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not overwrite:
            raise ValueError(f"output directory {out_dir} is not empty: pass --overwrite (overwrite=True) to replace "
                             "its contents, or choose a new directory")
        resolved, cwd = out_dir.resolve(), Path.cwd().resolve()
        if resolved == cwd or resolved in cwd.parents or resolved == Path.home().resolve():
            raise ValueError(f"refusing to replace {out_dir} (the current, a parent or the home directory) even with "
                             "--overwrite; choose a dedicated output directory")


def _replace_dir(tmp_dir: Path, out_dir: Path) -> None:
    """Moves the finished `tmp_dir` to `out_dir`, replacing what was there (only after everything was written)."""
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / "dir")
    os.replace(tmp_dir, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_tokenizer_files(
    out_dir: Path,
    dictionary: dict[str, int],
    *,
    bpe_codes: Path | None = None,
    bpe_vocab: Path | None = None,
    spm_model: Path | None = None,
    spm_vocab: Path | None = None,
    laser2_punct_lang: str | None = None,
) -> None:
    """Writes a `LaserTokenizer` (dictionary + BPE codes/vocab or SentencePiece model) into `out_dir`;
    `laser2_punct_lang`: see [`~text_tokenizer.LaserTextPipeline`] (`"en"` for LASER3 students: laser_encoders'
    `LaserTokenizer` normalises punctuation with English rules for every language)."""

    tokenizer = LaserTokenizer.from_laser_files(
        dictionary, bpe_codes=bpe_codes, bpe_vocab=bpe_vocab, spm_model=spm_model,
        **({"laser2_punct_lang": laser2_punct_lang} if laser2_punct_lang else {}),
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
    no_tokenizer: bool = False,
    overwrite: bool = False,
    language: str | None = None,
    laser2_punct_lang: str | None = None,
) -> Path:
    """Converts an original LASER checkpoint into a Hugging Face directory.

    Everything is checked before anything is written (see the module docstring); the directory is written next to
    `out_dir` and moved into place at the end, so a failed conversion leaves nothing behind.

    Args:
        checkpoint_path: the original `.pt` file.
        out_dir: output directory (created; must be empty or absent unless `overwrite`).
        bpe_codes, bpe_vocab: fastBPE codes and vocabulary (LASER1).
        spm_model, spm_vocab: SentencePiece model and `.cvocab` (LASER2).
        model_card: write a `README.md` model card from the package template.
        no_tokenizer: convert without subword files (dictionary only: `encode(..., pretokenized=True)`), as the
            CLI's `--no-tokenizer`. By default BPE or SentencePiece files are required: without them `convert`
            raises `ValueError` (a directory without tokenizer only fails later, on the first raw text).
        overwrite: replace a non-empty `out_dir`.
        language: the FLORES-200 code of a LASER3 student's language, recorded as `language` in `config.json` (a
            model set routes that language to it); default: read from a file name `laser3-LANG.v1.pt`.
        laser2_punct_lang: a SentencePiece model's punctuation rules for every sentence (see
            [`~text_tokenizer.LaserTextPipeline`]): `"en"` is laser_encoders' (LASER3 students always get it; the
            model set `hf-laser download` makes gives it to LASER2 too); None, each sentence's language (LASER's
            own `embed.sh`).

    Returns:
        The output directory, loadable with `AutoModel.from_pretrained` and `AutoTokenizer.from_pretrained`.

    Raises:
        ValueError: [`NotALaserCheckpoint`], [`TokenizerMismatch`] or another problem, with the fix in the message.
        FileNotFoundError: a file that is not there.
    """
    bpe = bpe_codes is not None or bpe_vocab is not None
    spm = spm_model is not None or spm_vocab is not None
    if bpe and spm:
        raise ValueError("give either --bpe-codes/--bpe-vocab (LASER1) or --spm-model/--spm-vocab (LASER2), not both")
    if bpe and (bpe_codes is None or bpe_vocab is None):
        raise ValueError("LASER1 conversion needs both --bpe-codes and --bpe-vocab")
    if spm and spm_model is None:
        raise ValueError("LASER2 conversion needs --spm-model")
    if (bpe or spm) and no_tokenizer:
        raise ValueError("--no-tokenizer (no_tokenizer=True) contradicts the subword files given; drop one")
    if not (bpe or spm) and not no_tokenizer:
        raise ValueError("a tokenizer is required: give --bpe-codes and --bpe-vocab (LASER1) or --spm-model "
                         "[--spm-vocab] (LASER2), or --no-tokenizer (no_tokenizer=True) for a dictionary-only "
                         "directory that takes pre-tokenized input only")
    for f in (bpe_codes, bpe_vocab, spm_model, spm_vocab):
        if f is not None and not Path(f).is_file():
            raise FileNotFoundError(f"file not found: {f}")
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, overwrite)
    language = student_language(checkpoint_path, language)
    if bpe and is_laser3_file(checkpoint_path):
        raise ValueError(f"{checkpoint_path} is a LASER3 transformer checkpoint: it takes SentencePiece files "
                         "(--spm-model, --spm-vocab), not BPE ones")
    if spm and is_laser3_file(checkpoint_path):
        return _convert_laser3(Path(checkpoint_path), out_dir, spm_model=spm_model, spm_vocab=spm_vocab,
                               model_card=model_card, no_tokenizer=no_tokenizer, language=language)

    checkpoint = load_laser_checkpoint(checkpoint_path)
    check_tokenizer_files(checkpoint["dictionary"], bpe_vocab=bpe_vocab, spm_model=spm_model, spm_vocab=spm_vocab)
    model = model_from_checkpoint(checkpoint)
    if language is not None:
        model.config.language = language
    with _staged_directory(out_dir) as tmp_dir:
        _save_quietly(model, tmp_dir)
        if bpe or spm:
            save_tokenizer_files(
                tmp_dir,
                checkpoint["dictionary"],
                bpe_codes=Path(bpe_codes) if bpe_codes else None,
                bpe_vocab=Path(bpe_vocab) if bpe_vocab else None,
                spm_model=Path(spm_model) if spm_model else None,
                spm_vocab=Path(spm_vocab) if spm_vocab else None,
                # a LASER3 BiLSTM student runs under laser_encoders, whose tokenizer uses English punctuation rules
                laser2_punct_lang=laser2_punct_lang or ("en" if spm and language is not None else None),
            )
        else:
            # No subword model given: the dictionary still lets `encode(..., pretokenized=True)` work.
            with open(tmp_dir / "vocab.json", "w", encoding="utf-8") as f:
                json.dump(checkpoint["dictionary"], f, ensure_ascii=False)
        if model_card:
            write_model_card(
                tmp_dir,
                model_name=out_dir.name,
                base_model=Path(checkpoint_path).name,
                tokenizer="SentencePiece (LASER2)" if spm else "Moses + fastBPE (LASER1)" if bpe
                else "none (dictionary only)",
            )
    return out_dir


def is_laser3_file(path: str | Path) -> bool:
    """Whether the file is a LASER3 transformer checkpoint: its configuration is an `argparse.Namespace` or omegaconf
    objects (laser_encoders reads `cfg["model"]` by attribute, so every LASER3 checkpoint it loads has one), which a
    LASER1/2 checkpoint never holds. Reads the pickle's global names only, without unpickling."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    verify_zip_crc(path)
    if not_a_torch_file(path):
        return False
    try:  # the opcodes only, both of torch's formats (zip and legacy)
        names = scan_checkpoint(path)
    except NotALaser3Checkpoint as err:  # refused: by the LASER3 reader (its message) when it names LASER3's types
        names = getattr(err, "names", set())
    except (OSError, zipfile.BadZipFile, EOFError, ValueError):  # not a torch file: load_laser_checkpoint says so
        return False
    return any(n == "argparse.Namespace" or n.startswith(("omegaconf.", "fairseq.")) for n in names)


LASER3_FILE_NAME = re.compile(r"^laser3-([a-z]{3}_[A-Z][a-z]{3})\.v\d+\.pt$")


def student_language(checkpoint_path, language: str | None) -> str | None:
    """The code to record for a student (FLORES-200, or `xxx_Scrp` outside it: [`~languages.student_code`]):
    `language` checked, else read from a `laser3-LANG.v1.pt` file name, else None (a LASER1/2 model: the default of
    a model set)."""

    if language is None:
        match = LASER3_FILE_NAME.match(Path(checkpoint_path).name)
        return match.group(1) if match and is_flores_code(match.group(1)) else None
    try:
        return student_code(language)
    except ValueError as err:
        raise ValueError(f"--language: {err}") from None


def _convert_laser3(path: Path, out_dir: Path, *, spm_model, spm_vocab, model_card: bool, no_tokenizer: bool,
                    language: str | None) -> Path:
    """`convert` for a LASER3 transformer checkpoint (see the module docstring)."""

    if spm_vocab is None:
        raise ValueError(f"{path} is a LASER3 transformer checkpoint: its dictionary is the .cvocab that comes with "
                         "it (--spm-vocab; laser2.cvocab for students without their own, as laser_encoders uses)")
    try:
        checkpoint = load_fairseq_checkpoint(path)
        if "model" not in checkpoint or "cfg" not in checkpoint:
            raise NotALaser3Checkpoint(f"{path} is not {LASER3_EXPECTED_FORMAT}; found {sorted(checkpoint)}")
        state = encoder_state(path, checkpoint["model"])
        values = laser3_model_config(path, checkpoint["cfg"], state)
    except NotALaser3Checkpoint as err:  # the converter's one error type for a checkpoint it cannot take
        raise NotALaserCheckpoint(str(err)) from None
    _check_state(path, state)
    with_mask = any(k in checkpoint["model"] for k in ("encoder.layer_norm.weight", "layer_norm.weight"))
    try:
        dictionary = fairseq_dictionary(spm_vocab, with_mask)
    except (ValueError, UnicodeDecodeError) as err:
        raise TokenizerMismatch(f"{spm_vocab} is not a fairseq dictionary ('piece count' lines): {err}") from err
    if len(dictionary) != values["vocab_size"]:
        raise TokenizerMismatch(
            f"{spm_vocab} gives a dictionary of {len(dictionary)} entries (<s> <pad> </s> <unk>, its pieces"
            f"{', <mask>' if with_mask else ''}) but the checkpoint's embeddings have {values['vocab_size']} rows: "
            "the original would fail to load it with this file. Give the .cvocab that came with this checkpoint "
            "(laser2.cvocab for students without their own)")
    config = LaserConfig(**values, **({"language": language} if language else {}))
    model = LaserModel(config)
    expected = model.state_dict()
    unexpected, missing = sorted(set(state) - set(expected)), sorted(set(expected) - set(state))
    if unexpected or missing:
        raise NotALaserCheckpoint(f"{path}: the weights do not match the configuration (as the original would load "
                                  f"them): missing {missing[:8]}, unexpected {unexpected[:8]}")
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise NotALaserCheckpoint(f"{path}: {key} has shape {tuple(tensor.shape)}, the configuration asks for "
                                      f"{tuple(expected[key].shape)}")
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    model.eval()
    with _staged_directory(out_dir) as tmp_dir:
        _save_quietly(model, tmp_dir)
        if spm_model is not None and not no_tokenizer:
            save_tokenizer_files(tmp_dir, dictionary, spm_model=Path(spm_model), spm_vocab=Path(spm_vocab),
                                 laser2_punct_lang="en")
        else:
            with open(tmp_dir / "vocab.json", "w", encoding="utf-8") as f:
                json.dump(dictionary, f, ensure_ascii=False)
        if model_card:
            write_model_card(tmp_dir, model_name=out_dir.name, base_model=path.name,
                             tokenizer="SentencePiece (LASER3, laser_encoders' LaserTokenizer)" if spm_model
                             else "none (dictionary only)")
    return out_dir


def _save_quietly(model, directory: Path) -> None:
    """`model.save_pretrained(directory)` without transformers' "Writing model shards" bar (one small file)."""

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(directory)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


@contextmanager
def _staged_directory(out_dir: Path):
    """A temporary directory beside `out_dir` to write the conversion into; moved into place (with the umask's
    permissions) when the block ends without an error, removed otherwise: a failed conversion leaves nothing."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        yield tmp_dir
        _apply_umask(tmp_dir)
        _replace_dir(tmp_dir, out_dir)
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)


def _apply_umask(directory: Path) -> None:
    """Gives a directory made by `tempfile.mkdtemp` (0700) and its files the permissions of any new file (0777 /
    0666 less the umask), as `mkdir` would have."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.rglob("*"):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


if __name__ == "__main__":  # `python -m hf_laser.checkpoints.convert`: the command line's `hf-laser convert`
    from hf_laser.commands.convert import main

    sys.exit(main())
