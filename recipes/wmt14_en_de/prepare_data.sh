#!/usr/bin/env bash
# WMT14 English-German for the paper's recipes: needs a network, ~1.5 GB of downloads and sacrebleu.
#   recipes/wmt14_en_de/prepare_data.sh [OUT_DIR]      (default: data/wmt14_en_de)
# Training: Europarl v7, Common Crawl and News Commentary v9 (4.5M pairs), each kept as a corpus of
# its own (NAME.en/NAME.de, joined by run.sh's preprocess); valid: newstest2013; test: newstest2014
# (sacrebleu's wmt14/full), so BLEU is computed on detokenized raw text.
set -euo pipefail
out="${1:-data/wmt14_en_de}"
mkdir -p "$out/download"
cd "$out"
fetch() { [ -s "download/$(basename "$1")" ] || curl -fL --retry 3 -o "download/$(basename "$1")" "$1"; }
fetch https://www.statmt.org/europarl/v7/de-en.tgz
fetch https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz
fetch https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz
for archive in download/*.tgz; do tar -xzf "$archive" -C download; done
for pair in europarl:download/training/europarl-v7.de-en commoncrawl:download/commoncrawl.de-en \
            news-commentary:download/training/news-commentary-v9.de-en; do
  cp "${pair#*:}.en" "${pair%%:*}.en"
  cp "${pair#*:}.de" "${pair%%:*}.de"
done
sacrebleu -t wmt13 -l en-de --echo src > valid.en
sacrebleu -t wmt13 -l en-de --echo ref > valid.de
sacrebleu -t wmt14/full -l en-de --echo src > test.en
sacrebleu -t wmt14/full -l en-de --echo ref > test.de
wc -l europarl.en commoncrawl.en news-commentary.en valid.en test.en
