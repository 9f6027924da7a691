"""Pre-training: optimizers and schedules, strategies, the orbit trainer, checkpoints."""
