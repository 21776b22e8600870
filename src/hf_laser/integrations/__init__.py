"""hf_laser inside other libraries: transformers pipelines, sentence-transformers, MTEB."""
