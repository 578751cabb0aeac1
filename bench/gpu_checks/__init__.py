"""The parts of bench/gpu_check.py: the sections of its checks, and the steps of its --all run."""
