#!/usr/bin/env bash
# The paper's WMT14 En-De recipe on one machine with GPUS GPUs (default 8):
#   recipes/wmt14_en_de/run.sh base|big [OUT_DIR]
# Data first (a network needed there, not here): recipes/wmt14_en_de/prepare_data.sh data/wmt14_en_de
# DATA: a folder with one NAME.en/NAME.de pair per training corpus (CORPORA: their names) and
# valid.* and test.*; VOCAB: the joint BPE's size; TRAIN_ARGS: more `mtkit train` options (--set ...).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
size="${1:?base or big}"
out="${2:-runs/wmt14_en_de_$size}"
data="${DATA:-data/wmt14_en_de}"
gpus="${GPUS:-8}"
corpora=(${CORPORA:-europarl commoncrawl news-commentary})
keep=$([ "$size" = big ] && echo 20 || echo 5)
texts=(); train=()
for name in "${corpora[@]}"; do
  texts+=(-i "$data/$name.en" -i "$data/$name.de")
  train+=(--train "$name=$data/$name")
done
mkdir -p "$out"
[ -s "$out/tokenizer.json" ] || mtkit train-tokenizer "${texts[@]}" -o "$out/tokenizer.json" --vocab-size "${VOCAB:-37000}"
[ -d "$out/data-bin" ] || mtkit preprocess -s en -t de "${train[@]}" --valid "$data/valid" --test "$data/test" \
  --tokenizer "$out/tokenizer.json" -o "$out/data-bin" --max-len 250 --max-ratio 2.5
# 8 GPUs x max_tokens 6400 = the paper's batch; with fewer GPUs, keep GPUS x update_freq = 8.
# --auto-resume: rerunning this script after a crash continues the run.
torchrun --standalone --nproc-per-node="$gpus" -m mtkit train -d "$out/data-bin" -o "$out/run" \
  -c "$here/$size.yaml" --set train.update_freq=$((8 / gpus)) --auto-resume ${TRAIN_ARGS:-}
mtkit average "$out/run" --last "$keep" -o "$out/model.pt"
mtkit evaluate -m "$out/model.pt" --src "$data/test.en" --ref "$data/test.de" --beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50
