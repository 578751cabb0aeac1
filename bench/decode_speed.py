"""Decoding speed of a trained model on Multi30k test2016: each engine, precision, beam, CUDA graphs
and host-read interval, with BLEU and peak memory.

    python bench/decode_speed.py -m MODEL [--data ../shared/data/multi30k] [--src en --tgt de] [--beams 1,5]
        [--precisions fp32,bf16] [--ct2 float32,int8] [--int8] [--hf] [--graphs 0,1] [--sync-every 1,8] [--lenpen 0.6]
        [--batch-size 128] [--repeats 1] [--lines N] [--save DIR] [--against DIR] [--without guards,split,spans]
        [--ct2-direct]

Every setting runs in its own process (its peak RSS is the table's; model loading is in it, not in
the timing): the first 100 lines are translated once as a warm-up, then the whole set --repeats
times, and sentences/s is the median. Engines: mtkit's PyTorch decoder in each of --precisions (with
--graphs 1 also replaying steps as CUDA graphs, a GPU's; with --sync-every N beam search's host
reading the device every N steps instead of mtkit's choice); CTranslate2 with each quantization of
--ct2 (pip install 'mtkit[ct2]'); with --int8, mtkit's decoder in fp32 with torchao's dynamic int8
linear layers (quantize_ with Int8DynamicActivationInt8WeightConfig; the output layer, tied to the
embeddings, stays fp32): a measurement of whether int8 would pay, not an mtkit option; with --hf, transformers' `generate` on the model exported by
`mtkit export --format huggingface`, in fp32 (it needs --lenpen 0: transformers' length penalty is
length^alpha, mtkit's GNMT's; with alpha 0 both rank by the summed log-probability, and neither
forces </s> at the length limit); its rows count the lines identical to mtkit's (the first precision).
--save DIR keeps each setting's translations, and --against DIR counts the lines identical to those
an earlier run saved (from another commit's tree, with PYTHONPATH=OLD_TREE, say).
Every row decodes with mtkit's defaults on (the loop and spelling guards, sentence splitting, spans
kept, re-casing); --without adds, for mtkit's engines, a row with each of the named defaults off
(guards: --loop-ngram 0, split: --no-split-sentences, spans: --no-keep-spans), so the price of each
stays visible (CTranslate2 has no guards: no row for them). --ct2-direct adds, for each --ct2 quantization, CTranslate2's translate_batch called
directly on the sentences' subwords (the same batch size, beam and length penalty, one length limit:
mtkit's for the longest sentence; no guards): what the engine gives alone, against what it gives
through mtkit, where each sentence has its own limit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch
from common import DEFAULT_MULTI30K, conditions, mtkit_command, print_table, run_measured


def translate_with(setting: dict):
    """A translate(lines) function of the setting's engine."""
    if setting["engine"] == "transformers":
        return hf_translate(Path(setting["model"]), setting["beam"], setting["batch_size"])
    if setting["engine"] == "ctranslate2-direct":
        return ct2_translate(Path(setting["model"]), setting["beam"], setting["batch_size"], setting["lenpen"])
    from mtkit.decoding.search import SearchConfig
    from mtkit.interop.engines import Decoding, build_translator

    if setting["sync_every"]:
        from mtkit.decoding import beam

        beam.host_reads_every = lambda model, device: setting["sync_every"]
    off = setting["off"]
    cfg = SearchConfig(beam=setting["beam"], lenpen=setting["lenpen"], **({"loop_ngram": 0} if off == "guards" else {}))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    decoding = Decoding(search=cfg, engine=setting["engine"], device=device, precision=setting["precision"],
                        batch_size=setting["batch_size"], cuda_graphs=setting["graphs"], split_sentences=off != "split",
                        keep_spans=off != "spans")  # fmt: skip
    translator = build_translator(decoding, [Path(setting["model"])])
    if setting.get("int8"):
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        is_linear = lambda module, name: isinstance(module, torch.nn.Linear)  # noqa: E731
        quantize_(translator.searcher, Int8DynamicActivationInt8WeightConfig(), filter_fn=is_linear)
    return translator.translate


def hf_translate(directory: Path, beam: int, batch_size: int):
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()

    def translate(sources: list[str]) -> list[str]:
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))  # similar lengths together, as mtkit does
        out = [""] * len(sources)
        with torch.no_grad():
            for first in range(0, len(order), batch_size):
                rows = order[first : first + batch_size]
                batch = tokenizer([sources[i] for i in rows], return_tensors="pt", padding=True)
                longest = int(batch["attention_mask"].sum(dim=1).max())
                generated = model.generate(**batch, num_beams=beam, do_sample=False, length_penalty=0.0,
                                           max_new_tokens=longest + 50, forced_eos_token_id=None)  # fmt: skip
                for i, text in zip(rows, tokenizer.batch_decode(generated, skip_special_tokens=True)):
                    out[i] = text
        return out

    return translate


def ct2_translate(directory: Path, beam: int, batch_size: int, lenpen: float):
    import ctranslate2

    from mtkit.decoding.search_rules import SearchConfig, max_output_length
    from mtkit.text.tokenizer import Tokenizer

    src, tgt = Tokenizer.load(directory / "src_tokenizer.json"), Tokenizer.load(directory / "tgt_tokenizer.json")
    translator = ctranslate2.Translator(str(directory), device="cpu", intra_threads=torch.get_num_threads())

    def translate(sentences: list[str]) -> list[str]:
        sources = [[src.id_to_token(i) for i in ids] + ["</s>"] for ids in src.encode_batch(sentences)]
        limit = max_output_length(max(len(source) - 1 for source in sources), SearchConfig())
        results = translator.translate_batch(sources, beam_size=beam, length_penalty=lenpen, max_batch_size=batch_size,
                                             max_decoding_length=limit)  # fmt: skip
        return tgt.decode_batch([[tgt.entry_id(t) for t in result.hypotheses[0]] for result in results])

    return translate


def run_one(setting: dict) -> None:
    """In the child process: translate, and write sentences/s and the translations as JSON to stdout."""
    sentences = setting["sentences"]
    translate = translate_with(setting)
    translate(sentences[:100])  # warm-up: kernels, and with graphs the first buckets
    rates, output = [], []
    for _ in range(setting["repeats"]):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        output = translate(sentences)
        rates.append(len(sentences) / (time.perf_counter() - start))
    json.dump({"per_s": statistics.median(rates), "output": output}, sys.stdout)


def settings_of(args, work: Path) -> list[dict]:
    engines = [("pytorch", args.model, p, p, graphs, sync) for p in filter(None, args.precisions.split(","))
               for graphs in map(int, args.graphs.split(",")) for sync in map(int, args.sync_every.split(","))]  # fmt: skip
    if args.int8:
        engines.append(("pytorch", args.model, "fp32", "torchao-int8", 0, 0))
    for quantization in filter(None, args.ct2.split(",")):
        exported = work / f"ct2-{quantization}"
        run_measured(mtkit_command("export", "-m", args.model, "--format", "ctranslate2", "--quantization",
                                   quantization, "-o", exported))  # fmt: skip
        engines.append(("ctranslate2", exported, "auto", quantization, 0, 0))  # auto: the exported quantization
        if args.ct2_direct:
            engines.append(("ctranslate2-direct", exported, "auto", quantization, 0, 0))
    if args.hf:
        run_measured(mtkit_command("export", "-m", args.model, "--format", "huggingface", "-o", work / "hf"))
        architecture = json.loads((work / "hf" / "config.json").read_text())["architectures"][0]
        engines.append(("transformers", work / "hf", "fp32", architecture, 0, 0))
    offs = ["", *filter(None, args.without.split(","))]
    if set(offs) - {"", "guards", "split", "spans"}:
        raise SystemExit(f"--without {args.without}: name guards, split or spans")
    return [dict(engine=engine, model=str(model), precision=precision, label=label, graphs=bool(graphs),
                 int8=label == "torchao-int8", sync_every=sync, beam=beam, lenpen=args.lenpen,
                 batch_size=args.batch_size, repeats=args.repeats, off=off)
            for beam in map(int, args.beams.split(",")) for engine, model, precision, label, graphs, sync in engines
            for off in (offs if engine in ("pytorch", "ctranslate2") else [""])
            if not (off == "guards" and engine == "ctranslate2")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--precisions", default="fp32,bf16", help="mtkit PyTorch precisions; empty for none")
    parser.add_argument("--ct2", default="", help="CTranslate2 quantizations to add, e.g. float32,int8")
    parser.add_argument("--int8", action="store_true", help="add fp32 with torchao's int8 linear layers")
    parser.add_argument("--hf", action="store_true", help="add transformers' generate (needs --lenpen 0)")
    parser.add_argument("--graphs", default="0", help="0 (eager steps), 1 (CUDA graphs, a GPU's) or 0,1")
    parser.add_argument("--sync-every", default="0", help="beam search's steps between host reads (0: mtkit's choice)")
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--lines", type=int, default=0, help="the first N lines only (0: all)")
    parser.add_argument("--save", type=Path, default=None, help="write each setting's translations here")
    parser.add_argument("--against", type=Path, default=None, help="count lines identical to the ones saved here")
    parser.add_argument("--without", default="", help="also each of these defaults off: guards, split, spans")
    parser.add_argument("--ct2-direct", action="store_true", help="add CTranslate2 called directly")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child process's setting, as JSON
    args = parser.parse_args()
    if args.one:
        return run_one(json.loads(Path(args.one).read_text()))
    if args.model is None or (args.hf and args.lenpen != 0):
        parser.error("-m MODEL is required" if args.model is None else "--hf needs --lenpen 0")
    sentences = (args.data / f"test2016.{args.src}").read_text(encoding="utf-8").splitlines()
    references = (args.data / f"test2016.{args.tgt}").read_text(encoding="utf-8").splitlines()
    sentences, references = sentences[: args.lines or None], references[: args.lines or None]
    print(f"conditions: {conditions()}")
    print(f"model: {args.model}; test2016 {args.src}->{args.tgt}, {len(sentences):,} sentences, batch "
          f"{args.batch_size}, lenpen {args.lenpen:g}, median of {args.repeats} after a warm-up\n", flush=True)  # fmt: skip
    rows, outputs = [], {}  # outputs: the first setting's translations of each engine and beam
    with tempfile.TemporaryDirectory() as tmp:
        for setting in settings_of(args, Path(tmp)):
            (Path(tmp) / "setting.json").write_text(json.dumps({**setting, "sentences": sentences}))
            with open(Path(tmp) / "out.json", "w") as out:
                _, rss = run_measured([sys.executable, __file__, "--one", Path(tmp) / "setting.json"], stdout=out)
            result = json.loads((Path(tmp) / "out.json").read_text())
            output, name = result["output"], f"{setting['engine']}.{setting['label']}.beam{setting['beam']}"
            name += ".graphs" * setting["graphs"] + (f".sync{setting['sync_every']}" if setting["sync_every"] else "")
            name += f".no-{setting['off']}" if setting["off"] else ""
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{name}.{args.tgt}").write_text("".join(f"{line}\n" for line in output))
            outputs[setting["engine"], setting["beam"]] = outputs.get((setting["engine"], setting["beam"]), output)
            before = outputs.get(("pytorch", setting["beam"])) if setting["engine"] == "transformers" else None
            if setting["engine"] == "ctranslate2-direct":
                before = outputs.get(("ctranslate2", setting["beam"]))
            if args.against and (args.against / f"{name}.{args.tgt}").exists():
                before = (args.against / f"{name}.{args.tgt}").read_text().splitlines()
            same = f"{sum(a == b for a, b in zip(before, output))} of {len(before)}" if before else ""
            bleu = sacrebleu.corpus_bleu(output, [references]).score
            rows.append([f"beam {setting['beam']}", setting["engine"], setting["label"], setting["off"] or "",
                         "yes" if setting["graphs"] else "", setting["sync_every"] or "", result["per_s"], f"{bleu:.2f}",
                         rss, same])  # fmt: skip
            print(" ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
    print_table(["search", "engine", "precision", "default off", "CUDA graphs", "host reads every", "sentences/s",
                 "BLEU", "peak RSS MiB", "lines identical"], rows)  # fmt: skip


if __name__ == "__main__":
    main()
