#!/usr/bin/env bash
# IWSLT14 German-English (TED talks, ~160k training pairs): needs a network.
#   recipes/iwslt14_de_en/prepare_data.sh [OUT_DIR]      (default: data/iwslt14_de_en)
# Follows fairseq's prepare-iwslt14.sh split: valid = every 23rd training pair; test = the
# concatenated IWSLT14 dev2010, tst2010-2012 sets. Raw (untokenized) text: mtkit tokenizes itself.
set -euo pipefail
out="${1:-data/iwslt14_de_en}"
url="${IWSLT14_URL:-http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz}"  # the copy fairseq uses
mkdir -p "$out"
cd "$out"
[ -s de-en.tgz ] || curl -fL --retry 3 -o de-en.tgz "$url"
tar -xzf de-en.tgz
strip_tags() { sed -e 's/<[^>]*>//g' -e 's/^\s*//' -e 's/\s*$//'; }
strip_train() { grep -v -e '<url>' -e '<talkid>' -e '<keywords>' -e '<speaker>' -e '<reviewer' -e '<translator' -e '<title>' -e '<description>' "$1" | strip_tags; }
strip_xml() { grep '<seg id' "$1" | strip_tags; }
for lang in de en; do
  strip_train "de-en/train.tags.de-en.$lang" > "all.$lang"
  awk 'NR % 23 != 0' "all.$lang" > "train.$lang"
  awk 'NR % 23 == 0' "all.$lang" > "valid.$lang"
  : > "test.$lang"
  for set in IWSLT14.TED.dev2010 IWSLT14.TEDX.dev2012 IWSLT14.TED.tst2010 IWSLT14.TED.tst2011 IWSLT14.TED.tst2012; do
    strip_xml "de-en/$set.de-en.$lang.xml" >> "test.$lang"
  done
done
wc -l train.de valid.de test.de
