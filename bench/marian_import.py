"""`mtkit import` at OPUS-MT's size: the time it takes and how exactly the imported model matches.

    python bench/marian_import.py [--data ../shared/data/multi30k] [--lines 100]

Builds, offline, a MarianMTModel of opus-mt-en-de's shape (6+6 layers, d_model 512, 8 heads, FFN
2048, swish, a final_logits_bias; random weights) with two 8k SentencePiece models trained on
Multi30k's training set and their joint vocab.json, saved as transformers saves it; then imports it
and prints: the import's time and peak memory, the share of test2016 lines tokenized exactly as
MarianTokenizer does (each side), the largest logit difference to transformers over --lines
sentences, and how many greedy translations of them equal `model.generate`'s (a random model's
output, 20 tokens at most: a check of the computation, not of quality).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from common import DEFAULT_MULTI30K, REPO, conditions, mtkit_command, print_table, run_measured


def build(data: Path, root: Path) -> Path:
    import sentencepiece as spm
    import transformers

    for lang in ("en", "de"):
        spm.SentencePieceTrainer.train(input=str(data / f"train.{lang}"), model_prefix=str(root / lang),
                                       vocab_size=8000, hard_vocab_limit=False, model_type="unigram",
                                       character_coverage=0.9995,
                                       minloglevel=2)  # fmt: skip
    pieces = set()
    for lang in ("en", "de"):
        processor = spm.SentencePieceProcessor(model_file=str(root / f"{lang}.model"))
        pieces |= {processor.id_to_piece(i) for i in range(processor.get_piece_size())}
    ordered = ["</s>", "<unk>"] + sorted(pieces - {"</s>", "<unk>", "<s>"}) + ["<pad>"]
    (root / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(ordered)}), encoding="utf-8")
    pad = len(ordered) - 1
    config = transformers.MarianConfig(
        vocab_size=len(ordered), decoder_vocab_size=len(ordered), d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
        max_position_embeddings=512, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        activation_function="swish", scale_embedding=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()
    directory = root / "opus-mt-shaped"
    model.save_pretrained(directory)
    transformers.MarianTokenizer(str(root / "en.model"), str(root / "de.model"), str(root / "vocab.json")).save_pretrained(directory)  # fmt: skip
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--lines", type=int, default=100)
    args = parser.parse_args()
    import transformers

    sys.path.insert(0, str(REPO))
    from mtkit.decoding.search import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.text.tokenizer import BOS_ID, EOS_ID, UNPRODUCED
    from mtkit.translation.translate import Translator

    print(f"conditions: {conditions()}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = build(args.data, Path(tmp))
        seconds, rss = run_measured(mtkit_command("import", directory, "-o", Path(tmp) / "m.pt"))
        model_file = load_model_file(Path(tmp) / "m.pt")
        size = sum(t.numel() for name, t in model_file.weights.items() if name != "src_embed.tokens.weight")
        rows.append([f"mtkit import ({size / 1e6:.1f}M parameters)", f"{seconds:.1f} s, peak {rss:,.0f} MiB"])
        tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
        hf_model = transformers.MarianMTModel.from_pretrained(directory).eval()
        hf = model_file.src_tokenizer._hf
        to_mtkit = {i: hf.token_to_id(t) if hf.token_to_id(t) is not None else hf.token_to_id(UNPRODUCED + t)
                    for t, i in tokenizer.get_vocab().items()}  # fmt: skip
        to_mtkit[tokenizer.pad_token_id] = BOS_ID
        for side, lang, ours in (
            ("source", "en", model_file.src_tokenizer),
            ("target", "de", model_file.tgt_tokenizer),
        ):
            lines = (args.data / f"test2016.{lang}").read_text(encoding="utf-8").splitlines()
            theirs = tokenizer(lines)["input_ids"] if side == "source" else tokenizer(text_target=lines)["input_ids"]
            same = sum(o + [EOS_ID] == [to_mtkit[i] for i in t] for o, t in zip(ours.encode_batch(lines), theirs))
            rows.append([f"test2016.{lang} tokenized as MarianTokenizer ({side})", f"{same:,} of {len(lines):,} lines"])
        sources = (args.data / "test2016.en").read_text(encoding="utf-8").splitlines()[: args.lines]
        model = model_file.build_model()
        columns = torch.tensor([to_mtkit[i] for i in range(len(to_mtkit)) if i != tokenizer.pad_token_id])
        real = [i for i in range(len(to_mtkit)) if i != tokenizer.pad_token_id]
        worst = 0.0
        with torch.no_grad():
            for source in sources[:10]:
                src = tokenizer(source, return_tensors="pt")["input_ids"]
                tgt_in = torch.tensor([[tokenizer.pad_token_id] + src[0, :-1].tolist()])
                expected = hf_model(input_ids=src, decoder_input_ids=tgt_in).logits[..., real]
                got = model(src.apply_(to_mtkit.get), tgt_in.apply_(to_mtkit.get))[..., columns]
                worst = max(worst, float((got - expected).abs().max()))
        rows.append(["largest logit difference, 10 sentences", f"{worst:.2e}"])
        cfg = SearchConfig(beam=1, max_len_a=0, max_len_b=20)
        ours = Translator(model_file, cfg, device="cpu", precision="fp32").translate(sources)
        batch = tokenizer(sources, return_tensors="pt", padding=True)
        with torch.no_grad():
            generated = hf_model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=20,
                                          forced_eos_token_id=None, bad_words_ids=[[tokenizer.pad_token_id]])  # fmt: skip
        theirs = tokenizer.batch_decode(generated, skip_special_tokens=True)
        rows.append(["greedy translations equal to generate()", f"{sum(a == b for a, b in zip(ours, theirs))} of {len(sources)}"])  # fmt: skip
    print_table(["check", "result"], rows)


if __name__ == "__main__":
    main()
