#!/usr/bin/env bash
# Multi30k English->German sequence-level distillation: a teacher translates the training sources
# (mtkit distill), and a small student (transformer-student: 6 encoder and 2 decoder layers,
# d_model 256, FFN 1536, decoded greedily) trains on those translations.
#
#   recipes/multi30k_en_de/distill.sh [--out DIR] [--teacher RUN_SH_OUT] [--student-time SECONDS]
#
# DATA=/path/to/multi30k as for run.sh. The teacher is run.sh's output directory (its model*.pt,
# tokenizer.json and the lenpen it chose on val); without --teacher, `run.sh --quick` trains one in
# DIR/teacher. Three students train for --student-time seconds each (default 480, quick mode's
# budget), with quick mode's settings, on the teacher's tokenizer: on the original pairs, on the
# distilled pairs, and on both (the two corpora side by side). The distilled one is also exported
# to CTranslate2 int8. Printed at the end: each stage's test2016 BLEU, chrF and sentences/s (the
# teacher with beam 5 and its lenpen, the students greedy), also in DIR/summary.tsv.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="runs/multi30k_en_de_distill"
teacher=""
student_time=480
while [ $# -gt 0 ]; do
  case "$1" in --out|--teacher|--student-time) [ $# -ge 2 ] || { echo "distill.sh: $1 needs a value" >&2; exit 2; } ;; esac
  case "$1" in
    --out) out="$2"; shift ;;
    --teacher) teacher="$2"; shift ;;
    --student-time) student_time="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "distill.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$student_time" in ''|*[!0-9]*|0*) echo "distill.sh: --student-time needs a whole number of seconds, not '$student_time'" >&2; exit 2 ;; esac
[ -n "${DATA:-}" ] || { echo "distill.sh: set DATA=/path/to/multi30k (train, val, test2016 .en/.de)" >&2; exit 2; }
mkdir -p "$out"

if [ -z "$teacher" ]; then
  teacher="$out/teacher"
  [ -s "$teacher/test2016.json" ] || DATA="$DATA" "$here/run.sh" --quick --out "$teacher"
fi
teacher_models=()
for file in "$teacher"/model*.pt; do [ -e "$file" ] && teacher_models+=(-m "$file"); done
[ ${#teacher_models[@]} -gt 0 ] || { echo "distill.sh: $teacher has no model*.pt (run.sh's output?)" >&2; exit 2; }
[ -s "$teacher/val_lenpen.tsv" ] || { echo "distill.sh: $teacher has no val_lenpen.tsv (run.sh's output?)" >&2; exit 2; }
lenpen=$(sort -s -t $'\t' -k2,2gr "$teacher/val_lenpen.tsv" | head -n 1 | cut -f 1)

# The teacher's translations of the training sources, in shards that a rerun continues.
mtkit distill "${teacher_models[@]}" --src "$DATA/train.en" -o "$out/train.distilled.de" --beam 5 --lenpen "$lenpen"

corpus="$out/corpus"
mkdir -p "$corpus"
cp "$DATA/train.en" "$corpus/distilled.en"
cp "$out/train.distilled.de" "$corpus/distilled.de"
cat "$DATA/train.en" "$DATA/train.en" > "$corpus/both.en"
cat "$DATA/train.de" "$out/train.distilled.de" > "$corpus/both.de"

# Quick mode's settings (run.sh --quick), the student's shape.
settings=(--set model.preset=transformer-student --set train.max_time="$student_time" --set train.warmup=300
          --set train.lr_schedule=inverse_sqrt --set model.dropout=0.1 --set train.label_smoothing=0.1
          --set train.valid_every=400 --set train.save_every=100 --set train.valid_max_sentences=200
          --set train.keep_last=5)
student() {  # name, training pairs (a path without .en/.de)
  mtkit preprocess -s en -t de --train "$2" --valid "$DATA/val" --test "$DATA/test2016" \
    --tokenizer "$teacher/tokenizer.json" -o "$out/$1/data-bin" --force
  mtkit train -d "$out/$1/data-bin" -o "$out/$1/run" -c "$here/config.yaml" --force "${settings[@]}"
  local kept
  kept=$(find "$out/$1/run/checkpoints" -name 'step_*.pt' | wc -l)
  mtkit average "$out/$1/run" --last $(( kept < 5 ? kept : 5 )) -o "$out/$1/model.pt"
}
student original "$DATA/train"
student distilled "$corpus/distilled"
student both "$corpus/both"
mtkit export -m "$out/distilled/model.pt" --format ctranslate2 --quantization int8 -o "$out/distilled/ct2-int8" --force

score() {  # stage name, then evaluate's options: a row of summary.tsv
  local json
  json=$(mtkit evaluate --src "$DATA/test2016.en" --ref "$DATA/test2016.de" --metrics bleu,chrf --json "${@:2}")
  python3 -c 'import json, sys; r = json.loads(sys.argv[2]); print("\t".join([sys.argv[1], "%.2f" % r["bleu"]["score"], "%.2f" % r["chrf"]["score"], "%.1f" % r["sentences_per_s"]]))' "$1" "$json"
}
{
  printf 'stage\tBLEU\tchrF\tsentences/s\n'
  score "teacher, beam 5, lenpen $lenpen" "${teacher_models[@]}" --beam 5 --lenpen "$lenpen"
  score "student on the original pairs, greedy" -m "$out/original/model.pt" --beam 1
  score "student on the distilled pairs, greedy" -m "$out/distilled/model.pt" --beam 1
  score "student on both, greedy" -m "$out/both/model.pt" --beam 1
  score "distilled student, CTranslate2 int8, greedy" -m "$out/distilled/ct2-int8" --engine ctranslate2 --beam 1
} > "$out/summary.tsv.tmp"
mv "$out/summary.tsv.tmp" "$out/summary.tsv"
column -t -s $'\t' "$out/summary.tsv"
