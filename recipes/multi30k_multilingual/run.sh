#!/usr/bin/env bash
# Multi30k, one model for several directions: English into German, French and Czech (or, with
# --many-to-many, all 12 directions between en, de, fr and cs), raw text to BLEU per direction.
#
#   DATA=/path/to/multi30k recipes/multi30k_multilingual/run.sh [--quick | --gpu] [--out DIR] [--many-to-many]
#                    [--temperature T] [--low-resource LANG=FRACTION] [--set KEY=VALUE ...]
#
# DATA holds train/val/test2016 in .en .de .fr .cs (Multi30k is multi-way parallel: line i of every
# language is the same caption). The tokenizer is one joint BPE over the four languages with a tag
# per target (<2de> ...); every source starts with its target's tag (preprocess --lang-pairs). The
# model and training are the English->German recipe's (../multi30k_en_de/config.yaml: 90 minutes
# on 2 cores; --quick: 8 minutes; --gpu: 5 minutes of one CUDA GPU, with the English->German
# recipe's --gpu settings), its directions drawn at --temperature (default 1: as they come,
# here all the same size). The length penalty is the one of LENPENS with the best macro-average
# val BLEU; test2016 is evaluated once, per direction, with sacrebleu's signatures.
# --low-resource cs=0.1 trains English->Czech on the first 10% of the pairs only (a corpus of its
# own, DIR/raw-cs, with val and test2016 beside it, so that DATA=DIR/raw-cs ../multi30k_en_de/run.sh
# --src en --tgt cs trains the bilingual model to compare with).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="runs/multi30k_multilingual"
quick=0
gpu=0
pairs="en-de,en-fr,en-cs"
temperature=1
low=""
extra=()
lenpens=(${LENPENS:-0.6 1.0 1.4 1.8 2.2})
while [ $# -gt 0 ]; do
  case "$1" in --out|--temperature|--low-resource|--set) [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; } ;; esac
  case "$1" in
    --quick) quick=1 ;;
    --gpu) gpu=1 ;;
    --out) out="$2"; shift ;;
    --many-to-many) pairs="en-de,en-fr,en-cs,de-en,de-fr,de-cs,fr-en,fr-de,fr-cs,cs-en,cs-de,cs-fr" ;;
    --temperature) temperature="$2"; shift ;;
    --low-resource) low="$2"; shift ;;
    --set) extra+=(--set "$2"); shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "${DATA:-}" ] || { echo "run.sh: set DATA=/path/to/multi30k (train, val, test2016 in .en .de .fr .cs)" >&2; exit 2; }
[ $(( quick + gpu )) -le 1 ] || { echo "run.sh: --quick and --gpu are two modes; choose one" >&2; exit 2; }
if [ "$gpu" = 1 ] && ! python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "run.sh: --gpu needs a CUDA GPU, and torch sees none here" >&2
  exit 2
fi
mkdir -p "$out"

settings=(--set "train.sampling_temperature=$temperature")
if [ "$quick" = 1 ]; then  # the English->German recipe's quick settings
  settings+=(--set train.max_time=480 --set train.warmup=300 --set train.lr_schedule=inverse_sqrt
             --set model.dropout=0.1 --set train.label_smoothing=0.1 --set train.valid_every=400
             --set train.save_every=100 --set train.valid_max_sentences=100 --set train.keep_last=5)
  precision=$(python3 -c 'from mtkit.core.device import resolve_device, resolve_precision; print(resolve_precision("auto", resolve_device("auto")))' 2>/dev/null || echo unknown)
  if [ "$precision" = fp32 ]; then  # as the English->German recipe does there (its comments say why)
    echo "run.sh: this machine trains in fp32 (no bf16 instructions): quick mode trains transformer-narrow" >&2
    settings+=(--set model.preset=transformer-narrow --set model.dropout=0.0 --set train.max_tokens=1536
               --set train.lr_schedule=linear --set train.save_every=50)
  fi
fi
if [ "$gpu" = 1 ]; then  # the English->German recipe's --gpu settings (../multi30k_en_de/run.sh)
  settings+=(--set train.device=cuda --set train.max_time=300 --set train.max_tokens=8192 --set train.pack_length=128
             --set train.compile=true --set train.cuda_graphs=true)
fi
average_last=$(( quick ? 5 : 15 ))
targets=$(tr ',' '\n' <<< "$pairs" | cut -d- -f2 | sort -u)
tags=(); for lang in $targets; do tags+=(--tag "2$lang"); done
train_args=(--train "$DATA/train")
if [ -n "$low" ]; then  # LANG=FRACTION: en-LANG from the first FRACTION of the pairs, a corpus of its own
  lang="${low%%=*}"; fraction="${low#*=}"
  grep -qx "en-$lang" <<< "$(tr ',' '\n' <<< "$pairs")" && [ "$pairs" = en-de,en-fr,en-cs ] \
    || { echo "run.sh: --low-resource needs a direction en-LANG of the default pairs ($pairs)" >&2; exit 2; }
  cut="$out/raw-$lang"
  mkdir -p "$cut"
  lines=$(python3 -c "import sys; n = sum(1 for _ in open(sys.argv[1])); print(max(1, round(n * float(sys.argv[2]))))" \
    "$DATA/train.en" "$fraction")
  for l in en "$lang"; do
    head -n "$lines" "$DATA/train.$l" > "$cut/train.$l"
    for split in val test2016; do ln -sf "$(cd "$DATA" && pwd)/$split.$l" "$cut/$split.$l"; done
  done
  others=$(tr ',' '\n' <<< "$pairs" | grep -vx "en-$lang" | paste -sd, -)
  train_args=(--train "main=$DATA/train" --pairs "main=$others" --train "$lang=$cut/train" --pairs "$lang=en-$lang")
  echo "run.sh: en-$lang trains on $lines pairs ($cut)" >&2
fi
inputs=()  # the tokenizer learns from the text the model trains on (the cut side's, with --low-resource)
for l in en de fr cs; do
  if [ -n "$low" ] && [ "$l" = "$lang" ]; then inputs+=(-i "$cut/train.$l"); else inputs+=(-i "$DATA/train.$l"); fi
done

mtkit train-tokenizer "${inputs[@]}" -o "$out/tokenizer.json" --vocab-size 16000 --split-punctuation "${tags[@]}"
mtkit preprocess --lang-pairs "$pairs" "${train_args[@]}" --valid "$DATA/val" --test "$DATA/test2016" \
  --tokenizer "$out/tokenizer.json" -o "$out/data-bin" --force
mtkit train -d "$out/data-bin" -o "$out/run" -c "$here/../multi30k_en_de/config.yaml" --force "${settings[@]}" "${extra[@]}"
kept=$(find "$out/run/checkpoints" -name 'step_*.pt' | wc -l)
mtkit average "$out/run" --last $(( kept < average_last ? kept : average_last )) -o "$out/model.pt"

for lenpen in "${lenpens[@]}"; do
  bleu=$(mtkit evaluate -m "$out/model.pt" --test "$DATA/val" --lang-pairs "$pairs" --lenpen "$lenpen" \
    --metrics bleu --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["macro"]["bleu"]["score"])')
  printf '%s\t%s\n' "$lenpen" "$bleu"
done > "$out/val_lenpen.tsv.tmp"
mv "$out/val_lenpen.tsv.tmp" "$out/val_lenpen.tsv"
lenpen=$(sort -s -t $'\t' -k2,2gr "$out/val_lenpen.tsv" | head -n 1 | cut -f 1)
echo "lenpen $lenpen: the best macro-average val BLEU of $(tr '\t\n' '= ' < "$out/val_lenpen.tsv")" >&2
mtkit evaluate -m "$out/model.pt" --test "$DATA/test2016" --lang-pairs "$pairs" --lenpen "$lenpen" --json \
  > "$out/test2016.json.tmp"
mv "$out/test2016.json.tmp" "$out/test2016.json"
python3 - "$out/test2016.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for name, scores in [*report["directions"].items(), ("macro", report["macro"])]:
    print(f"test2016 {name}: BLEU {scores['bleu']['score']:.2f} chrF {scores['chrf']['score']:.2f} TER {scores['ter']['score']:.2f}")
print(f"BLEU: {next(iter(report['directions'].values()))['bleu']['signature']}")
PY
echo "model: $out/model.pt   scores: $out/test2016.json"
