"""Every command x every kind of bad input: one line naming the file or option, exit 1 (2 for usage), no traceback,
and nothing written under the output's name.

The commands run in-process through Typer's test runner (no interpreter start per case), with the real
files the cases name.
"""

from pathlib import Path

import pytest
from conftest import TINY_TRAIN, write_lines
from typer.testing import CliRunner

from mtkit.cli import app


@pytest.fixture(scope="module")
def bad(tmp_path_factory, corpus, tokenizer_path, data_dir, trained_run) -> dict[str, Path]:
    """Named paths for the cases: good inputs, and bad ones of every kind."""
    root = tmp_path_factory.mktemp("bad")
    (root / "dir").mkdir()
    (root / "empty.txt").write_bytes(b"")
    (root / "bad_utf8.txt").write_bytes(b"fine\nbad \xff byte\n")
    (root / "notes.txt").write_text("not a model, not a tokenizer\n")
    (root / "existing.txt").write_text("keep me\n")
    (root / "run_file").write_text("a file where a run directory should be\n")
    (root / "keys.txt").write_text("a-key 60 desk\n")
    write_lines(root / "three.de", ["a", "b", "c"])
    write_lines(root / "glossary.tsv", ["dog\tKater"])
    write_lines(root / "ragged.tsv", ["dog\tKater", "cat\tKatze\tchat"])
    for lang, lines in (("en", ["A dog.", "A cat."]), ("de", ["Ein Hund."])):
        write_lines(root / f"mismatch.{lang}", lines)
    for lang in ("en", "de"):
        (root / f"empty.{lang}").write_bytes(b"")
        (root / f"badutf.{lang}").write_bytes(b"A dog.\n\xff\n")
    (root / "fake.docx").write_text("not a Word file\n")
    (root / "page.rtf").write_text("{\\rtf1 a page}\n")
    (root / "doc.txt").write_text("A dog.\n")
    (root / "t.csv").write_text("key,en\ngreeting,A dog.\n")
    (root / "fake.pdf").write_bytes(b"%PDF-1.7 but nothing else")
    (root / "tagged.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\n<i>A dog.</i>\n")
    (root / "not_a_run").mkdir()
    (root / "export_exists").mkdir()
    return {
        "root": root, "corpus": corpus, "tok": tokenizer_path, "data": data_dir, "run": trained_run,
        "model": trained_run / "checkpoints" / "step_00000040.pt",
    }  # fmt: skip


# (command line with {names} from the fixture, stdin, what the one error line must say, exit code)
CASES = {
    # train-tokenizer
    "tok-missing-input": ("train-tokenizer -i {root}/missing.txt -o {root}/t.json", "", "missing.txt: no such file", 1),
    "tok-input-is-dir": ("train-tokenizer -i {root}/dir -o {root}/t.json", "", "dir: is a directory", 1),
    "tok-empty-input": ("train-tokenizer -i {root}/empty.txt -o {root}/t.json", "", "the input files are empty", 1),
    "tok-bad-utf8": ("train-tokenizer -i {root}/bad_utf8.txt -o {root}/t.json", "", "bad_utf8.txt:2: invalid UTF-8", 1),
    "tok-output-is-dir": ("train-tokenizer -i {corpus}/train.en -o {root}/dir", "", "dir: is a directory", 1),
    "tok-small-vocab": ("train-tokenizer -i {corpus}/train.en -o {root}/t.json --vocab-size 10", "", "--vocab-size 10", 1),
    "tok-bad-type": ("train-tokenizer -i {corpus}/train.en -o {root}/t.json --type wordpiece", "", "--type wordpiece", 1),
    "tok-unigram-too-small": ("train-tokenizer -i {corpus}/train.en -i {corpus}/train.de -o {root}/t.json --type unigram --vocab-size 300", "", "--vocab-size 300: The vocabulary is not large enough", 1),
    "tok-bad-normalization": ("train-tokenizer -i {corpus}/train.en -o {root}/t.json --normalization NFKD", "", "--normalization nfkd: must be one of nfkc, nfc, none", 1),
    "tok-not-a-number": ("train-tokenizer -i {corpus}/train.en -o {root}/t.json --vocab-size lots", "", "Invalid value for '--vocab-size'", 2),
    # preprocess
    "pre-missing-prefix": ("preprocess -s en -t de --train {root}/nowhere --tokenizer {tok} -o {root}/bin", "", "nowhere.en: no such file", 1),
    "pre-missing-tokenizer": ("preprocess -s en -t de --train {corpus}/train --tokenizer {root}/no.json -o {root}/bin", "", "no.json: no such tokenizer file", 1),
    "pre-tokenizer-wrong-kind": ("preprocess -s en -t de --train {corpus}/train --tokenizer {root}/notes.txt -o {root}/bin", "", "notes.txt: not a valid tokenizer", 1),
    "pre-empty": ("preprocess -s en -t de --train {root}/empty --tokenizer {tok} -o {root}/bin", "", "empty.en: no lines (the training files are empty)", 1),
    "pre-bad-utf8": ("preprocess -s en -t de --train {root}/badutf --tokenizer {tok} -o {root}/bin", "", "badutf.en:2: invalid UTF-8", 1),
    "pre-line-mismatch": ("preprocess -s en -t de --train {root}/mismatch --tokenizer {tok} -o {root}/bin", "", "mismatch.en has 2 lines but", 1),
    "pre-langid-unknown-language": ("preprocess -s en -t xx --train {corpus}/train --tokenizer {tok} -o {root}/bin --langid", "", "--langid with language xx: the language identifier does not know 'xx'", 1),
    "pre-script-share-over-1": ("preprocess -s en -t de --train {corpus}/train --tokenizer {tok} -o {root}/bin --min-script-share 1.5", "", "--min-script-share 1.5: must be in [0, 1]", 1),
    "pre-langid-min-prob-1": ("preprocess -s en -t de --train {corpus}/train --tokenizer {tok} -o {root}/bin --langid --langid-min-prob 1", "", "--langid-min-prob 1: must be in (0, 1)", 1),
    "pre-negative-max-len": ("preprocess -s en -t de --train {corpus}/train --tokenizer {tok} -o {root}/bin --max-len -5", "", "--max-len -5: must not be negative", 1),
    "pre-same-language": ("preprocess -s en -t en --train {corpus}/train --tokenizer {tok} -o {root}/bin", "", "both 'en'", 1),
    "pre-bpe-dropout-1": ("preprocess -s en -t de --train {corpus}/train --tokenizer {tok} -o {root}/bin --bpe-dropout 1", "", "--bpe-dropout 1: must be in [0, 1)", 1),
    "pre-samples-without-dropout": ("preprocess -s en -t de --train {corpus}/train --tokenizer {tok} -o {root}/bin --samples 3", "", "--samples 3: the samples would be identical", 1),
    "pre-existing-output": ("preprocess -s en -t de --train {corpus}/train --tokenizer {tok} -o {root}/existing.txt", "", "existing.txt: already exists", 1),
    # distill
    "dis-missing-src": ("distill -m {model} --src {root}/none.en -o {root}/d.de", "", "none.en: no such file", 1),
    "dis-existing-output": ("distill -m {model} --src {root}/three.de -o {root}/existing.txt", "", "existing.txt: already exists (use --force", 1),
    "dis-output-is-dir": ("distill -m {model} --src {root}/three.de -o {root}/dir", "", "dir: is a directory", 1),
    "dis-zero-shard-lines": ("distill -m {model} --src {root}/three.de -o {root}/d.de --shard-lines 0", "", "--shard-lines 0: must be at least 1", 1),
    # train
    "train-missing-data": ("train -d {root}/nodata -o {root}/r", "", "nodata: not an mtkit dataset", 1),
    "train-data-not-a-dataset": ("train -d {root}/dir -o {root}/r", "", "dir: not an mtkit dataset", 1),
    "train-missing-config": ("train -d {data} -o {root}/r -c {root}/none.yaml", "", "none.yaml: no such config file", 1),
    "train-config-wrong-kind": ("train -d {data} -o {root}/r -c {root}/bad_utf8.txt", "", "bad_utf8.txt: not a YAML config (invalid UTF-8", 1),
    "train-sampling-temperature-0": ("train -d {data} -o {root}/r --set train.sampling_temperature=0", "", "train.sampling_temperature must be more than 0", 1),
    "train-unknown-key": ("train -d {data} -o {root}/r --set train.lrr=1", "", "unknown config key 'train.lrr'", 1),
    "train-negative-patience": ("train -d {data} -o {root}/r --set train.patience=-1", "", "train.patience must not be negative", 1),
    "train-output-is-file": ("train -d {data} -o {root}/run_file " + " ".join(TINY_TRAIN), "", "run_file: exists and is not a directory", 1),
    "train-existing-run": ("train -d {data} -o {run}", "", "already holds a run", 1),
    "train-resume-nothing": ("train --resume {root}/dir", "", "nothing to resume", 1),
    "train-resume-with-config": ("train --resume {run} -c {root}/x.yaml", "", "--config cannot be combined with --resume", 1),
    "train-init-from-missing": ("train -d {data} -o {root}/r --init-from {root}/none.pt", "", "none.pt: no such model file", 1),
    "train-init-from-with-resume": ("train --resume {run} --init-from {model}", "", "--init-from cannot be combined with --resume", 1),
    # adapt
    "adapt-no-corrections": ("adapt -m {model} -o {root}/a.pt", "", "give the corrections: --tm FILE, or --src and --ref", 1),
    "adapt-mismatch": ("adapt -m {model} -o {root}/a.pt --src {root}/mismatch.en --ref {root}/mismatch.de", "", "different numbers of lines", 1),
    "adapt-output-is-dir": ("adapt -m {model} -o {root}/dir --src {root}/three.de --ref {root}/three.de", "", "dir: is a directory", 1),
    "adapt-zero-minutes": ("adapt -m {model} -o {root}/a.pt --src {root}/three.de --ref {root}/three.de --minutes 0", "", "--minutes 0: must be more than 0", 1),
    # average
    "avg-missing": ("average {root}/none.pt -o {root}/avg.pt", "", "none.pt: no such model file", 1),
    "avg-wrong-kind": ("average {root}/notes.txt -o {root}/avg.pt", "", "notes.txt: not an mtkit model file", 1),
    "avg-not-a-run": ("average {root}/not_a_run --last 2 -o {root}/avg.pt", "", "not_a_run: no checkpoints to average", 1),
    "avg-output-is-dir": ("average {model} -o {root}/dir", "", "dir: is a directory", 1),
    "avg-last-with-files": ("average {model} {model} --last 2 -o {root}/avg.pt", "", "--last/--best take one run directory", 1),
    # calibrate
    "cal-mismatch": ("calibrate -m {run} --src {root}/mismatch.en --ref {root}/mismatch.de -o {root}/c.json", "", "line counts differ", 1),
    "cal-empty": ("calibrate -m {run} --src {root}/empty.en --ref {root}/empty.de -o {root}/c.json", "", "empty.en: no lines to calibrate on (the file is empty)", 1),
    "cal-bad-signal": ("calibrate -m {run} --src {corpus}/valid.en --ref {corpus}/valid.de -o {root}/c.json --signals logprob,luck", "", "signal 'luck': one of logprob, entropy, agreement, dropout", 1),
    "cal-output-is-dir": ("calibrate -m {run} --src {corpus}/valid.en --ref {corpus}/valid.de -o {root}/dir", "", "dir: is a directory", 1),
    "tr-glossary-missing": ("translate -m {run} --glossary {root}/none.tsv", "A dog.\n", "none.tsv: no such file", 1),
    "tr-glossary-one-column": ("translate -m {run} --glossary {root}/notes.txt", "A dog.\n", "notes.txt line 1: a source term and a target term, separated by a tab, are needed", 1),
    "tr-glossary-greedy": ("translate -m {run} --beam 1 --glossary {root}/glossary.tsv", "A dog.\n", "terms and constraints need beam search: --beam 2 or more", 1),
    "tr-constraints-short": ("translate -m {run} --constraints {root}/three.de", "A.\nB.\nC.\nD.\n", "three.de: 3 lines, fewer than the input (stdin)", 1),
    "ev-glossary-with-hyp": ("evaluate --hyp {root}/three.de --ref {root}/three.de --glossary {root}/glossary.tsv", "", "--glossary is for translating: give --model and --src, not --hyp", 1),
    "dis-glossary-columns": ("distill -m {model} --src {root}/three.de -o {root}/d.de --glossary {root}/ragged.tsv", "", "ragged.tsv line 2: 3 tab-separated columns, where its first line has 2", 1),
    "tr-calibration-bad": ("translate -m {run} --confidence --calibration {root}/notes.txt", "A dog.\n", "notes.txt: not a calibration file of mtkit calibrate", 1),
    # choose
    "choose-not-a-run": ("choose {root}/not_a_run --src {corpus}/valid.en --ref {corpus}/valid.de -o {root}/chosen", "", "not_a_run: no checkpoints (a run directory of mtkit train)", 1),
    "choose-missing-src": ("choose {run} --src {root}/missing.en --ref {corpus}/valid.de -o {root}/chosen", "", "missing.en: no such file", 1),
    "choose-mismatch": ("choose {run} --src {root}/mismatch.en --ref {root}/mismatch.de -o {root}/chosen", "", "line counts differ", 1),
    "choose-bad-average": ("choose {run} --src {corpus}/valid.en --ref {corpus}/valid.de -o {root}/chosen --average last", "", "--average last: each item is last:N or best:N", 1),
    "choose-bad-lenpen": ("choose {run} --src {corpus}/valid.en --ref {corpus}/valid.de -o {root}/chosen --lenpen 0.6,high", "", "--lenpen 0.6,high: give comma-separated numbers", 1),
    "choose-output-exists": ("choose {run} --src {corpus}/valid.en --ref {corpus}/valid.de -o {root}/existing.txt", "", "existing.txt: already exists (use --force to replace it)", 1),
    # translate
    "tr-missing-model": ("translate -m {root}/none.pt", "x\n", "none.pt: no such model file", 1),
    "tr-model-wrong-kind": ("translate -m {root}/notes.txt", "x\n", "notes.txt: not an mtkit model file", 1),
    "tr-missing-input": ("translate -m {model} -i {root}/none.en", "", "none.en: no such file", 1),
    "tr-input-is-dir": ("translate -m {model} -i {root}/dir", "", "dir: is a directory", 1),
    "tr-bad-utf8": ("translate -m {model}", "fine\nbad \udcff\n", "<stdin>:2: invalid UTF-8", 1),
    "tr-output-is-dir": ("translate -m {model} -o {root}/dir", "x\n", "dir: is a directory", 1),
    "tr-beam-0": ("translate -m {model} --beam 0", "x\n", "--beam 0: must be at least 1", 1),
    "tr-tgt-lang-other": ("translate -m {model} --tgt-lang fr", "x\n", "--tgt-lang fr: this model translates into de only", 1),
    "tr-max-source-len-3": ("translate -m {model} --max-source-len 3", "x\n", "--max-source-len 3: must be between 4 and 1,024", 1),
    "tr-alignment-split-sentences": ("translate -m {model} --alignment --split-sentences", "x\n", "--alignment and --split-sentences exclude each other", 1),
    "tr-nbest-over-beam": ("translate -m {model} --beam 2 --nbest 3", "x\n", "--nbest 3", 1),
    "tr-negative-loop-ngram": ("translate -m {model} --loop-ngram -1", "x\n", "--loop-ngram -1 --loop-repeats 2: the n-gram size must be at least 0", 1),
    "ev-max-source-len-2000": ("evaluate -m {model} --src {corpus}/test.en --ref {corpus}/test.de --max-source-len 2000", "", "--max-source-len 2000: must be between 4 and 1,024", 1),
    "ev-loop-repeats-0": ("evaluate -m {model} --src {corpus}/test.en --ref {corpus}/test.de --loop-repeats 0", "", "--loop-repeats 0: the n-gram size must be at least 0 (0: no loop guard) and the repeats at least 1", 1),
    "tr-bad-engine": ("translate -m {model} --engine onnx", "x\n", "--engine onnx", 1),
    "tr-bad-precision": ("translate -m {model} --precision fp8", "x\n", "fp8", 1),
    "tr-bad-device": ("translate -m {model} --device tpu", "x\n", "tpu", 1),
    "tr-cuda-graphs-on-cpu": ("translate -m {model} --device cpu --cuda-graphs", "x\n", "--cuda-graphs: CUDA graphs need a GPU", 1),
    "tr-run-dir-without-checkpoints": ("translate -m {root}/not_a_run", "x\n", "not_a_run: a directory without mtkit checkpoints", 1),
    "tr-ensemble-alignment": ("translate -m {model} -m {model} --alignment", "x\n", "--alignment needs one model", 1),
    "tr-missing-prefix-file": ("translate -m {model} --prefix-file {root}/none.de", "x\n", "none.de: no such file", 1),
    "tr-two-prefix-sources": ("translate -m {model} --prefix-file {root}/three.de --prefix-in-input", "x\n", "give one of them", 1),
    "tr-prefix-file-longer": ("translate -m {model} --prefix-file {root}/three.de", "x\n", "more lines than the input (stdin: 1)", 1),
    # evaluate
    "ev-empty": ("evaluate --hyp {root}/empty.txt --ref {root}/empty.txt", "", "empty.txt: no lines to score", 1),
    "ev-mismatch": ("evaluate --hyp {root}/three.de --ref {corpus}/test.de", "", "line counts differ", 1),
    "ev-missing-ref": ("evaluate --hyp {root}/three.de --ref {root}/none.de", "", "none.de: no such file", 1),
    "ev-bad-utf8": ("evaluate --hyp {root}/bad_utf8.txt --ref {root}/bad_utf8.txt", "", "bad_utf8.txt:2: invalid UTF-8", 1),
    "ev-unknown-metric": ("evaluate --hyp {root}/three.de --ref {root}/three.de --metrics bleu,meteor", "", "unknown metric 'meteor'", 1),
    "ev-model-and-hyp": ("evaluate -m {model} --hyp {root}/three.de --ref {root}/three.de", "", "--model and --hyp", 1),
    "ev-nothing-to-score": ("evaluate --ref {root}/three.de", "", "give either --model and --src", 1),
    "ev-bad-tokenizer": ("evaluate --hyp {root}/three.de --ref {root}/three.de --tokenize nope", "", "--tokenize nope: not a sacrebleu BLEU tokenizer", 1),
    "ev-output-is-dir": ("evaluate -m {model} --src {corpus}/test.en --ref {corpus}/test.de -o {root}/dir", "", "dir: is a directory", 1),
    # score
    "score-missing-src": ("score -m {model} --src {root}/none.en --tgt {root}/three.de", "", "none.en: no such file", 1),
    "score-mismatch": ("score -m {model} --src {root}/mismatch.en --tgt {root}/three.de", "", "line counts differ", 1),
    "score-two-normalisations": ("score -m {model} --src {root}/three.de --tgt {root}/three.de --normalize --lenpen 1", "", "--normalize and --lenpen exclude each other", 1),
    # export
    "ex-bad-format": ("export -m {model} -o {root}/x --format onnx", "", "--format onnx", 1),
    "ex-existing-output": ("export -m {model} -o {root}/export_exists", "", "export_exists: already exists", 1),
    "ex-bad-quantization": ("export -m {model} -o {root}/q --quantization int3", "", "int3", 1),
    "ex-model-wrong-kind": ("export -m {root}/notes.txt -o {root}/x2", "", "notes.txt: not an mtkit model file", 1),
    "ex-hf-quantization": ("export -m {model} -o {root}/h --format huggingface --quantization int8", "", "--quantization: only for --format ctranslate2", 1),
    # import
    "im-missing-directory": ("import {root}/no_marian -o {root}/im.pt", "", "no_marian/config.json: missing", 1),
    "im-not-marian": ("import {root}/dir -o {root}/im.pt", "", "dir/config.json: missing", 1),
    # trim-vocab
    "trim-missing-text": ("trim-vocab -m {model} -i {root}/none.en -o {root}/t.pt", "", "none.en: no such file", 1),
    "trim-output-exists": ("trim-vocab -m {model} -i {root}/existing.txt -o {root}/existing.txt", "", "existing.txt: exists; use --force", 1),
    "trim-missing-model": ("trim-vocab -m {root}/none.pt -i {root}/existing.txt -o {root}/t.pt", "", "none.pt: no such model file", 1),
    # serve (refused before a server starts)
    "serve-missing-model": ("serve -m {root}/none.pt", "", "none.pt: no such model file", 1),
    "serve-cuda-graphs-on-cpu": ("serve -m {model} --device cpu --cuda-graphs", "", "--cuda-graphs: CUDA graphs need a GPU", 1),
    "serve-bad-engine": ("serve -m {model} --engine onnx", "", "--engine onnx", 1),
    "serve-not-an-export": ("serve -m {model} --engine ctranslate2", "", "not an exported mtkit CTranslate2 model", 1),
    "serve-zero-batch-tokens": ("serve -m {model} --max-batch-tokens 0", "", "--max-batch-tokens 0: must be at least 1", 1),
    "serve-negative-wait": ("serve -m {model} --max-wait-ms -1", "", "--max-wait-ms -1.0: must be at least 0", 1),
    "serve-zero-queue": ("serve -m {model} --max-queue 0", "", "--max-queue 0: must be at least 1", 1),
    "serve-bad-port": ("serve -m {model} --port 70000", "", "--port 70000: must be between 0 and 65535", 1),
    "serve-beam-0": ("serve -m {model} --beam 0", "", "--beam 0: must be at least 1", 1),
    "serve-missing-key-file": ("serve -m {model} --api-keys {root}/none.keys", "", "none.keys: cannot read the key file", 1),
    "serve-bad-key-file": ("serve -m {model} --api-keys {root}/notes.txt", "", "notes.txt:1: expected KEY [REQUESTS_PER_MINUTE [NAME [CHARACTERS]]]", 1),
    "serve-req-limit-with-keys": ("serve -m {model} --api-keys {root}/keys.txt --req-limit 5", "", "--req-limit is for servers without --api-keys", 1),
    "serve-private-without-keys": ("serve -m {model} --private-status", "", "--private-status needs --api-keys", 1),
    "serve-negative-max-texts": ("serve -m {model} --max-texts -1", "", "--max-texts -1: must be at least 0", 1),
    "score-drop-without-kept": ("score -m {model} --src {root}/three.de --tgt {root}/three.de --normalize --drop-worst 0.1", "", "--drop-worst takes a share between 0 and 1", 1),
    # attention
    "att-bad-kind": ("attention -m {model} --src 'A dog.' --kind sideways", "", "--kind sideways", 1),
    "att-bad-format": ("attention -m {model} --src 'A dog.' -o {root}/a.pdf", "", "--format pdf", 1),
    "att-bad-layer": ("attention -m {model} --src 'A dog.' --layer 9", "", "--layer 9: the model has layers 1..1", 1),
    "att-bad-head": ("attention -m {model} --src 'A dog.' --head zero", "", "--head zero", 1),
    "att-image-without-output": ("attention -m {model} --src 'A dog.' --format png", "", "--format png needs -o FILE", 1),
    # translate-file
    "tf-missing-input": ("translate-file {root}/none.docx -o {root}/o.docx -m {model}", "", "none.docx: no such file", 1),
    "tf-not-what-it-says": ("translate-file {root}/fake.docx -o {root}/o.docx -m {model}", "", "fake.docx: not a .docx file (not a readable zip archive", 1),
    "tf-unknown-format": ("translate-file {root}/page.rtf -o {root}/o.rtf -m {model}", "", "page.rtf: not a format mtkit translates (its extension .rtf", 1),
    "tf-bad-format-option": ("translate-file {root}/doc.txt -o {root}/o.txt -m {model} --format rtf", "", "--format rtf: must be one of arb, csv, docx", 1),
    "tf-column-not-csv": ("translate-file {root}/doc.txt -o {root}/o.txt -m {model} --column 2", "", "--column 2: only a CSV file has columns (", 1),
    "tf-csv-without-column": ("translate-file {root}/t.csv -o {root}/o.csv -m {model}", "", "t.csv: which column is to be translated? Give --column", 1),
    "tf-csv-no-such-column": ("translate-file {root}/t.csv -o {root}/o.csv -m {model} --column fr", "", "t.csv: --column fr: no such column (the first row names key, en)", 1),
    "tf-not-a-pdf": ("translate-file {root}/fake.pdf -o {root}/o.pdf -m {model}", "", "fake.pdf: not a PDF MuPDF can read (", 1),
    "tf-output-other-format": ("translate-file {root}/doc.txt -o {root}/o.docx -m {model}", "", "o.docx: a .txt file translates into a .txt file, not .docx", 1),
    "tf-stdin-without-format": ("translate-file - -o {root}/o.txt -m {model}", "A dog.\n", "-: give --format for a file read from stdin", 1),
    "tf-output-is-dir": ("translate-file {root}/doc.txt -o {root}/dir -m {model}", "", "dir: is a directory", 1),
    "tf-ensemble-formatting": ("translate-file {root}/tagged.srt -o {root}/o.srt -m {model} -m {model}", "", "tagged.srt, a file with formatting, needs one model and --engine pytorch", 1),
    "tf-missing-model": ("translate-file {root}/doc.txt -o {root}/o.txt -m {root}/none.pt", "", "none.pt: no such model file", 1),
    # plot
    "plot-not-a-run": ("plot {root}/dir", "", "metrics.jsonl: no such file", 1),
    "plot-output-is-dir": ("plot {run} -o {root}/dir", "", "dir: is a directory", 1),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gets_one_line_and_an_exit_code(bad, case):
    import shlex

    command, stdin, message, code = CASES[case]
    root = bad["root"]
    before = sorted(p.name for p in root.iterdir())
    args = shlex.split(command.format(**bad))
    result = CliRunner().invoke(app, args, input=stdin.encode("utf-8", "surrogateescape"))
    output = result.stderr if code == 1 else result.output
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert not result.exception or isinstance(result.exception, SystemExit), repr(result.exception)
    assert message in output, output
    assert "Traceback" not in output
    if code == 1:
        assert len(output.strip().splitlines()) == 1, output
    if code == 1:
        assert result.stdout == ""
    leftovers = sorted(p.name for p in root.iterdir())
    assert leftovers == before, "a failed command must leave nothing under its output's name"
    assert (root / "existing.txt").read_text() == "keep me\n"


def test_the_table_covers_every_command():
    commands = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    covered = {command.split()[0] for command, *_ in CASES.values()}
    assert commands == covered
