"""SONAR's text tokenizer: fairseq2's NLLB tokenizer (`fairseq2.models.nllb.tokenizer`, fairseq2 0.8) with the
language list of SONAR's text encoder card (`sonar/cards/text_sonar_basic_encoder.yaml`), giving fairseq2's ids.

What fairseq2 does, and what this module reproduces:

* `load_nllb_tokenizer` loads the SentencePiece model with the control symbols `__{lang}__` for each of the card's
  202 languages (in the card's order), then `<MINED_DATA>`, `<MMT_BT_DATA>`, `<SMT_BT_DATA>`, then `<pad>@0`. The
  native loader (fairseq2n `sp_model_proto_loader::add_control_symbols`) appends each symbol to the model's pieces
  and moves `<pad>` from the end to index 0. With NLLB's model (`<unk>` 0, `<s>` 1, `</s>` 2, no `<pad>`) the ids
  are: `<pad>` 0, SentencePiece id k at k + 1 (so `<unk>` 1, `<s>` 2, `</s>` 3), `__{langs[i]}__` at
  1 + n_pieces + i, the three internal symbols after them; vocabulary size 1 + n_pieces + 202 + 3 (256,206 for
  SONAR's 256,000 pieces).
* `create_encoder(lang=..., mode="source")` (the default) is a `SentencePieceEncoder` with prefix `[__lang__]` and
  suffix `[</s>]`: ids = [lang tag] + [k + 1 for k in the SentencePiece encoding of the text] + [3]. The text
  goes to SentencePiece as it is: its only normalisation is the model's own normaliser (NLLB: nmt_nfkc, whitespace
  collapsed), no lowercasing, no Moses rules; control-symbol strings in the text (`</s>`, `__eng_Latn__`) are plain
  text there (SentencePiece never matches control symbols), so they are here too.
* `TextToEmbeddingModelPipeline.predict` cuts every id sequence to the encoder's `max_seq_len` (514) ids,
  `ids[:514]`: the lang tag and 513 pieces, `</s>` dropped. This tokenizer truncates the same way by default
  (`truncation=True`, `max_length=514`); transformers' usual truncation (keep `</s>`, cut pieces) is not SONAR's.

Where transformers' NLLB tokenizer differs (transformers 5.25, where `NllbTokenizer` is the `tokenizers`
conversion of the SentencePiece model; measured on the 1,044 fixture lines of tests/fixtures/sonar by
tests/test_sonar.py): it uses fairseq's layout for the four special tokens (`<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3)
where fairseq2 has `<pad>` 0, `<unk>` 1, `<s>` 2, `</s>` 3 (the pieces' ids agree: k + 1); built from the .model file
alone its vocabulary has no language tags (a tag becomes `<unk>`); its vocabulary ends with `<mask>` rather than
fairseq2's three internal symbols; its pieces equal SentencePiece's on 1,041 of the 1,044 lines, the 3 others (blank
lines and a line ending in spaces) getting an extra final "▁"; and `truncation=True` keeps `</s>` where SONAR's
pipeline drops it. Use `SonarTokenizer` for SONAR.
"""

from __future__ import annotations

import os
import shutil

from transformers import PreTrainedTokenizer
from transformers.tokenization_utils_base import BatchEncoding, PaddingStrategy, TruncationStrategy

from ..checkpoints.integration_files import write_integration_files
from .sonar_text_tokenizer import (  # noqa: F401 (re-exported)
    DEFAULT_LANG,
    EOS,
    INTERNAL_SYMBOLS,
    MAX_LENGTH,
    PAD,
    SONAR_LANGS,
    VOCAB_FILES_NAMES,
    SonarTextTokenizer,
)

__all__ = ["INTERNAL_SYMBOLS", "MAX_LENGTH", "SONAR_LANGS", "SonarTextTokenizer", "SonarTokenizer"]

class SonarTokenizer(PreTrainedTokenizer):
    """transformers tokenizer for SONAR's text encoder: fairseq2's ids (see the module docstring).

    `tokenizer(lines, lang="fra_Latn", padding=True, return_tensors="pt")` gives `input_ids` `(batch, seq_len)`
    (`[__fra_Latn__] pieces [</s>]`, right-padded with 0) and `attention_mask`; `truncation` defaults to True and
    cuts each sequence to its first 514 ids as SONAR's pipeline does (`</s>` dropped when cut). The language is
    `lang=` of the call, else `tokenizer.src_lang` (default `eng_Latn`).
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "right"
    truncation_side = "right"

    def __init__(self, vocab_file, src_lang: str = DEFAULT_LANG, langs=None, bos_token="<s>", eos_token="</s>",
                 unk_token="<unk>", pad_token="<pad>", model_max_length: int = MAX_LENGTH, **kwargs):
        self._core = SonarTextTokenizer(vocab_file, langs=langs, default_lang=src_lang)
        self.vocab_file = os.fspath(vocab_file)
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(src_lang=src_lang, langs=list(langs) if langs is not None else None, bos_token=bos_token,
                         eos_token=eos_token, unk_token=unk_token, pad_token=pad_token,
                         model_max_length=model_max_length, **kwargs)

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        return self._core.vocab_size

    def __len__(self) -> int:
        return self._core.vocab_size

    @property
    def src_lang(self) -> str:
        return self._core.default_lang

    @src_lang.setter
    def src_lang(self, lang: str) -> None:
        self._core.default_lang = self._core.check_lang(lang)

    @property
    def langs(self) -> tuple[str, ...]:
        return self._core.langs

    def lang_id(self, lang: str) -> int:
        """The id of the tag `__{lang}__`."""
        return self._core.lang_ids[self._core.check_lang(lang)]

    def get_vocab(self) -> dict[str, int]:
        return {self._core.id_to_token(i): i for i in range(self._core.vocab_size)}

    def _convert_token_to_id(self, token: str) -> int:
        return self._core.token_to_id(token)

    def _convert_id_to_token(self, index: int) -> str:
        return self._core.id_to_token(int(index))

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self._core.sp.decode_pieces([t for t in tokens if t not in self.all_special_tokens
                                            and not (t.startswith("__") and t.endswith("__"))])

    def tokenize(self, text: str, **kwargs) -> list[str]:
        """The SentencePiece pieces of `text` (special-token strings in it are plain text, as in fairseq2)."""
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, expected str")
        return self._core.sp.encode(text, out_type=str)

    def _tokenize(self, text, **kwargs):
        return self.tokenize(text)

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        if token_ids_1 is not None:
            raise ValueError("SonarTokenizer encodes single sentences; pairs are not supported")
        return [self.lang_id(self.src_lang)] + list(token_ids_0) + [EOS]

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False):
        if already_has_special_tokens:
            return [1 if i in (PAD, EOS) or i > self._core.n_pieces else 0 for i in token_ids_0]
        return [1] + [0] * len(token_ids_0) + [1]

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 2

    # ------------------------------------------------------------------ encoding
    def __call__(self, text=None, *args, **kwargs) -> BatchEncoding:
        kwargs.setdefault("truncation", True)  # SONAR's pipeline always cuts to 514 ids
        return super().__call__(text, *args, **kwargs)

    def encode(self, text, lang: str | None = None, add_special_tokens: bool = True, truncation: bool = True,
               max_length: int | None = None, **kwargs) -> list[int]:
        """One line -> fairseq2's ids (cut to `max_length`, default 514, unless `truncation=False`)."""
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {sorted(kwargs)}")
        return self._core.encode(text, lang, truncation=truncation, max_length=max_length or self.model_max_length,
                                 add_special_tokens=add_special_tokens)

    def _encode_plus(self, text, text_pair=None, add_special_tokens: bool = True,
                     padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
                     truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
                     max_length: int | None = None, stride: int = 0, is_split_into_words: bool = False,
                     pad_to_multiple_of: int | None = None, padding_side: str | None = None, return_tensors=None,
                     return_token_type_ids: bool | None = None, return_attention_mask: bool | None = None,
                     return_overflowing_tokens: bool = False, return_special_tokens_mask: bool = False,
                     return_offsets_mapping: bool = False, return_length: bool = False, verbose: bool = True,
                     **kwargs) -> BatchEncoding:
        lang = kwargs.pop("lang", None) or kwargs.pop("src_lang", None)
        kwargs.pop("split_special_tokens", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {sorted(kwargs)}")
        if text_pair is not None or is_split_into_words:
            raise ValueError("SonarTokenizer encodes single sentences (str or a list of str)")
        if return_overflowing_tokens or return_offsets_mapping or stride:
            raise NotImplementedError("SonarTokenizer: overflowing tokens, offsets and stride are not supported")
        batched = not isinstance(text, str)
        texts = [text] if not batched else list(text)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text at position {i} is {type(t).__name__}, expected str")
        truncate = truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE
        limit = max_length if max_length is not None else self.model_max_length
        ids_list = [self._core.encode(t, lang, truncation=truncate, max_length=limit,
                                      add_special_tokens=add_special_tokens) for t in texts]
        lengths = [len(ids) for ids in ids_list]
        width = None
        if padding_strategy == PaddingStrategy.LONGEST:
            width = max(lengths, default=0)
        elif padding_strategy == PaddingStrategy.MAX_LENGTH:
            width = max(limit, max(lengths, default=0))
        if width is not None and pad_to_multiple_of and width % pad_to_multiple_of:
            width = (width // pad_to_multiple_of + 1) * pad_to_multiple_of
        side = padding_side or self.padding_side
        data: dict[str, list] = {"input_ids": [], "attention_mask": []}
        for ids in ids_list:
            pad = [PAD] * ((width or len(ids)) - len(ids))
            mask = [1] * len(ids)
            data["input_ids"].append(ids + pad if side == "right" else pad + ids)
            data["attention_mask"].append(mask + [0] * len(pad) if side == "right" else [0] * len(pad) + mask)
        if return_attention_mask is False:
            del data["attention_mask"]
        if return_token_type_ids:
            data["token_type_ids"] = [[0] * len(row) for row in data["input_ids"]]
        if return_special_tokens_mask:
            data["special_tokens_mask"] = [self.get_special_tokens_mask(row, already_has_special_tokens=True)
                                           for row in data["input_ids"]]
        if return_length:
            data["length"] = lengths
        if not batched:
            data = {k: v[0] for k, v in data.items()}
            return BatchEncoding(data, tensor_type=return_tensors, prepend_batch_axis=return_tensors is not None)
        return BatchEncoding(data, tensor_type=return_tensors)

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedTokenizer.save_pretrained`; next to a saved SONAR model it also completes the directory's
        integration files (`integration_files.py`)."""
        saved = super().save_pretrained(save_directory, *args, **kwargs)
        write_integration_files(save_directory)
        return saved

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary path ({save_directory}) should be a directory")
        out = os.path.join(save_directory, (f"{filename_prefix}-" if filename_prefix else "")
                           + VOCAB_FILES_NAMES["vocab_file"])
        if os.path.abspath(out) != os.path.abspath(self.vocab_file):
            shutil.copyfile(self.vocab_file, out)
        return (out,)
