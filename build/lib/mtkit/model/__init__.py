"""The Transformer of the paper, its kernels and KV cache, and the self-contained model files that
hold it."""
