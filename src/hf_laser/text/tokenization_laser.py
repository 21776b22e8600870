"""LASER tokenizer: preprocessing (``.tok``) -> fastBPE (LASER1) or SentencePiece (LASER2) -> ids.

:class:`LaserTokenizer` is the ``transformers`` tokenizer: ``tokenizer(texts, lang="fr", padding=True,
return_tensors="pt")`` gives ``input_ids`` (``</s>`` appended, no ``<s>``, unknown -> ``<unk>``) and
``attention_mask`` for :class:`~hf_laser.modeling.modeling_laser.LaserModel`, exactly the ids LASER's ``SentenceEncoder``
computes from a ``.bpe``/``.spm`` line (``line.strip().split()`` looked up in the dictionary), plus
``save_pretrained`` and the remote-code files.

It is built on :mod:`hf_laser.text.text_tokenizer`, which holds the layers usable without transformers (its public names
are re-exported here): :class:`LaserTextPipeline` (text -> ``.tok`` -> subword lines, what ``hf-laser tokenize`` runs),
:class:`~hf_laser.text.text_tokenizer.LaserTextTokenizer` (lines -> ids: ``encode_lines``, ``iter_tokenize_file``,
``resolve_lang``) and the order-preserving multiprocessing helpers (``num_proc``).  Files read and written use UTF-8
with ``errors="surrogateescape"`` and split lines on ``'\\n'`` only.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile

import numpy as np
from transformers import PreTrainedTokenizer
from transformers.tokenization_utils_base import BatchEncoding, PaddingStrategy, TruncationStrategy

from ..checkpoints.integration_files import write_integration_files
from .nonbreaking_prefixes import BUNDLE_FILE, bundle, use_bundle

# the transformers-free layers (LaserTextPipeline, LaserInputError, read_lines re-exported: this module was their home)
from .text_tokenizer import (  # noqa: F401
    SPIECE_UNDERLINE,
    VOCAB_FILES_NAMES,
    LaserInputError,
    LaserTextPipeline,
    LaserTextTokenizer,
    _check_pretokenized,
    check_lang_argument,
    check_texts,
    read_lines,
)

__all__ = [
    "LaserTextPipeline",
    "LaserTokenizer",
    "LaserInputError",
    "VOCAB_FILES_NAMES",
    "read_lines",
]


# ------------------------------------------------------------------------------ tokenizer
class LaserTokenizer(LaserTextTokenizer, PreTrainedTokenizer):
    """LASER tokenizer (LASER1: Moses preprocessing + fastBPE; LASER2: light preprocessing + SPM).

    Args:
        vocab_file: JSON ``{token: id}`` -- the checkpoint's ``dictionary`` (``<s>`` 0, ``<pad>`` 1,
            ``</s>`` 2, ``<unk>`` 3, then the subwords).
        bpe_codes_file, bpe_vocab_file: fastBPE codes and vocabulary (LASER1, ``*.fcodes`` /
            ``*.fvocab``).
        spm_model_file: SentencePiece model (LASER2, ``laser2.spm``).  Exactly one of
            ``bpe_codes_file`` / ``spm_model_file``.
        lang: default language (ISO 639-1 or -3 code, see :func:`hf_laser.text.preprocessing.normalize_lang`, or
            ``"auto"``), used by calls without ``lang`` (with a warning when their text looks like another
            language, see :meth:`resolve_lang`); can be overridden per call, or per sentence with a list.
        laser2_punct_lang: LASER2 only, see :class:`LaserTextPipeline`.
        mode: optional, ``"laser1"``/``"laser2"``; checked against the files given.

    Calls: ``tokenizer(texts, lang="fr", padding=True, return_tensors="pt")``;
    ``lang=[...]`` one code per text; ``lang="auto"`` detects the language of every text
    (:mod:`hf_laser.text.langid`); ``pretokenized=True`` (or ``"bpe"``) for text that already
    is BPE/SPM output (split on whitespace and looked up, as LASER's encoder does),
    ``pretokenized="tok"`` for already preprocessed ``.tok`` text; ``num_proc`` for big batches.
    ``input_ids`` end with ``</s>``, no ``<s>``.  Default padding side is right (LASER's
    ``SentenceEncoder`` right-pads); ``padding_side="left"`` works too.

    Build one from a LASER checkpoint with :meth:`from_laser_files`.
    """

    # + the Moses non-breaking prefixes, for the directory's remote code (nonbreaking_prefixes.py): optional
    vocab_files_names = {**VOCAB_FILES_NAMES, "nonbreaking_prefixes_file": BUNDLE_FILE}
    model_input_names = ["input_ids", "attention_mask"]
    # `save_pretrained` ships this file (and the modules it imports) and writes the `auto_map`, so the directory
    # loads with `AutoTokenizer.from_pretrained(dir, trust_remote_code=True)` where hf_laser is not installed
    padding_side = "right"
    truncation_side = "right"

    def __init__(
        self,
        vocab_file,
        bpe_codes_file=None,
        bpe_vocab_file=None,
        spm_model_file=None,
        lang: str = "en",
        laser2_punct_lang: str | None = None,
        mode: str | None = None,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        nonbreaking_prefixes_file=None,
        **kwargs,
    ):
        if nonbreaking_prefixes_file is not None:
            use_bundle(nonbreaking_prefixes_file)
        self._load_files(vocab_file, bpe_codes_file, bpe_vocab_file, spm_model_file, lang, laser2_punct_lang, mode,
                         {"bos_token": bos_token, "pad_token": pad_token, "eos_token": eos_token,
                          "unk_token": unk_token})
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        PreTrainedTokenizer.__init__(  # not super(): LaserTextTokenizer.__init__ is done by _load_files
            self,
            lang=lang,
            laser2_punct_lang=laser2_punct_lang,
            mode=self.mode,
            bos_token=bos_token,
            pad_token=pad_token,
            eos_token=eos_token,
            unk_token=unk_token,
            **kwargs,
        )

    # ------------------------------------------------------------------ construction helper
    @classmethod
    def from_laser_files(
        cls,
        dictionary: dict[str, int] | str | os.PathLike,
        *,
        bpe_codes: str | os.PathLike | None = None,
        bpe_vocab: str | os.PathLike | None = None,
        spm_model: str | os.PathLike | None = None,
        lang: str = "en",
        save_dir: str | os.PathLike | None = None,
        **kwargs,
    ) -> LaserTokenizer:
        """Build a tokenizer from a LASER checkpoint's parts (what the converter calls).

        Args:
            dictionary: ``torch.load(ckpt)["dictionary"]`` (``{token: id}``), or a path to a
                JSON file with it.
            bpe_codes, bpe_vocab: LASER1 ``*.fcodes`` / ``*.fvocab``.
            spm_model: LASER2 ``*.spm`` (give this *or* the BPE pair).
            lang: default language stored in the tokenizer config.
            save_dir: if given, ``save_pretrained(save_dir)`` is called (writes ``vocab.json``,
                ``bpe.fcodes`` + ``bpe.fvocab`` or ``spm.model``, ``tokenizer_config.json``).
            kwargs: further :class:`LaserTokenizer` arguments (e.g. ``laser2_punct_lang``).
        """
        tmp = None
        try:
            if isinstance(dictionary, (str, os.PathLike)):
                vocab_file = os.fspath(dictionary)
            else:
                tmp = tempfile.mkdtemp(prefix="laser-tok-")
                vocab_file = os.path.join(tmp, VOCAB_FILES_NAMES["vocab_file"])
                _write_vocab_json(vocab_file, dictionary)
            tok = cls(
                vocab_file,
                bpe_codes_file=bpe_codes,
                bpe_vocab_file=bpe_vocab,
                spm_model_file=spm_model,
                lang=lang,
                **kwargs,
            )
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        if save_dir is not None:
            tok.save_pretrained(save_dir)
        return tok

    # ------------------------------------------------------------------ vocab basics
    def _convert_token_to_id(self, token: str) -> int:
        return self.encoder.get(token, self._core.unk_id)

    def _convert_id_to_token(self, index: int) -> str:
        return self.decoder.get(index, str(self.unk_token))

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        if self.mode == "laser2":
            return "".join(tokens).replace(SPIECE_UNDERLINE, " ").strip()
        text = " ".join(tokens).replace("@@ ", "")
        return text[:-2] if text.endswith("@@") else text

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        if token_ids_1 is None:
            return list(token_ids_0) + [self.eos_token_id]
        return list(token_ids_0) + [self.eos_token_id] + list(token_ids_1) + [self.eos_token_id]

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False):
        if already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1, already_has_special_tokens=True)
        if token_ids_1 is None:
            return [0] * len(token_ids_0) + [1]
        return [0] * len(token_ids_0) + [1] + [0] * len(token_ids_1) + [1]

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 2 if pair else 1

    def tokenize(self, text: str, lang: str | None = None, pretokenized: bool | str = False, **kwargs) -> list[str]:
        """Text -> subword tokens (BPE pieces with ``@@`` / SPM pieces), as LASER's encoder splits them.

        Special-token strings in the text are not treated specially: LASER's preprocessing turns
        ``<s>`` into ``< s >`` like any other text.
        """
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, expected str")
        _check_pretokenized(pretokenized)
        if pretokenized in (True, "bpe"):
            return text.split()
        if pretokenized == "tok":
            tok = text
        else:
            tok = self.pipeline.preprocess([text], self.resolve_lang(lang, [text], n_texts=1))[0]
        return self.pipeline.subword_tokens([tok])[0]

    def _tokenize(self, text, **kwargs):
        return self.tokenize(text, **kwargs)

    # ------------------------------------------------------------------ __call__ fast path
    def __call__(self, text=None, *args, **kwargs) -> BatchEncoding:
        if text is None and kwargs.get("text_target") is None:
            raise TypeError("text at position 0 is NoneType, expected str or a list of str")
        return super().__call__(text, *args, **kwargs)

    def _encode_plus(
        self,
        text,
        text_pair=None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors=None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs,
    ) -> BatchEncoding:
        lang = kwargs.pop("lang", None)
        pretokenized = kwargs.pop("pretokenized", False)
        num_proc = kwargs.pop("num_proc", 1)
        kwargs.pop("split_special_tokens", None)
        if text_pair is not None:
            raise ValueError("LaserTokenizer encodes single sentences; text_pair is not supported")
        if return_offsets_mapping:
            raise NotImplementedError("return_offset_mapping is not available for LaserTokenizer")
        if return_overflowing_tokens:
            raise NotImplementedError("return_overflowing_tokens is not supported by LaserTokenizer")
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {sorted(kwargs)}")

        # input forms
        if text is None:
            raise TypeError("text at position 0 is NoneType, expected str")
        if is_split_into_words:
            # list of words (one sentence) or list of lists (batch): already tokenised words
            batched = isinstance(text, (list, tuple)) and len(text) > 0 and isinstance(text[0], (list, tuple))
            sents = text if batched else [text]
            texts = []
            for i, s in enumerate(sents):
                if not isinstance(s, (list, tuple)):
                    raise LaserInputError(f"text at position {i} is {type(s).__name__}, expected a list of words")
                check_texts(s)
                texts.append(" ".join(s))
            if pretokenized is False:
                pretokenized = "tok"
        elif isinstance(text, str):
            batched, texts = False, [text]
        elif isinstance(text, (list, tuple)):
            if text and isinstance(text[0], int):  # already ids
                batched, ids_list = False, [list(text)]
                texts = None
            elif text and isinstance(text[0], (list, tuple)) and text[0] and isinstance(text[0][0], int):
                batched, ids_list, texts = True, [list(t) for t in text], None
            else:
                batched, texts = True, list(text)
        else:
            raise LaserInputError(f"text at position 0 is {type(text).__name__}, expected str or a list of str")

        if texts is not None:
            check_texts(texts)
            lang = self.resolve_lang(lang, texts, pretokenized=pretokenized, n_texts=len(texts))
            ids_list = self.encode_lines(texts, lang, pretokenized=pretokenized, num_proc=num_proc)
            if not add_special_tokens:
                for ids in ids_list:
                    ids.pop()
        else:
            check_lang_argument(lang)  # ids need no language, but a wrong argument is still an error
            if add_special_tokens:
                ids_list = [ids + [self.eos_token_id] for ids in ids_list]

        # truncation (keeps </s> at the end)
        if truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None:
            keep = max_length - 1 if add_special_tokens else max_length
            if keep < 0:
                raise ValueError(f"max_length={max_length} leaves no room for </s>")
            side = self.truncation_side
            for i, ids in enumerate(ids_list):
                if len(ids) > max_length:
                    body = ids[:-1] if add_special_tokens else ids
                    body = body[:keep] if side == "right" else body[len(body) - keep :]
                    ids_list[i] = body + ([self.eos_token_id] if add_special_tokens else [])

        # padding
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        if return_token_type_ids is None:
            return_token_type_ids = "token_type_ids" in self.model_input_names
        side = padding_side if padding_side is not None else self.padding_side
        if side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {side!r}")
        lengths = [len(ids) for ids in ids_list]
        width = None
        if padding_strategy == PaddingStrategy.LONGEST:
            width = max(lengths, default=0)
        elif padding_strategy == PaddingStrategy.MAX_LENGTH and max_length is not None:
            width = max_length
        if width is not None and pad_to_multiple_of and width % pad_to_multiple_of:
            width = (width // pad_to_multiple_of + 1) * pad_to_multiple_of
        if width is None and len(set(lengths)) <= 1:
            width = lengths[0] if lengths else 0
        if verbose and self.model_max_length < 10**12 and any(n > self.model_max_length for n in lengths):
            self._eventual_warn_about_too_long_sequence([0] * max(lengths), max_length, verbose)

        if width is not None and all(n <= width for n in lengths):
            data = self._padded_arrays(
                ids_list, lengths, width, side, add_special_tokens, return_attention_mask,
                return_token_type_ids, return_special_tokens_mask,
            )
        else:  # ragged, nothing to pad: plain lists
            data = {"input_ids": ids_list}
            if return_attention_mask:
                data["attention_mask"] = [[1] * n for n in lengths]
            if return_token_type_ids:
                data["token_type_ids"] = [[0] * n for n in lengths]
            if return_special_tokens_mask:
                data["special_tokens_mask"] = [[0] * (n - 1) + [1] if add_special_tokens and n else [0] * n
                                               for n in lengths]
        if return_length:
            data["length"] = np.asarray(lengths, dtype=np.int64) if isinstance(data["input_ids"], np.ndarray) else lengths

        tensor_type = None if return_tensors is None else str(getattr(return_tensors, "value", return_tensors))
        if isinstance(data["input_ids"], np.ndarray):
            if tensor_type == "pt":
                # lazy: torch (the NumPy engine and the command line's start run without it)
                import torch

                return BatchEncoding({k: torch.from_numpy(v) for k, v in data.items()})
            if tensor_type == "np":
                return BatchEncoding(data)
            data = {k: v.tolist() for k, v in data.items()}
            if return_tensors is not None:  # another framework: let transformers convert
                return BatchEncoding(data, tensor_type=return_tensors)
        if not batched:
            data = {k: v[0] for k, v in data.items()}
            return BatchEncoding(data, tensor_type=return_tensors, prepend_batch_axis=return_tensors is not None)
        return BatchEncoding(data, tensor_type=return_tensors)

    def _padded_arrays(self, ids_list, lengths, width, side, add_special_tokens, attention_mask, token_type_ids,
                       special_tokens_mask) -> dict[str, np.ndarray]:
        """Pads in numpy (a batch of thousands of sentences pads in milliseconds)."""
        n_rows = len(ids_list)
        lens = np.asarray(lengths, dtype=np.int64).reshape(n_rows)
        pos = np.arange(width, dtype=np.int64)[None, :]
        real = pos < lens[:, None] if side == "right" else pos >= (width - lens)[:, None]
        input_ids = np.full((n_rows, width), self.pad_token_id, dtype=np.int64)
        input_ids[real] = np.fromiter(itertools.chain.from_iterable(ids_list), dtype=np.int64, count=int(lens.sum()))
        data = {"input_ids": input_ids}
        if attention_mask:
            data["attention_mask"] = real.astype(np.int64)
        if token_type_ids:
            data["token_type_ids"] = np.zeros((n_rows, width), dtype=np.int64)
        if special_tokens_mask:
            stm = (~real).astype(np.int64)
            if add_special_tokens:
                rows = np.nonzero(lens > 0)[0]
                last = lens[rows] - 1 if side == "right" else np.full(len(rows), width - 1)
                stm[rows, last] = 1
            data["special_tokens_mask"] = stm
        return data

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedTokenizer.save_pretrained`; next to a saved LASER model it also completes the directory's
        integration files (`integration_files.py`: `AutoTokenizer` in `config.json`, sentence-transformers)."""
        saved = super().save_pretrained(save_directory, *args, **kwargs)
        write_integration_files(save_directory)
        return saved

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary path ({save_directory}) should be a directory")
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        saved = []
        path = os.path.join(save_directory, prefix + VOCAB_FILES_NAMES["vocab_file"])
        _write_vocab_json(path, self.encoder)
        saved.append(path)
        for key, content in self._files.items():
            path = os.path.join(save_directory, prefix + VOCAB_FILES_NAMES[key])
            with open(path, "wb") as fh:
                fh.write(content)
            saved.append(path)
        if "bpe_codes_file" in self._files:  # the Moses tokenizer's prefixes, for remote code without the package
            path = os.path.join(save_directory, prefix + BUNDLE_FILE)
            with open(path, "w", encoding="utf-8", newline="\n") as fh:
                json.dump(bundle(), fh, ensure_ascii=False, indent=0, sort_keys=True)
            saved.append(path)
        return tuple(saved)


def _write_vocab_json(path, vocab: dict[str, int]) -> None:
    items = sorted(((str(k), int(v)) for k, v in vocab.items()), key=lambda kv: kv[1])
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
        fh.write(json.dumps(dict(items), ensure_ascii=False, indent=0))
        fh.write("\n")
