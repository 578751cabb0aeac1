"""Terminology on Multi30k: do the glossary's terms appear, what do they do to BLEU and chrF, what do they cost.

    python bench/terminology.py -m MODEL [--data ../shared/data/multi30k] [--split test2016] [--lenpen 2.2]
        [--beam 5] [--terms 2] [--lines N] [--speed-lines 200] [--marian [--marian-lines 40]]

The terms: each source line and its reference are aligned by eflomal (pip install eflomal; trained on
the training pairs with these, lowercased, words stripped of punctuation); a source word of three or
more letters aligned to exactly one reference word of four or more, which is aligned to it alone, is a
candidate, and the reference word its target term. Each line gets up to --terms (the first, left to
right) of the candidates that the unconstrained translation misses (the "missed" set), and in a
second run those it already holds (the "held" set). Each line is translated with its own terms as a
one-line glossary (TextTranslator.translate_hypotheses' terms).

Reported: the share of terms in the output (as written, and as a whole word), BLEU and chrF against
the references without and with the terms, for the held set the share of lines whose translation
stays exactly the same, and the speed of beam search with each line's terms against without (lines
with terms only; the fastest of two runs each), at batch 64 and 1. --marian adds the speed on a
MarianMT model of opus-mt-en-de's shape with random weights (built as bench/marian_import.py does;
the terms its 8k SentencePiece vocabulary cannot write left out).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORD = re.compile(r"^\W+|\W+$")


def words(line: str) -> list[str]:
    return [WORD.sub("", w) for w in line.split()]


def alignments(data: Path, sources: list[str], targets: list[str]) -> list[set[tuple[int, int]]]:
    try:
        from eflomal import Aligner
    except ImportError:
        sys.exit("the terms need eflomal: pip install eflomal")
    train = [(data / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de")]
    with tempfile.TemporaryDirectory() as tmp:
        src, tgt, links = Path(tmp) / "src", Path(tmp) / "tgt", Path(tmp) / "fwd"
        for path, lines in ((src, train[0] + sources), (tgt, train[1] + targets)):
            path.write_text("".join(" ".join(words(line.lower())) + "\n" for line in lines), encoding="utf-8")
        with open(src, encoding="utf-8") as s, open(tgt, encoding="utf-8") as t:
            Aligner().align(s, t, links_filename_fwd=str(links), quiet=True)
        rows = links.read_text().splitlines()[len(train[0]) :]
    return [{tuple(map(int, pair.split("-"))) for pair in row.split()} for row in rows]


def candidates(source: str, reference: str, links: set[tuple[int, int]]) -> list[tuple[str, str]]:
    """(source word, reference word) pairs aligned one to one, in source order."""
    src, ref = words(source), words(reference)
    out = []
    for i, word in enumerate(src):
        linked = [j for a, j in links if a == i]
        if len(word) < 3 or not word.isalpha() or len(linked) != 1:
            continue
        j = linked[0]
        if j < len(ref) and len(ref[j]) >= 4 and ref[j].isalpha() and [a for a, b in links if b == j] == [i]:
            out.append((word, ref[j]))
    return out


def term_sets(sources, references, plain, links, most):
    """Per line, up to `most` terms the plain translation misses, and up to `most` it holds."""
    from mtkit.text.glossary import Term

    missed, held = [], []
    for n, (source, reference, translation, linked) in enumerate(zip(sources, references, plain, links), 1):
        found = candidates(source, reference, linked)
        present = set(words(translation))
        origin = f"line {n}"
        missed.append([Term(t, s, origin) for s, t in found if t not in present][:most])
        held.append([Term(t, s, origin) for s, t in found if t in present][:most])
    return missed, held


def translate(translator, sources, terms=None, repeats=1):
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        found = translator.translate_hypotheses(sources, terms=terms)
        best = min(best, time.perf_counter() - started)
        out = [nbest[0][1] if nbest else "" for nbest in found]
    return out, best


def term_share(terms, outputs) -> tuple[float, float]:
    total = sum(map(len, terms))
    written = sum(term.target in out for ts, out in zip(terms, outputs) for term in ts)
    whole = sum(term.target in words(out) for ts, out in zip(terms, outputs) for term in ts)
    return 100 * written / max(total, 1), 100 * whole / max(total, 1)


def writable(translator, terms):
    """The terms the translator's target vocabulary can write (an imported one may lack a letter)."""
    from mtkit.text.tokenizer import UNK_ID

    return [[t for t in ts if UNK_ID not in translator.tgt_tokenizer.encode_batch([t.target])[0]] for ts in terms]


def speed_rows(name, make, sources, terms, lines):
    rows = []
    terms = writable(make(1), terms)
    chosen = [i for i, ts in enumerate(terms) if ts][:lines]
    subset, subset_terms = [sources[i] for i in chosen], [terms[i] for i in chosen]
    for batch in (64, 1):
        translator = make(batch)
        _, plain = translate(translator, subset, repeats=2)
        _, guided = translate(translator, subset, subset_terms, repeats=2)
        rows.append([f"speed, {name}, batch {batch}", f"{len(subset) / plain:.1f} lines/s",
                     f"{len(subset) / guided:.1f} lines/s", f"{plain / guided:.2f}x"])  # fmt: skip
    return rows


def marian_model(data: Path, root: Path) -> Path:
    import subprocess

    from common import mtkit_command
    from marian_import import build

    built = build(data, root)
    subprocess.run(mtkit_command("import", built, "-o", root / "marian.pt"), check=True, capture_output=True)
    return root / "marian.pt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--split", default="test2016")
    parser.add_argument("--lenpen", type=float, default=1.0)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--terms", type=int, default=2, help="terms a line, at most")
    parser.add_argument("--lines", type=int, default=0, help="the first N lines only (0: all)")
    parser.add_argument("--speed-lines", type=int, default=200, help="lines with terms timed at batch 1")
    parser.add_argument("--marian", action="store_true", help="also time a MarianMT-shaped model")
    parser.add_argument("--marian-lines", type=int, default=40, help="lines with terms timed on it")
    args = parser.parse_args()
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.translation.translate import Translator

    sources, references = ((args.data / f"{args.split}.{lang}").read_text(encoding="utf-8").splitlines()
                           for lang in ("en", "de"))  # fmt: skip
    if args.lines:
        sources, references = sources[: args.lines], references[: args.lines]
    model_file = load_model_file(args.model)

    def make(batch: int, model=model_file) -> Translator:
        cfg = SearchConfig(beam=args.beam, lenpen=args.lenpen)
        return Translator(model, cfg, device="cpu", batch_size=batch)

    translator = make(64)
    plain, _ = translate(translator, sources)
    missed, held = term_sets(sources, references, plain, alignments(args.data, sources, references), args.terms)
    rows = []
    with_missed, _ = translate(translator, sources, missed)
    with_held, _ = translate(translator, sources, held)
    for name, outputs in (("without terms", plain), ("with the missed terms", with_missed),
                          ("with the held terms", with_held)):  # fmt: skip
        bleu = sacrebleu.corpus_bleu(outputs, [references]).score
        chrf = sacrebleu.corpus_chrf(outputs, [references]).score
        rows.append([f"{args.split}: {name}", f"BLEU {bleu:.2f}", f"chrF {chrf:.2f}", ""])
    for name, terms, outputs in (("missed", missed, with_missed), ("held", held, with_held)):
        written, whole = term_share(terms, outputs)
        lines = sum(1 for ts in terms if ts)
        rows.append([f"terms {name}: {sum(map(len, terms)):,} in {lines:,} lines", f"{written:.1f}% as written",
                     f"{whole:.1f}% as words", ""])  # fmt: skip
    with_terms = [i for i, ts in enumerate(held) if ts]
    same = sum(with_held[i] == plain[i] for i in with_terms)
    rows.append(["held terms: translation unchanged", f"{100 * same / max(len(with_terms), 1):.1f}%",
                 f"of {len(with_terms):,} lines", ""])  # fmt: skip
    rows += speed_rows("this model", make, sources, missed, args.speed_lines)
    print_table(["measure", "without / value", "with", "ratio"], rows)  # before the slow part
    if args.marian:
        with tempfile.TemporaryDirectory() as tmp:
            marian = load_model_file(marian_model(args.data, Path(tmp)))
            rows += speed_rows("MarianMT shape, random", lambda b: make(b, marian), sources, missed, args.marian_lines)
    print(f"{args.split}, model {args.model}, beam {args.beam}, lenpen {args.lenpen}; {conditions()}")
    print_table(["measure", "without / value", "with", "ratio"], rows)


if __name__ == "__main__":
    main()
