"""Training and evaluation recipes built on transformers.Trainer."""
