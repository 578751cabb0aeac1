"""Text in, text out: lines translated in pieces, the output lines and their word alignments,
forced-decoding scores, sacrebleu evaluation, and pictures (attention heatmaps, training curves)."""
