"""The trainer runtime: runs a TrainJob's Ray Train loop inside the Ray cluster."""
