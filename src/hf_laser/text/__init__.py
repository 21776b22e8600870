"""Text to ids: the LASER preprocessing (Moses rules and their data, jieba / MeCab, romanisation), BPE and
SentencePiece, the tokenizer classes, language codes and language detection."""
