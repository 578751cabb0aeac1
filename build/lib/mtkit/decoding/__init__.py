"""Searching a model for the best target ids: greedy search, sampling and beam search, their rules
and constraints, ensembles, and steps replayed as CUDA graphs."""
