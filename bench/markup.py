"""Markup through translation on Multi30k test2016: the sentences with spans wrapped in markup,
translated as HTML (`translate --format html`), against the same sentences as plain text.

    python bench/markup.py -m MODEL [--data ../shared/data/multi30k] [--lines N] [--seed 1] [--beam 1] [--repeats 3]

Markup (seeded): in each sentence one to three random spans of one to four words go in <b>, <i> or
<a href="...">, nested where two spans nest; every fourth sentence gets an <img> after a random
word, and every fifth is a paragraph, <p>...</p>. The table gives:
- the share of lines whose output nests properly and holds the source's elements, attributes as written;
- BLEU and chrF of the output with its markup taken out, and of the plain translation (greedy search,
  or --beam);
- placement: for each single-word span, whether the target words it wraps are those that a
  reference aligner aligns to its word in the plain translation (the span from the first to the
  last). The reference is eflomal (pip install eflomal), trained on the Multi30k training pairs and
  these sentences with their translations together; its own alignment error rate is not known here;
- sentences/s of both, the fastest of --repeats runs each, in turn (--format html also aligns each segment: from the attention greedy search kept,
  or with beam search from a second pass).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, print_table

TAGS = ["b", "i", "a"]


def marked_up(sentence: str, rng: random.Random, index: int) -> tuple[str, dict[str, int]]:
    """The sentence with spans in markup, and for each single-word span's id its word index."""
    words = sentence.split()
    spans: list[tuple[int, int]] = []
    for _ in range(rng.randint(1, 3)):
        first = rng.randrange(len(words))
        last = min(len(words), first + rng.randint(1, 4))
        if all(last <= a or first >= b or (a <= first and last <= b) or (first <= a and b <= last) for a, b in spans):
            spans.append((first, last))  # nested or apart: never crossing
    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    single: dict[str, int] = {}
    for n, (first, last) in enumerate(sorted(spans, key=lambda s: (s[0], -s[1]))):
        tag = rng.choice(TAGS)
        attributes = f' id="s{n}"' + (f' href="/page/{n}"' if tag == "a" else "")
        opens.setdefault(first, []).append(f"<{tag}{attributes}>")
        closes.setdefault(last - 1, []).insert(0, f"</{tag}>")
        if last - first == 1:
            single[f"s{n}"] = first
    image = rng.randrange(len(words)) if index % 4 == 0 else -1
    out = []
    for i, word in enumerate(words):
        escaped = word.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        out.append("".join(opens.get(i, [])) + escaped + "".join(closes.get(i, [])))
        if i == image:
            out.append('<img src="photo.jpg" alt="">')
    text = " ".join(out)
    return (f"<p>{text}</p>" if index % 5 == 0 else text), single


class Wrapped(HTMLParser):
    """The start tags of a line, whether they nest properly, and the word indices inside each id."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.starts, self.stack, self.nested, self.words = [], [], True, {}
        self.open_ids: list[str | None] = []
        self.count, self.in_word = 0, False
        self.feed(text)
        self.close()
        self.nested &= not self.stack

    def handle_starttag(self, tag, attrs):
        self.starts.append(self.get_starttag_text())
        if tag != "img":
            self.stack.append(tag)
            self.open_ids.append(dict(attrs).get("id"))

    def handle_endtag(self, tag):
        self.nested &= bool(self.stack) and self.stack.pop() == tag
        if self.open_ids:
            self.open_ids.pop()

    def handle_data(self, data):
        for char in data:
            if char.isspace():
                self.in_word = False
                continue
            if not self.in_word:
                self.count, self.in_word = self.count + 1, True
            for element_id in filter(None, self.open_ids):
                self.words.setdefault(element_id, set()).add(self.count - 1)


def reference_alignment(data: Path, sources: list[str], targets: list[str]) -> list[set[tuple[int, int]]]:
    """eflomal's alignment of each source with its translation, trained with the training pairs."""
    try:
        from eflomal import Aligner
    except ImportError:
        sys.exit("the placement reference needs eflomal: pip install eflomal")
    train_src = (data / "train.en").read_text(encoding="utf-8").splitlines()
    train_tgt = (data / "train.de").read_text(encoding="utf-8").splitlines()
    with tempfile.TemporaryDirectory() as tmp:
        src, tgt, links = Path(tmp) / "src", Path(tmp) / "tgt", Path(tmp) / "fwd"
        src.write_text("".join(s.lower() + "\n" for s in train_src + sources), encoding="utf-8")
        tgt.write_text("".join(t.lower() + "\n" for t in train_tgt + targets), encoding="utf-8")
        with open(src, encoding="utf-8") as s, open(tgt, encoding="utf-8") as t:
            Aligner().align(s, t, links_filename_fwd=str(links), quiet=True)
        rows = links.read_text().splitlines()[len(train_src) :]
    return [{tuple(map(int, pair.split("-"))) for pair in row.split()} for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--lines", type=int, default=0, help="the first N lines only (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="speeds: the fastest of this many runs of each")
    parser.add_argument(
        "--beam", type=int, default=1, help="beam size (1: greedy, whose attention gives the alignment)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.text.segments import plain_text
    from mtkit.translation.markup import MarkupTranslator
    from mtkit.translation.translate import Translator

    sources = (args.data / "test2016.en").read_text(encoding="utf-8").splitlines()[: args.lines or None]
    references = (args.data / "test2016.de").read_text(encoding="utf-8").splitlines()[: args.lines or None]
    rng = random.Random(args.seed)
    lines, singles = zip(*(marked_up(s, rng, i) for i, s in enumerate(sources)))
    model_file, cfg = load_model_file(args.model), SearchConfig(beam=args.beam)
    translator = Translator(model_file, cfg, "cpu")
    markup = MarkupTranslator(Translator(model_file, cfg, "cpu"), "html")  # its own: it keeps greedy's attention
    translator.translate(sources[:50]), markup.translate(list(lines[:50]))  # warm-up
    seconds: dict[str, list[float]] = {"plain": [], "markup": []}
    for _ in range(args.repeats):  # in turn, so that a slow spell of the machine hits both alike
        start = time.perf_counter()
        plain = translator.translate(sources)
        seconds["plain"].append(time.perf_counter() - start)
        start = time.perf_counter()
        marked = markup.translate(list(lines))
        seconds["markup"].append(time.perf_counter() - start)
    plain_rate, markup_rate = (len(sources) / min(seconds[kind]) for kind in ("plain", "markup"))

    kept = sum(Wrapped(out).nested and sorted(Wrapped(out).starts) == sorted(Wrapped(line).starts)
               for line, out in zip(lines, marked))  # fmt: skip
    stripped = [plain_text(out, "html") for out in marked]
    alignments = reference_alignment(args.data, sources, plain)
    placed = right = 0
    for out, single, alignment, plain_out, text in zip(marked, singles, alignments, plain, stripped):
        if text != plain_out:
            continue  # not the plain translation's words (never so here: every line is one segment)
        wrapped = Wrapped(out).words
        for element_id, word in single.items():
            aligned = sorted(j for i, j in alignment if i == word)
            if not aligned:
                continue
            placed += 1
            got = sorted(wrapped.get(element_id, set()))
            right += bool(got) and (got[0], got[-1]) == (aligned[0], aligned[-1])
    plain_bleu, plain_chrf = sacrebleu.corpus_bleu(plain, [references]), sacrebleu.corpus_chrf(plain, [references])
    bleu, chrf = sacrebleu.corpus_bleu(stripped, [references]), sacrebleu.corpus_chrf(stripped, [references])
    print(f"conditions: {conditions()}")
    print(f"model: {args.model}; test2016 en->de, {len(sources):,} lines, beam {args.beam}, markup seed {args.seed}\n")
    print_table(
        ["measure", "value", "target"],
        [["well-formed, with the source's elements", f"{kept / len(lines):.1%}", "100%"],
         ["BLEU, markup taken out / plain", f"{bleu.score:.2f} / {plain_bleu.score:.2f}", "within 0.5"],
         ["chrF, markup taken out / plain", f"{chrf.score:.2f} / {plain_chrf.score:.2f}", ""],
         ["single-word spans placed as eflomal aligns them", f"{right / max(placed, 1):.1%} of {placed:,}", ">= 85%"],
         ["sentences/s, --format html / plain", f"{markup_rate:.1f} / {plain_rate:.1f} "
          f"({markup_rate / plain_rate - 1:+.0%})", "at most 15% slower"]],
    )  # fmt: skip


if __name__ == "__main__":
    main()
