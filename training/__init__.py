"""Training LASER encoders from parallel corpora with Accelerate (`accelerate launch training/train.py`)."""
