#!/usr/bin/env bash
# IWSLT14 De->En: recipes/iwslt14_de_en/run.sh [OUT_DIR]   (data: recipes/iwslt14_de_en/prepare_data.sh)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-runs/iwslt14_de_en}"
data="${DATA:-data/iwslt14_de_en}"
mkdir -p "$out"
mtkit train-tokenizer -i "$data/train.de" -i "$data/train.en" -o "$out/tokenizer.json" --vocab-size 10000
mtkit preprocess -s de -t en --train "$data/train" --valid "$data/valid" --test "$data/test" \
  --tokenizer "$out/tokenizer.json" -o "$out/data-bin" --force
mtkit train -d "$out/data-bin" -o "$out/run" -c "$here/config.yaml" --force
mtkit average "$out/run" --last 5 -o "$out/model.pt"
mtkit evaluate -m "$out/model.pt" --src "$data/test.de" --ref "$data/test.en" --beam 5 --lenpen 1.0
