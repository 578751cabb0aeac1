#!/usr/bin/env bash
# WMT14 English-German for the paper's recipes: needs a network, ~1.5 GB of downloads and sacrebleu.
#   recipes/wmt14_en_de/prepare_data.sh [OUT_DIR]      (default: data/wmt14_en_de)
# Training: Europarl v7 + Common Crawl + News Commentary v9 (4.5M pairs); valid: newstest2013;
# test: newstest2014 (sacrebleu's wmt14/full), so BLEU is computed on detokenized raw text.
set -euo pipefail
out="${1:-data/wmt14_en_de}"
mkdir -p "$out/download"
cd "$out"
fetch() { [ -s "download/$(basename "$1")" ] || curl -fL --retry 3 -o "download/$(basename "$1")" "$1"; }
fetch https://www.statmt.org/europarl/v7/de-en.tgz
fetch https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz
fetch https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz
for archive in download/*.tgz; do tar -xzf "$archive" -C download; done
: > train.en; : > train.de
for prefix in download/training/europarl-v7.de-en download/commoncrawl.de-en download/training/news-commentary-v9.de-en; do
  cat "$prefix.en" >> train.en
  cat "$prefix.de" >> train.de
done
sacrebleu -t wmt13 -l en-de --echo src > valid.en
sacrebleu -t wmt13 -l en-de --echo ref > valid.de
sacrebleu -t wmt14/full -l en-de --echo src > test.en
sacrebleu -t wmt14/full -l en-de --echo ref > test.de
wc -l train.en valid.en test.en
