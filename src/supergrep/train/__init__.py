"""Training: config, data pipeline, losses, the backend-neutral loop, checkpoints."""
