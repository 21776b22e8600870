"""The encoders: configuration, the transformers models, the BiLSTM in PyTorch and NumPy, the LASER3 transformer
encoder, and the plain weights read without torch."""
