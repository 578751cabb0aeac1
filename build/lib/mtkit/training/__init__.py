"""Training a model: one update and the loop, the loss, schedule and precision, validation,
checkpoints and their averaging, and the run directory."""
