"""Defaults shared by the library and the command line (this module imports nothing: `hf-laser --help` shows them
without importing torch)."""

DEFAULT_MAX_TOKENS = 12000  # the original SentenceEncoder's token budget per batch
# Longer sentences are cut (see `LaserEncoder.encode_ids`). oneDNN's CPU LSTM cannot run one sequence of
# tokens x hidden_size >= ~1.33e8 ("could not create a primitive": 260k tokens at LASER's hidden size 512, measured
# with torch 2.13 at 1-8 threads), and memory grows with the length; 100k keeps hidden sizes up to 1024 clear of it.
DEFAULT_MAX_SENTENCE_TOKENS = 100_000
DEFAULT_CHUNK_LINES = 100_000  # lines `encode_file` holds in memory at a time
MODEL_SET_FILE = "laser_model_set.json"  # the file that makes a directory a model set (model_set.py)
