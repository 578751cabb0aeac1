"""Documents through translation (`mtkit translate-file`): Word and PowerPoint files with mixed
formatting, against the same text translated as plain lines.

    python bench/documents.py -m MODEL [--data ../shared/data/multi30k] [--beam 5] [--pages 100] [--repeats 2]

Speed: a generated document of about --pages pages (Word: paragraphs of four Multi30k sentences,
from val, test2016 and train, 25 sentences a page; PowerPoint: slides of five such paragraphs),
each sentence with one to three runs of one to four words in bold, italic, underline or a colour
(in a --formatted share of the paragraphs, all by default; the others in one formatting), and a
heading every tenth paragraph. Its translation, reading and writing the file included, is
timed against translating the same paragraphs as lines sentence by sentence (`translate
--split-sentences`); the fastest of --repeats runs each, in turn.

Quality: Multi30k test2016 as a .docx, a paragraph per sentence with the same random runs (each in a
colour of its own, so that it can be found again). BLEU and chrF of the translated document's text
against the plain translation's; and for each single-word run, whether the target words it holds
are those that eflomal (pip install eflomal; trained with the Multi30k training pairs) aligns to its
word in the plain translation (from the first to the last), as bench/markup.py measures for HTML.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, print_table
from markup import reference_alignment

STYLES = ["bold", "italic", "underline", "colour"]


def runs_of(sentence: str, rng: random.Random) -> list[tuple[str, str | None]]:
    """The sentence as runs (text, style or None), one to three styled spans of one to four words."""
    words = sentence.split()
    styled: dict[int, int] = {}  # word index -> span number
    for n in range(rng.randint(1, 3)):
        first = rng.randrange(len(words))
        last = min(len(words), first + rng.randint(1, 4))
        if not any(i in styled for i in range(first, last)):
            styled.update({i: n for i in range(first, last)})
    runs: list[tuple[str, str | None]] = []
    for i, word in enumerate(words):
        span = styled.get(i)
        text = (" " if i else "") + word
        key = None if span is None else f"{span}"
        if runs and runs[-1][1] == key and key is not None:
            runs[-1] = (runs[-1][0] + text, key)
        elif key is not None and i:
            runs += [(" ", None), (word, key)]
        else:
            runs.append((text, key))
    return [(text, None if key is None else rng.choice(STYLES)) for text, key in runs]


def style_run(run, style: str | None, colour=None) -> None:
    from docx.shared import RGBColor

    if style == "bold":
        run.bold = True
    elif style == "italic":
        run.italic = True
    elif style == "underline":
        run.underline = True
    elif style == "colour":
        run.font.color.rgb = RGBColor(0xC0, 0x20, 0x20)
    if colour is not None:
        run.font.color.rgb = RGBColor(*colour)


def word_document(paragraphs: list[list[list[tuple[str, str | None]]]]) -> bytes:
    import docx

    document = docx.Document()
    for index, sentences in enumerate(paragraphs):
        if index % 10 == 0:
            document.add_heading(f"Part {index // 10 + 1}", 2)
        paragraph = document.add_paragraph()
        for n, runs in enumerate(sentences):
            for k, (text, style) in enumerate(runs):
                style_run(paragraph.add_run((" " if n and not k else "") + text), style)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def slides(paragraphs: list[list[list[tuple[str, str | None]]]]) -> bytes:
    import pptx
    from pptx.util import Inches

    presentation = pptx.Presentation()
    for first in range(0, len(paragraphs), 5):
        slide = presentation.slides.add_slide(presentation.slide_layouts[6])
        frame = slide.shapes.add_textbox(Inches(0.5), Inches(0.5), Inches(9), Inches(6)).text_frame
        for index, sentences in enumerate(paragraphs[first : first + 5]):
            paragraph = frame.paragraphs[0] if index == 0 else frame.add_paragraph()
            for n, runs in enumerate(sentences):
                for k, (text, style) in enumerate(runs):
                    run = paragraph.add_run()
                    run.text = (" " if n and not k else "") + text
                    run.font.bold = style == "bold" or None
                    run.font.italic = style in ("italic", "underline", "colour") or None
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def speed(args, translator_for, paragraphs: list[list[list[tuple[str, str | None]]]]) -> list[list[str]]:
    from mtkit.documents.formats import read_document
    from mtkit.translation.markup import translate_document

    lines = [" ".join("".join(text for text, _ in runs).strip() for runs in sentences) for sentences in paragraphs]
    sentences = sum(len(p) for p in paragraphs)
    files = {"docx": word_document(paragraphs), "pptx": slides(paragraphs)}
    plain_translator = translator_for()
    plain_translator.set_segmenter(split_sentences=True)
    plain_translator.translate(lines[:20])  # warm-up
    seconds: dict[str, list[float]] = {"plain": [], "docx": [], "pptx": []}
    for _ in range(args.repeats):  # in turn: a slow spell of the machine hits each alike
        start = time.perf_counter()
        plain_translator.translate(lines)
        seconds["plain"].append(time.perf_counter() - start)
        for kind, data in files.items():
            translator = translator_for()
            start = time.perf_counter()
            translate_document(translator, read_document(data, f"bench.{kind}", kind), "de")
            seconds[kind].append(time.perf_counter() - start)
    plain_rate = sentences / min(seconds["plain"])
    rows = [["plain lines, --split-sentences", f"{plain_rate:.1f}", "", ""]]
    for kind in ("docx", "pptx"):
        rate = sentences / min(seconds[kind])
        rows.append(
            [f".{kind}, {len(files[kind]) / 1024:,.0f} KiB", f"{rate:.1f}", f"{rate / plain_rate:.0%}", ">= 85%"]
        )
    return rows


def quality(args, translator_for, sources: list[str], references: list[str]) -> list[list[str]]:
    import docx
    from docx.shared import RGBColor

    from mtkit.documents.formats import read_document
    from mtkit.translation.markup import translate_document

    rng = random.Random(args.seed)
    document, singles = docx.Document(), []  # singles: (paragraph, word index, colour) of each single-word run
    for index, sentence in enumerate(sources):
        paragraph, words = document.add_paragraph(), 0
        for n, (text, style) in enumerate(runs_of(sentence, rng)):
            colour = None if style is None else (index % 200, n, 7)
            style_run(paragraph.add_run(text), style, colour)
            if style is not None and len(text.split()) == 1:
                singles.append((index, words, RGBColor(*colour)))
            words += len(text.split())
    data = io.BytesIO()
    document.save(data)
    plain_translator = translator_for()
    plain_translator.set_segmenter(split_sentences=True)
    plain = plain_translator.translate(sources)
    out = translate_document(translator_for(), read_document(data.getvalue(), "test.docx", "docx"), "de")
    translated = docx.Document(io.BytesIO(out)).paragraphs
    texts = [p.text for p in translated]
    alignments = reference_alignment(args.data, sources, plain)
    placed = right = 0
    for index, word, colour in singles:
        aligned = sorted(j for i, j in alignments[index] if i == word)
        if not aligned or " ".join(texts[index].split()) != plain[index]:
            continue
        placed += 1
        got = run_words(translated[index], colour)
        right += bool(got) and (got[0], got[-1]) == (aligned[0], aligned[-1])
    bleu, plain_bleu = (sacrebleu.corpus_bleu(t, [references]).score for t in (texts, plain))
    chrf, plain_chrf = (sacrebleu.corpus_chrf(t, [references]).score for t in (texts, plain))
    same = sum(" ".join(t.split()) == p for t, p in zip(texts, plain))
    return [
        ["BLEU, document text / plain", f"{bleu:.2f} / {plain_bleu:.2f}", "within 0.5"],
        ["chrF, document text / plain", f"{chrf:.2f} / {plain_chrf:.2f}", ""],
        ["paragraphs whose words are the plain translation's", f"{same / len(texts):.1%}", ""],
        ["single-word runs placed as eflomal aligns them", f"{right / max(placed, 1):.1%} of {placed:,}", ">= 85%"],
    ]


def run_words(paragraph, colour) -> list[int]:
    """The indices of the paragraph's words that runs of this colour hold (a word a run cuts counts)."""
    text = "".join(run.text for run in paragraph.runs)
    word_of, word = [], -1  # each character's word (None for a space)
    for i, char in enumerate(text):
        word += not char.isspace() and (i == 0 or text[i - 1].isspace())
        word_of.append(None if char.isspace() else word)
    found, position = set(), 0
    for run in paragraph.runs:
        end = position + len(run.text)
        if run.font.color.type is not None and run.font.color.rgb == colour:
            found |= {w for w in word_of[position:end] if w is not None}
        position = end
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--lenpen", type=float, default=1.0)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--formatted", type=float, default=1.0, help="speed: the share of paragraphs with runs")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip", choices=["speed", "quality"], help="leave one part out")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.translation.translate import Translator

    model_file = load_model_file(args.model)
    cfg = SearchConfig(beam=args.beam, lenpen=args.lenpen)
    translator_for = lambda: Translator(model_file, cfg, "cpu")  # noqa: E731
    read = lambda name: (args.data / name).read_text(encoding="utf-8").splitlines()  # noqa: E731
    print(f"conditions: {conditions()}")
    print(f"model: {args.model}; en->de, beam {args.beam}, lenpen {args.lenpen}, seed {args.seed}\n")
    if args.skip != "speed":
        rng = random.Random(args.seed)
        pool = (read("val.en") + read("test2016.en") + read("train.en"))[: 25 * args.pages]
        paragraphs = [[runs_of(s, rng) for s in pool[i : i + 4]] for i in range(0, len(pool), 4)]
        for index in range(len(paragraphs)):  # --formatted: the share of paragraphs with runs; the rest plain
            if rng.random() >= args.formatted:
                paragraphs[index] = [[("".join(text for text, _ in runs), None)] for runs in paragraphs[index]]
        print(f"speed: {len(pool):,} sentences in {len(paragraphs):,} paragraphs, {args.formatted:.0%} with runs")
        print_table(["translated", "sentences/s", "of plain", "target"], speed(args, translator_for, paragraphs))
    if args.skip != "quality":
        print("\nquality: test2016 as a .docx, a paragraph per sentence")
        rows = quality(args, translator_for, read("test2016.en"), read("test2016.de"))
        print_table(["measure", "value", "target"], rows)


if __name__ == "__main__":
    main()
