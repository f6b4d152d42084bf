"""Pure jitted train steps, sharding, checkpoints and training loops."""
