"""Parallel text into training batches: preprocessing into a memory-mapped dataset, and the token-
budget batches drawn from it."""
