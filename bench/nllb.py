"""NLLB-200 and M2M100 at their published shapes: import time and memory, and translation speed of
mtkit, transformers' `generate` and the CTranslate2 export on the same imported model.

    python bench/nllb.py [--data ../shared/data/multi30k] [--shapes nllb-600m,m2m100-418m] [--lines 200]
        [--beam 4] [--length 24] [--engines mtkit,transformers,ctranslate2] [--work DIR]

Builds, offline, an M2M100ForConditionalGeneration of each shape (nllb-200-distilled-600M: 12+12
layers, d_model 1024, 16 heads, FFN 4096, 256,206 rows; m2m100_418M: the same layers, 128,112 rows)
with random weights (speed does not depend on the values), and a SentencePiece model (NLLB's BPE,
M2M100's unigram; 8k pieces trained on Multi30k) with the family's language codes; the rows the
tokenizer does not name are scored all the same, as the published models' are. Then, each in a
process of its own (its peak RSS is the table's): `mtkit import`, against the model's fp32 size; and
the first --lines sentences of test2016.en translated into German with beam --beam, no length
penalty, and every output --length tokens long (the length limit; a random model does not end
earlier), so that the engines do the same work: mtkit (fp32), transformers (fp32, batches of 32
sentences sorted by length, forced_bos_token_id), CTranslate2 (float32, `mtkit export --format
ctranslate2`). Timing covers translation only, not loading. The last column counts the
translations identical to mtkit's; not transformers': a random model writes mostly rows that no
token names, which mtkit drops and its tokenizers spell otherwise (tests/test_m2m100.py compares
the tokens).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from common import DEFAULT_MULTI30K, REPO, conditions, mtkit_command, print_table, run_measured

SHAPES = {
    "nllb-600m": dict(family="nllb", vocab_size=256206, source="eng_Latn", target="deu_Latn"),
    "m2m100-418m": dict(family="m2m100", vocab_size=128112, source="en", target="de"),
}
LAYERS = dict(d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
              decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096)  # fmt: skip


def build(shape: str, data: Path, root: Path) -> Path:
    """The shape's transformers directory under root (built once)."""
    import sentencepiece as spm
    import transformers

    directory = root / shape
    if (directory / "config.json").is_file():
        return directory
    root.mkdir(parents=True, exist_ok=True)
    spec = SHAPES[shape]
    kind = "bpe" if spec["family"] == "nllb" else "unigram"
    inputs = ",".join(str(data / f"train.{lang}") for lang in ("en", "de", "fr", "cs"))
    spm.SentencePieceTrainer.train(input=inputs, model_prefix=str(root / kind), vocab_size=8000, model_type=kind,
                                   character_coverage=1.0, minloglevel=2)  # fmt: skip
    if spec["family"] == "nllb":
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        tokenizer = transformers.NllbTokenizer(str(root / f"{kind}.model"), additional_special_tokens=FAIRSEQ_LANGUAGE_CODES)  # fmt: skip
    else:
        processor = spm.SentencePieceProcessor(model_file=str(root / f"{kind}.model"))
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        vocab.update((processor.id_to_piece(i), 1 + i) for i in range(3, processor.get_piece_size()))
        (root / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        tokenizer = transformers.M2M100Tokenizer(str(root / "vocab.json"), str(root / f"{kind}.model"))
    config = transformers.M2M100Config(vocab_size=spec["vocab_size"], max_position_embeddings=1024, scale_embedding=True,
                                       dropout=0.1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                       decoder_start_token_id=2, **LAYERS)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def translate(
    engine: str, shape: str, model: Path, lines: list[str], beam: int, length: int
) -> tuple[list[str], float]:
    """The translations of one engine, and the seconds they took (loading not included)."""
    spec = SHAPES[shape]
    if engine == "transformers":
        import transformers

        directory = model
        tokenizer_class = transformers.NllbTokenizer if spec["family"] == "nllb" else transformers.M2M100Tokenizer
        tokenizer = tokenizer_class.from_pretrained(directory, src_lang=spec["source"], tgt_lang=spec["target"])
        hf = transformers.M2M100ForConditionalGeneration.from_pretrained(directory).eval()
        forced = tokenizer.convert_tokens_to_ids(
            spec["target"] if spec["family"] == "nllb" else f"__{spec['target']}__"
        )
        order = sorted(range(len(lines)), key=lambda i: len(tokenizer(lines[i])["input_ids"]))
        out = [""] * len(lines)
        started = time.perf_counter()
        with torch.no_grad():
            for start in range(0, len(order), 32):
                chunk = order[start : start + 32]
                batch = tokenizer([lines[i] for i in chunk], return_tensors="pt", padding=True)
                generated = hf.generate(**batch, num_beams=beam, do_sample=False, max_new_tokens=length,
                                        length_penalty=0.0, forced_bos_token_id=forced)  # fmt: skip
                for i, row in zip(chunk, generated.tolist()):  # not decoded: its tokenizer fails on unnamed rows
                    out[i] = " ".join(map(str, row))
        return out, time.perf_counter() - started
    from mtkit.decoding.search import SearchConfig
    from mtkit.interop.engines import Decoding, build_translator

    cfg = SearchConfig(beam=beam, lenpen=0.0, max_len_a=0, max_len_b=length, loop_ngram=0)
    name = "pytorch" if engine == "mtkit" else "ctranslate2"
    decoding = Decoding(search=cfg, engine=name, device="cpu", precision="fp32", split_sentences=False)
    translator = build_translator(decoding, [model], spec["source"], spec["target"])
    started = time.perf_counter()
    out = translator.translate(lines)
    return out, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--shapes", default="nllb-600m,m2m100-418m")
    parser.add_argument("--engines", default="mtkit,transformers,ctranslate2")
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "bench-nllb")
    parser.add_argument("--engine-run", nargs=3, metavar=("ENGINE", "SHAPE", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    lines = (args.data / "test2016.en").read_text(encoding="utf-8").splitlines()[: args.lines]
    if args.engine_run:  # the child process of one engine
        engine, shape, model = args.engine_run
        out, seconds = translate(engine, shape, Path(model), lines, args.beam, args.length)
        print(json.dumps({"seconds": seconds, "translations": out}))
        return
    rows = []
    for shape in args.shapes.split(","):
        directory = build(shape, args.data, args.work)
        model = args.work / f"{shape}.pt"
        seconds, peak = run_measured(mtkit_command("import", directory, "-o", model, "--force"))
        parameters = _parameters(directory)
        fp32 = parameters * 4 / 2**20
        rows.append([shape, "mtkit import", f"{parameters / 1e6:,.0f}M parameters", f"{seconds:.1f} s",
                     f"{peak:,.0f} MiB ({peak / fp32:.2f}x the fp32 size)", ""])  # fmt: skip
        ct2 = args.work / f"{shape}-ct2"
        if "ctranslate2" in args.engines:
            run_measured(mtkit_command("export", "-m", model, "-o", ct2, "--format", "ctranslate2", "--force"))
        reference = None
        for engine in args.engines.split(","):
            where = {"mtkit": model, "transformers": directory, "ctranslate2": ct2}[engine]
            result = args.work / f"{shape}-{engine}.json"
            with open(result, "wb") as out:
                _, peak = run_measured([sys.executable, __file__, "--data", str(args.data), "--lines", str(args.lines),
                                        "--beam", str(args.beam), "--length", str(args.length),
                                        "--engine-run", engine, shape, str(where)], stdout=out)  # fmt: skip
            found = json.loads(result.read_text(encoding="utf-8"))
            reference = reference or found["translations"]
            same = sum(a == b for a, b in zip(found["translations"], reference))
            rows.append([shape, engine, f"{len(lines) / found['seconds']:.2f} sentences/s", f"{found['seconds']:.1f} s",
                         f"{peak:,.0f} MiB", "not compared" if engine == "transformers" else f"{same}/{len(lines)}"])  # fmt: skip
    print(f"conditions: {conditions()}; beam {args.beam}, {args.length} output tokens, {len(lines)} lines")
    print_table(["shape", "step", "size or speed", "time", "peak memory", "same as mtkit"], rows)


def _parameters(directory: Path) -> int:
    """The model's parameters, read from the safetensors header (tied matrices once)."""
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), framework="pt") as weights:
        shapes = [weights.get_slice(name).get_shape() for name in weights.keys() if name != "lm_head.weight"]
    return sum(int(torch.tensor(shape).prod()) for shape in shapes)


if __name__ == "__main__":
    main()
