#!/usr/bin/env bash
# The paper's WMT14 En-De recipe on one machine with GPUS GPUs (default 8):
#   recipes/wmt14_en_de/run.sh base|big [OUT_DIR]
# Data first: recipes/wmt14_en_de/prepare_data.sh data/wmt14_en_de
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
size="${1:?base or big}"
out="${2:-runs/wmt14_en_de_$size}"
data="${DATA:-data/wmt14_en_de}"
gpus="${GPUS:-8}"
keep=$([ "$size" = big ] && echo 20 || echo 5)
mkdir -p "$out"
[ -s "$out/tokenizer.json" ] || mtkit train-tokenizer -i "$data/train.en" -i "$data/train.de" -o "$out/tokenizer.json" --vocab-size 37000
[ -d "$out/data-bin" ] || mtkit preprocess -s en -t de --train "$data/train" --valid "$data/valid" --test "$data/test" \
  --tokenizer "$out/tokenizer.json" -o "$out/data-bin" --max-len 250 --max-ratio 2.5
# 8 GPUs x max_tokens 6400 = the paper's batch; with fewer GPUs, keep GPUS x update_freq = 8.
torchrun --standalone --nproc_per_node="$gpus" "$(command -v mtkit)" train -d "$out/data-bin" -o "$out/run" \
  -c "$here/$size.yaml" --set train.update_freq=$((8 / gpus))
mtkit average "$out/run" --last "$keep" -o "$out/model.pt"
mtkit evaluate -m "$out/model.pt" --src "$data/test.en" --ref "$data/test.de" --beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50
