"""Beam search speed as the host reads the device every step or every few (mtkit.beam), in one process.

    python bench/beam_sync.py -m MODEL [--data ../shared/data/multi30k] [--beam 5] [--precisions fp32,bf16]
        [--graphs 0,1] [--sync-every default,1,8] [--repeats 3] [--save DIR] [--against DIR]

Translates test2016 (1,000 sentences, batch 128, lenpen 0.6) with each precision, without and with
--cuda-graphs (a GPU's), and each --sync-every (steps between the host's reads; 1: every step, as
on a CPU; default: mtkit.beam.host_reads_every's choice), after a warm-up on the first 100 lines; prints sentences/s (the median of --repeats
translations of the whole set), BLEU, and with --against DIR the lines identical to the
translations saved there by an earlier run with --save DIR (the same precision and graphs), such as
one of an earlier mtkit's tree (PYTHONPATH=OLD_TREE: a search without mtkit.beam reads every step,
and --sync-every is ignored).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import sacrebleu
import torch
from common import DEFAULT_MULTI30K, conditions, print_table

import mtkit.translate
from mtkit.engines import make_translator
from mtkit.search import SearchConfig

# None: an mtkit whose beam search reads the device every step (before mtkit.beam).
beam_module = sys.modules[mtkit.translate.BeamStream.__module__]
beam_module = beam_module if hasattr(beam_module, "host_reads_every") else None
MTKITS_CHOICE = beam_module.host_reads_every if beam_module else None


def timed_translation(translator, sentences: list[str], repeats: int) -> tuple[float, list[str]]:
    translator.translate(sentences[:100])  # warm-up: kernels, and with graphs the first buckets
    rates, output = [], []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        output = translator.translate(sentences)
        rates.append(len(sentences) / (time.perf_counter() - start))
    return statistics.median(rates), output


def translator_reads(translator) -> int:
    return MTKITS_CHOICE(translator.searcher, translator.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--graphs", default="0,1", help="without (0) and with (1) --cuda-graphs; 1 needs a GPU")
    parser.add_argument(
        "--sync-every", default="default", help="steps between the host's reads, e.g. 1,8 (default: mtkit's choice)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lines", type=int, default=0, help="the first N lines only (0: all), e.g. for a CPU check")
    parser.add_argument("--save", type=Path, default=None, help="write each setting's translations here")
    parser.add_argument("--against", type=Path, default=None, help="count lines identical to the ones saved here")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sentences = (args.data / f"test2016.{args.src}").read_text(encoding="utf-8").splitlines()
    references = (args.data / f"test2016.{args.tgt}").read_text(encoding="utf-8").splitlines()
    if args.lines:
        sentences, references = sentences[: args.lines], references[: args.lines]
    syncs = [int(s) for s in args.sync_every.replace("default", "0").split(",")] if beam_module else [None]
    cfg = SearchConfig(beam=args.beam, lenpen=0.6)
    rows = []
    for precision in args.precisions.split(","):
        for graphs in (bool(int(g)) for g in args.graphs.split(",")):
            translator = make_translator("pytorch", [args.model], "best", cfg, device, precision, 128, 8192, graphs)
            for sync in syncs:
                if beam_module:
                    beam_module.host_reads_every = (lambda model, device, every=sync: every) if sync else MTKITS_CHOICE
                rate, output = timed_translation(translator, sentences, args.repeats)
                name = f"{precision}.{'graphs' if graphs else 'eager'}"
                if args.save:
                    args.save.mkdir(parents=True, exist_ok=True)
                    (args.save / f"{name}.{args.tgt}").write_text("".join(f"{line}\n" for line in output))
                same = ""
                if args.against and (args.against / f"{name}.{args.tgt}").exists():
                    before = (args.against / f"{name}.{args.tgt}").read_text().splitlines()
                    same = f"{sum(a == b for a, b in zip(before, output))} of {len(before)}"
                bleu = sacrebleu.corpus_bleu(output, [references]).score
                reads = "every (before)" if sync is None else sync or f"default ({translator_reads(translator)})"
                rows.append([precision, "yes" if graphs else "no", reads, rate, bleu, same])
                print(f"{name}, sync every {sync}: {rate:.1f} sentences/s", file=sys.stderr, flush=True)
    print(f"beam {args.beam} on test2016 ({len(sentences):,} sentences), batch 128, lenpen 0.6, {args.model}, {device}")
    print(f"conditions: {conditions()}\n")
    print_table(["precision", "CUDA graphs", "host reads", "sentences/s", "BLEU", "identical to --against"], rows)


if __name__ == "__main__":
    main()
