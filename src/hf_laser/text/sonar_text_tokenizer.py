"""SONAR's text tokenizer without transformers: lines -> fairseq2's ids (`SonarTextTokenizer`, on `sentencepiece`
alone), SONAR's language tags and limits. `tokenization_sonar.py` (the transformers tokenizer) is built on it, and
`LaserEncoder` uses it directly (`sonar_languages.py`), so that loading it imports no transformers. What fairseq2
computes, and how this reproduces it: `tokenization_sonar.py`'s docstring.
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_LANG", "INTERNAL_SYMBOLS", "MAX_LENGTH", "SONAR_LANGS", "SonarTextTokenizer", "VOCAB_FILES_NAMES"]

# sonar/cards/text_sonar_basic_encoder.yaml, tokenizer_config.langs, in the card's order (the tags' ids follow it)
SONAR_LANGS: tuple[str, ...] = tuple("""
ace_Arab ace_Latn acm_Arab acq_Arab aeb_Arab afr_Latn ajp_Arab aka_Latn amh_Ethi apc_Arab arb_Arab ars_Arab ary_Arab
arz_Arab asm_Beng ast_Latn awa_Deva ayr_Latn azb_Arab azj_Latn bak_Cyrl bam_Latn ban_Latn bel_Cyrl bem_Latn ben_Beng
bho_Deva bjn_Arab bjn_Latn bod_Tibt bos_Latn bug_Latn bul_Cyrl cat_Latn ceb_Latn ces_Latn cjk_Latn ckb_Arab crh_Latn
cym_Latn dan_Latn deu_Latn dik_Latn dyu_Latn dzo_Tibt ell_Grek eng_Latn epo_Latn est_Latn eus_Latn ewe_Latn fao_Latn
pes_Arab fij_Latn fin_Latn fon_Latn fra_Latn fur_Latn fuv_Latn gla_Latn gle_Latn glg_Latn grn_Latn guj_Gujr hat_Latn
hau_Latn heb_Hebr hin_Deva hne_Deva hrv_Latn hun_Latn hye_Armn ibo_Latn ilo_Latn ind_Latn isl_Latn ita_Latn jav_Latn
jpn_Jpan kab_Latn kac_Latn kam_Latn kan_Knda kas_Arab kas_Deva kat_Geor knc_Arab knc_Latn kaz_Cyrl kbp_Latn kea_Latn
khm_Khmr kik_Latn kin_Latn kir_Cyrl kmb_Latn kon_Latn kor_Hang kmr_Latn lao_Laoo lvs_Latn lij_Latn lim_Latn lin_Latn
lit_Latn lmo_Latn ltg_Latn ltz_Latn lua_Latn lug_Latn luo_Latn lus_Latn mag_Deva mai_Deva mal_Mlym mar_Deva min_Latn
mkd_Cyrl plt_Latn mlt_Latn mni_Beng khk_Cyrl mos_Latn mri_Latn zsm_Latn mya_Mymr nld_Latn nno_Latn nob_Latn npi_Deva
nso_Latn nus_Latn nya_Latn oci_Latn gaz_Latn ory_Orya pag_Latn pan_Guru pap_Latn pol_Latn por_Latn prs_Arab pbt_Arab
quy_Latn ron_Latn run_Latn rus_Cyrl sag_Latn san_Deva sat_Beng scn_Latn shn_Mymr sin_Sinh slk_Latn slv_Latn smo_Latn
sna_Latn snd_Arab som_Latn sot_Latn spa_Latn als_Latn srd_Latn srp_Cyrl ssw_Latn sun_Latn swe_Latn swh_Latn szl_Latn
tam_Taml tat_Cyrl tel_Telu tgk_Cyrl tgl_Latn tha_Thai tir_Ethi taq_Latn taq_Tfng tpi_Latn tsn_Latn tso_Latn tuk_Latn
tum_Latn tur_Latn twi_Latn tzm_Tfng uig_Arab ukr_Cyrl umb_Latn urd_Arab uzn_Latn vec_Latn vie_Latn war_Latn wol_Latn
xho_Latn ydd_Hebr yor_Latn yue_Hant zho_Hans zho_Hant zul_Latn
""".split())
INTERNAL_SYMBOLS = ("<MINED_DATA>", "<MMT_BT_DATA>", "<SMT_BT_DATA>")
MAX_LENGTH = 514  # SONAR's encoder: max_seq_len 512 + pad_idx 1 + 1 (`SonarTextEncoderFactory`, `_from_fairseq`)
DEFAULT_LANG = "eng_Latn"
VOCAB_FILES_NAMES = {"vocab_file": "sentencepiece.bpe.model"}
PAD, UNK, BOS, EOS = 0, 1, 2, 3


class SonarTextTokenizer:
    """Lines -> fairseq2's ids, with nothing but `sentencepiece` (see the module docstring)."""

    def __init__(self, spm_model_file: str | os.PathLike, langs=None, default_lang: str = DEFAULT_LANG):
        # lazy: sentencepiece is needed once a SONAR tokenizer is built (the encoder imports this module for any model)
        import sentencepiece as spm

        self.spm_model_file = os.fspath(spm_model_file)
        self.sp = spm.SentencePieceProcessor(model_file=self.spm_model_file)
        layout = (self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.pad_id())
        if layout != (0, 1, 2, -1):
            raise ValueError(f"{self.spm_model_file}: not in NLLB's layout (<unk> 0, <s> 1, </s> 2, no <pad>): "
                             f"unk/bos/eos/pad ids {layout}")
        self.langs = tuple(SONAR_LANGS if langs is None else langs)
        if len(set(self.langs)) != len(self.langs) or not all(isinstance(x, str) and x for x in self.langs):
            raise ValueError("langs must be distinct non-empty strings")
        self.n_pieces = self.sp.get_piece_size()
        self.lang_ids = {lang: 1 + self.n_pieces + i for i, lang in enumerate(self.langs)}
        self.check_lang(default_lang)
        self.default_lang = default_lang
        self.vocab_size = 1 + self.n_pieces + len(self.langs) + len(INTERNAL_SYMBOLS)

    def check_lang(self, lang: str) -> str:
        if lang not in self.lang_ids:
            raise ValueError(f"unknown language {lang!r}: SONAR's tags are FLORES-200 codes such as 'eng_Latn', "
                             f"'fra_Latn', 'zho_Hans' ({len(self.langs)} in all)")
        return lang

    def piece_ids(self, text: str) -> list[int]:
        """The SentencePiece encoding of `text`, in fairseq2's ids (k + 1)."""
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, expected str")
        return [k + 1 for k in self.sp.encode(text)]

    def encode(self, text: str, lang: str | None = None, truncation: bool = True,
               max_length: int | None = MAX_LENGTH, add_special_tokens: bool = True) -> list[int]:
        """`create_encoder(lang=lang)(text)` then the pipeline's `ids[:max_length]` (when `truncation`)."""
        ids = self.piece_ids(text)
        if add_special_tokens:
            ids = [self.lang_ids[self.check_lang(lang or self.default_lang)]] + ids + [EOS]
        if truncation and max_length is not None:
            ids = ids[:max_length]
        return ids

    def decode(self, ids) -> str:
        """fairseq2's `tokenizer.create_decoder()(ids)`: the text of fairseq2's ids. The pieces are SentencePiece's
        decoding (`<unk>` as " ⁇ ", `<s>` and `</s>` as nothing); `<pad>`, the language tags and the internal
        symbols are control symbols fairseq2 adds to the model, and decode to nothing as well, wherever they stand
        (checked against fairseq2 on every hypothesis of tests/fixtures/sonar/decoder.json.gz)."""
        pieces = []
        for index in ids:
            index = int(index)
            if not 0 <= index < self.vocab_size:
                raise ValueError(f"id {index} is outside the vocabulary (size {self.vocab_size})")
            if 1 <= index <= self.n_pieces:
                pieces.append(index - 1)
        return self.sp.decode(pieces)

    def id_to_token(self, index: int) -> str:
        if index == PAD:
            return "<pad>"
        if 1 <= index <= self.n_pieces:
            return self.sp.id_to_piece(index - 1)
        rest = index - 1 - self.n_pieces
        if 0 <= rest < len(self.langs):
            return f"__{self.langs[rest]}__"
        rest -= len(self.langs)
        if 0 <= rest < len(INTERNAL_SYMBOLS):
            return INTERNAL_SYMBOLS[rest]
        raise ValueError(f"id {index} is outside the vocabulary (size {self.vocab_size})")

    def token_to_id(self, token: str) -> int:
        if token == "<pad>":
            return PAD
        if token.startswith("__") and token.endswith("__") and token[2:-2] in self.lang_ids:
            return self.lang_ids[token[2:-2]]
        if token in INTERNAL_SYMBOLS:
            return 1 + self.n_pieces + len(self.langs) + INTERNAL_SYMBOLS.index(token)
        return self.sp.piece_to_id(token) + 1  # an unknown piece is <unk> (0 + 1)
