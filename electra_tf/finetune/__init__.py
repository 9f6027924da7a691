"""Fine-tuning the discriminator: tasks and readers, features, heads, metrics, the runner."""
