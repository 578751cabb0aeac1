#!/usr/bin/env bash
# Multi30k English->German, raw text to BLEU: train-tokenizer -> preprocess -> train -> average -> evaluate.
#
#   recipes/multi30k_en_de/run.sh [--quick | --gpu [--dry-run]] [--out DIR] [--src en --tgt de] [--models N]
#                                 [--sweep FILE|none] [--bpe-dropout P] [--average last|best]
#                                 [--no-split-punctuation] [--augment SHARES|none] [--set KEY=VALUE ...]
#
# DATA=/path/to/folder with train/val/test2016 .en/.de files; without DATA, files missing
# from DIR/raw are fetched from the public Multi30k release (needs a network).
# --set goes to `mtkit train`, after the recipe's settings. The length penalty is the one of
# LENPENS (default "0.6 1.0 1.4 1.8 2.2 2.6 3.0") with the best val BLEU; test2016 is decoded once.
# --models N trains N models at once (seeds 1..N, the cores shared among them) and decodes with
# their ensemble; the first one's progress is shown, the others log to DIR/trainI.log. The default
# is 2 (chosen on val: 39.75 against one model's 39.28), 1 with --quick (there two scored 28.60 on
# val against one's 31.77: in 8 minutes each of two makes 30% fewer updates, and that costs more).
# With several models, the second and later ones train on the pairs segmented with BPE-dropout P
# (10 samples, the same tokenizer): a second segmentation makes the ensemble differ more. The
# default is 0.05 (val 39.79; 0.1 gave 39.58, 0 gave 39.75); --bpe-dropout 0 trains all on one.
# Each model is the average of its last 15 checkpoints (config.yaml keeps 15; on val, in two runs,
# 39.61 and 39.79 against the last 5's 39.42 and 39.56), of its last 5 with --quick, and of all it
# saved when a shorter run (--set train.max_time=...) saved fewer. --average best averages instead
# the 15 (5) checkpoints with the best val BLEU: training keeps them (train.keep_best) beside the last
# ones; only validated checkpoints count (train.valid_every), so a run that overfits its corpus
# averages its best stretch, not its last.
# The tokenizer keeps every punctuation character a subword of its own (`mtkit train-tokenizer
# --split-punctuation`; val 40.58 against the three runs before it, 40.06 on average, and 32.70
# against 31.91 in quick mode); --no-split-punctuation trains it without.
# --augment SHARES: training pairs added again as people write them (`mtkit preprocess --augment`),
# by default spans=0.03,short=0.02,typos=0.01 (chosen on val in quick mode: 33.45 against 33.26
# without; with upper and title copies too, 30.84: translate re-cases ALL CAPS and Title Case for any
# model instead); none adds none.
# --sweep FILE trains the settings FILE lists side by side (one line each: NAME DATA KEY=VALUE...,
# DATA plain or dropout: the pairs as segmented, or their BPE-dropout samples; the settings go to
# mtkit train after the mode's own), each in DIR/sweep/NAME, and `mtkit choose` chooses on val how
# each run is averaged (its last or best 5 or 15 checkpoints), how many of the runs, best first,
# make the ensemble, and the length penalty (DIR/chosen/choice.json); test2016 is decoded once.
# --gpu: 200 s of one CUDA GPU instead of 90 minutes of the CPU, the sweep of gpu_sweep.txt (four
# settings trained at once: the GPU idles half of each update of one), packed rows of 128 tokens,
# 8,192-token batches, the compiled model replayed as CUDA graphs (docs/results/gpu.md); --sweep none
# trains --models N instead. --dry-run runs the --gpu mode's steps on the CPU (no CUDA, compilation
# or graphs), to check the script: with --set for tiny budgets (bench/gpu_check.py --device cpu).
# test2016 is also scored lowercased, as published Multi30k results are.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="runs/multi30k_en_de"
quick=0
gpu=0
average_last=15
src=en
tgt=de
models=default
bpe_dropout=0.05
average_by=last
tokenizer_options=(--split-punctuation)
augment="spans=0.03,short=0.02,typos=0.01"
extra=()
sweep=""
dry_run=0
average_given=0
lenpens=(${LENPENS:-0.6 1.0 1.4 1.8 2.2 2.6 3.0})
while [ $# -gt 0 ]; do
  case "$1" in --out|--src|--tgt|--models|--bpe-dropout|--average|--sweep|--augment|--set) [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; } ;; esac
  case "$1" in
    --quick) quick=1 ;;
    --gpu) gpu=1 ;;
    --out) out="$2"; shift ;;
    --src) src="$2"; shift ;;
    --tgt) tgt="$2"; shift ;;
    --models) models="$2"; shift ;;
    --bpe-dropout) bpe_dropout="$2"; shift ;;
    --average) average_by="$2"; average_given=1; shift ;;
    --sweep) sweep="$2"; shift ;;
    --augment) augment="$2"; shift ;;
    --dry-run) dry_run=1 ;;
    --split-punctuation) tokenizer_options=(--split-punctuation) ;;
    --no-split-punctuation) tokenizer_options=(--no-split-punctuation) ;;
    --set) extra+=(--set "$2"); shift ;;
    -h|--help) sed -n '2,42p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
refuse() { echo "run.sh: $1" >&2; exit 2; }
[ $(( quick + gpu )) -le 1 ] || refuse "--quick and --gpu are two modes; choose one"
[ "$dry_run" = 0 ] || [ "$gpu" = 1 ] || refuse "--dry-run runs the --gpu mode's steps on the CPU: give --gpu too"
if [ "$gpu" = 1 ] && [ "$dry_run" = 0 ] && ! python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  refuse "--gpu needs a CUDA GPU, and torch sees none here"
fi
[ "$gpu" = 0 ] || [ -n "$sweep" ] || sweep="$here/gpu_sweep.txt"
[ "$sweep" != none ] || sweep=""
sweep_names=(); sweep_data=(); sweep_settings=()
if [ -n "$sweep" ]; then  # checked whole before anything is written
  [ "$models" = default ] || refuse "--models N trains one setting N times; --sweep trains the settings its file lists"
  [ "$average_given" = 0 ] || refuse "with --sweep, mtkit choose tries each run's last and best checkpoints on val; --average is for the other modes"
  [ -f "$sweep" ] || refuse "--sweep $sweep: no such file"
  lineno=0
  while read -r name data settings_of_line || [ -n "$name" ]; do
    lineno=$(( lineno + 1 ))
    case "$name" in ''|'#'*) continue ;; esac
    where="$sweep, line $lineno"
    [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || refuse "$where: NAME takes letters, digits, '.', '_' and '-', not '$name'"
    case "$data" in plain|dropout) ;; *) refuse "$where: DATA is plain or dropout, not '$data'" ;; esac
    for setting in $settings_of_line; do
      [[ "$setting" == ?*=?* ]] || refuse "$where: settings are KEY=VALUE, not '$setting'"
    done
    for seen in "${sweep_names[@]}"; do [ "$seen" != "$name" ] || refuse "$where: the name $name is taken by an earlier line"; done
    sweep_names+=("$name"); sweep_data+=("$data"); sweep_settings+=("$settings_of_line")
  done < "$sweep"
  [ ${#sweep_names[@]} -ge 1 ] || refuse "$sweep: no settings (one line each: NAME DATA KEY=VALUE...)"
fi
[ "$models" != default ] || models=$(( quick ? 1 : 2 ))
case "$models" in ''|*[!0-9]*|0*) echo "run.sh: --models needs a whole number from 1, not '$models'" >&2; exit 2 ;; esac
case "$bpe_dropout" in ''|*[!0-9.]*|*.*.*|.) echo "run.sh: --bpe-dropout needs a number in [0, 1), not '$bpe_dropout'" >&2; exit 2 ;; esac
case "$average_by" in last|best) ;; *) echo "run.sh: --average needs last or best, not '$average_by'" >&2; exit 2 ;; esac
mkdir -p "$out"

if [ -z "${DATA:-}" ]; then
  DATA="$out/raw"
  mkdir -p "$DATA"
  base="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
  fetch() {  # remote file, local file
    echo "fetching $1" >&2
    curl -fsSL "$base/$1" | gunzip > "$2.tmp" && mv "$2.tmp" "$2" && return
    rm -f "$2.tmp"
    echo "run.sh: could not fetch $base/$1; set DATA=/path/to/multi30k" >&2
    exit 1
  }
  for pair in train:train val:val test2016:test_2016_flickr; do
    name="${pair%%:*}"; remote="${pair#*:}"
    for lang in en de; do
      [ -s "$DATA/$name.$lang" ] || fetch "$remote.$lang.gz" "$DATA/$name.$lang"
    done
  done
fi

auto_precision() {  # what train.precision=auto trains in here: bf16 (or fp16) on GPUs and CPUs with bf16 instructions, else fp32
  python3 -c 'from mtkit.core.device import resolve_device, resolve_precision; print(resolve_precision("auto", resolve_device("auto")))' \
    2>/dev/null || echo unknown
}
settings=()
if [ "$quick" = 1 ]; then
  # Quick mode: the same pipeline within 10 minutes on 2 cores. With only ~8 minutes of training:
  # a shorter warm-up, less dropout and label smoothing, and the inverse-sqrt schedule it was measured with.
  settings=(--set train.max_time=480 --set train.warmup=300 --set train.lr_schedule=inverse_sqrt
            --set model.dropout=0.1 --set train.label_smoothing=0.1 --set train.valid_every=400 --set train.save_every=100
            --set train.valid_max_sentences=200 --set train.keep_last=5)
  average_last=5
  if [ "$(auto_precision)" = fp32 ]; then
    # A CPU without bf16 instructions trains in fp32: about a third of the updates of a CPU with
    # AVX-512 BF16 in 8 minutes (1,116 against 2,965), test2016 30.35 with the settings above.
    # There a narrower model (transformer-narrow: d_model 192, FFN 768), no dropout, 1,536-token
    # batches and a learning rate that decays linearly to zero at the end of the 8 minutes make
    # twice the updates and learn more from each (val 34.47, test2016 34.50), with a checkpoint
    # every 50 updates, so that the 5 averaged are the last 250 (docs/results/design-choices.md, "Quick mode on a
    # CPU that trains in fp32").
    echo "run.sh: this machine trains in fp32 (no bf16 instructions): quick mode trains transformer-narrow" >&2
    settings+=(--set model.preset=transformer-narrow --set model.dropout=0.0 --set train.max_tokens=1536
               --set train.lr_schedule=linear --set train.save_every=50)
  fi
fi

if [ "$gpu" = 1 ]; then
  settings=(--set train.max_time=200 --set train.max_tokens=8192 --set train.pack_length=128)
  if [ "$dry_run" = 1 ]; then
    settings+=(--set train.device=cpu)
  else
    settings+=(--set train.device=cuda --set train.compile=true --set train.cuda_graphs=true)
  fi
fi

[ "$average_by" = last ] && [ -z "$sweep" ] || settings+=(--set train.keep_best="$average_last")

mtkit train-tokenizer -i "$DATA/train.$src" -i "$DATA/train.$tgt" -o "$out/tokenizer.json" --vocab-size 8000 "${tokenizer_options[@]}"
preprocess() {  # dataset directory, then settings of its own
  mtkit preprocess -s "$src" -t "$tgt" --train "$DATA/train" --valid "$DATA/val" --test "$DATA/test2016" \
    --tokenizer "$out/tokenizer.json" -o "$1" --force "${augment_options[@]}" "${@:2}"
}
augment_options=()
[ "$augment" = none ] || augment_options=(--augment "$augment")
preprocess "$out/data-bin"
train() {  # dataset, run directory, then settings of its own
  mtkit train -d "$1" -o "$2" -c "$here/config.yaml" --force "${settings[@]}" "${@:3}" "${extra[@]}"
}
average() {  # run directory, model file: the average of its last (or best) $average_last checkpoints,
  local kept what=checkpoints  # or of all it has when a shorter run saved fewer
  if [ "$average_by" = best ]; then
    what="validated checkpoints"
    kept=$(python3 -c 'import json, sys; print(sum(e.get("metric") is not None for e in json.load(open(sys.argv[1]))["checkpoints"]))' \
      "$1/checkpoints/index.json")
  else
    kept=$(find "$1/checkpoints" -name 'step_*.pt' | wc -l)
  fi
  [ "$kept" -ge "$average_last" ] || echo "run.sh: $1 has $kept $what; averaging those" >&2
  mtkit average "$1" --"$average_by" $(( kept < average_last ? kept : average_last )) -o "$2"
}
# Several trainings at once, one process per share of the cores (nproc honours OMP_NUM_THREADS; on
# 2 cores, two one-thread trainings make 1.4x the tokens/s of one two-thread training in all; on one
# GPU, several share it). jobs: "DATASET<TAB>RUN<TAB>LOG<TAB>KEY=VALUE ..." each; the first's progress
# is shown, the others' goes to their LOG.
pids=()
trap '[ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null' EXIT
train_side_by_side() {
  local threads=$(( $(nproc) / ${#jobs[@]} )) i job data run log setting
  [ "$threads" -ge 1 ] || threads=1
  for i in "${!jobs[@]}"; do
    IFS=$'\t' read -r data run log job <<< "${jobs[$i]}"
    local sets=()
    for setting in $job; do sets+=(--set "$setting"); done
    if [ "$i" = 0 ]; then
      train "$data" "$run" --set train.threads="$threads" "${sets[@]}" &
    else
      train "$data" "$run" --set train.threads="$threads" "${sets[@]}" 2> "$log" &
    fi
    pids+=($!)
  done
  for i in "${!jobs[@]}"; do
    IFS=$'\t' read -r data run log job <<< "${jobs[$i]}"
    [ "$i" != 0 ] || log="the log above"
    wait "${pids[$i]}" || { echo "run.sh: training $run failed; see $log" >&2; exit 1; }
  done
  pids=()
}
dropout_data="$out/data-bin"
make_dropout_data() {  # the pairs as 10 samples segmented with BPE-dropout (same tokenizer); as they are with 0
  if awk -v p="$bpe_dropout" 'BEGIN { exit !(p > 0) }'; then
    dropout_data="$out/data-bin-dropout"
    preprocess "$dropout_data" --bpe-dropout "$bpe_dropout" --samples 10
  fi
}

if [ -n "$sweep" ]; then
  jobs=(); runs=()
  mkdir -p "$out/sweep"
  [[ " ${sweep_data[*]} " != *" dropout "* ]] || make_dropout_data
  for i in "${!sweep_names[@]}"; do
    data="$out/data-bin"; [ "${sweep_data[$i]}" = plain ] || data="$dropout_data"
    run="$out/sweep/${sweep_names[$i]}"
    jobs+=("$data"$'\t'"$run"$'\t'"$run.log"$'\t'"${sweep_settings[$i]}"); runs+=("$run")
  done
  train_side_by_side
  mtkit choose "${runs[@]}" --src "$DATA/val.$src" --ref "$DATA/val.$tgt" -o "$out/chosen" --force \
    --ensemble "$(seq -s, 1 ${#runs[@]})" --lenpen "$(tr ' ' ',' <<< "${lenpens[*]}")"
  { read -r lenpen; mapfile -t model_files; } < <(python3 - "$out/chosen" "$out/val_lenpen.tsv" <<'PY'
import json, sys
choice = json.load(open(f"{sys.argv[1]}/choice.json"))
with open(sys.argv[2], "w") as tsv:  # as the other modes write it: each lenpen tried and its val BLEU
    tsv.writelines(f"{t['lenpen']}\t{t['bleu']}\n" for t in choice["trials"] if t["stage"] == "lenpen")
print(choice["lenpen"], *(f"{sys.argv[1]}/{name}" for name in choice["models"]), sep="\n")
PY
  )
  echo "lenpen $lenpen: the best val BLEU of $(tr '\t\n' '= ' < "$out/val_lenpen.tsv")" >&2
elif [ "$models" = 1 ]; then
  train "$out/data-bin" "$out/run"
  average "$out/run" "$out/model.pt"
  model_files=("$out/model.pt")
else
  make_dropout_data  # the second and later models train on a second segmentation
  jobs=("$out/data-bin"$'\t'"$out/run1"$'\t'-$'\t'"train.seed=1")
  for i in $(seq 2 "$models"); do jobs+=("$dropout_data"$'\t'"$out/run$i"$'\t'"$out/train$i.log"$'\t'"train.seed=$i"); done
  train_side_by_side
  model_files=()
  for i in $(seq 1 "$models"); do
    average "$out/run$i" "$out/model$i.pt"
    model_files+=("$out/model$i.pt")
  done
fi
model_args=()
for file in "${model_files[@]}"; do model_args+=(-m "$file"); done

if [ -z "$sweep" ]; then
  # Small models like this one translate short at the usual lenpen 0.6; the best value is chosen on val.
  for lenpen in "${lenpens[@]}"; do
    bleu=$(mtkit evaluate "${model_args[@]}" --src "$DATA/val.$src" --ref "$DATA/val.$tgt" --beam 5 \
      --lenpen "$lenpen" --metrics bleu --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["bleu"]["score"])')
    printf '%s\t%s\n' "$lenpen" "$bleu"
  done > "$out/val_lenpen.tsv.tmp"
  mv "$out/val_lenpen.tsv.tmp" "$out/val_lenpen.tsv"
  lenpen=$(sort -s -t $'\t' -k2,2gr "$out/val_lenpen.tsv" | head -n 1 | cut -f 1)  # the first of equals
  echo "lenpen $lenpen: the best val BLEU of $(tr '\t\n' '= ' < "$out/val_lenpen.tsv")" >&2
fi

mtkit evaluate "${model_args[@]}" --src "$DATA/test2016.$src" --ref "$DATA/test2016.$tgt" \
  --beam 5 --lenpen "$lenpen" -o "$out/test2016.hyp.$tgt" --json > "$out/test2016.json.tmp"
mv "$out/test2016.json.tmp" "$out/test2016.json"
mtkit evaluate --hyp "$out/test2016.hyp.$tgt" --ref "$DATA/test2016.$tgt"
[ "$gpu" = 0 ] || mtkit evaluate --hyp "$out/test2016.hyp.$tgt" --ref "$DATA/test2016.$tgt" --metrics bleu --lowercase
echo "model(s): ${model_files[*]}   scores: $out/test2016.json"
echo "examples (source / mtkit / reference):"
paste -d '\n' <(head -n 5 "$DATA/test2016.$src") <(head -n 5 "$out/test2016.hyp.$tgt") <(head -n 5 "$DATA/test2016.$tgt") <(yes '' | head -n 5)
