"""PDF through translation (`mtkit translate-file x.pdf`): two PDFs made here from Multi30k test2016
(1,000 held-out sentences, each given a full stop where it has none), translated en->de, against the
same sentences translated as plain lines.

    python bench/pdf_files.py -m MODEL [--data ../shared/data/multi30k] [--beam 5] [--pictures DIR]

The PDFs: (1) a Word document exported by LibreOffice (`soffice --headless --convert-to pdf`, Debian's
libreoffice): paragraphs of four sentences with bold and italic runs, a heading every tenth, a part
in two columns and a table of three columns; (2) one laid out by PyMuPDF itself (its Story: HTML
paragraphs with bold and italic runs). For each: its pages before and after; the share of text
blocks of three words or more that mtkit's language identification (py3langid) calls German; the
characters set outside their page; BLEU (sacrebleu) of the translated PDF's text (read by poppler's
pdftotext where installed, else by PyMuPDF; ligatures read as their letters), all of it as one segment against the references
likewise, beside the plain translation of the same sentences in the same order joined the same
way; and the seconds of translate-file against the plain lines. --pictures: page 1 of the
LibreOffice PDF before and after, as PNG (pdftoppm).
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, conditions, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PER_PARAGRAPH = 4


def styled(sentence: str, rng: random.Random) -> list[tuple[str, str | None]]:
    """The sentence as runs: one span of one to three words in bold or italic, the rest plain."""
    words = sentence.split()
    first = rng.randrange(len(words))
    last = min(len(words), first + rng.randint(1, 3))
    style = rng.choice(["bold", "italic"])
    runs = [(" ".join(words[:first]) + " ", None), (" ".join(words[first:last]), style)]
    return [(text, s) for text, s in runs + [(" " + " ".join(words[last:]), None)] if text.strip()]


def ended(sentence: str) -> str:
    """A caption as a sentence that ends (Multi30k's often have no full stop: run together in a
    paragraph, two would read as one, in the PDF and not in the plain lines)."""
    return sentence if sentence.rstrip()[-1:] in ".!?" else sentence.rstrip() + "."


def layout(sources: list[str]) -> list[tuple[str, list[str]]]:
    """The document's parts in reading order: ("heading" | "paragraph" | "columns" | "cell", sentences)."""
    parts: list[tuple[str, list[str]]] = []
    index = 0
    while index < len(sources):
        n = len(parts)
        if n % 10 == 0:
            parts.append(("heading", sources[index : index + 1]))
            index += 1
        elif 40 <= n < 60:
            parts.append(("columns", sources[index : index + PER_PARAGRAPH]))
            index += PER_PARAGRAPH
        elif 60 <= n < 72:
            parts.append(("cell", sources[index : index + 1]))
            index += 1
        else:
            parts.append(("paragraph", sources[index : index + PER_PARAGRAPH]))
            index += PER_PARAGRAPH
    return parts


def word_pdf(parts: list[tuple[str, list[str]]], rng: random.Random, work: Path) -> bytes:
    import docx
    from docx.enum.section import WD_SECTION
    from docx.oxml.ns import qn
    from lxml import etree

    document = docx.Document()
    cells = [sentences[0] for kind, sentences in parts if kind == "cell"]
    table_done, columns_open = False, False
    for kind, sentences in parts:
        if (kind == "columns") != columns_open:  # a section break; the new section's columns
            section = document.add_section(WD_SECTION.CONTINUOUS)
            for old in section._sectPr.findall(qn("w:cols")):
                section._sectPr.remove(old)
            etree.SubElement(section._sectPr, qn("w:cols")).set(qn("w:num"), "1" if columns_open else "2")
            columns_open = not columns_open
        if kind == "heading":
            document.add_heading(sentences[0], level=2)
        elif kind == "cell":
            if not table_done:
                table = document.add_table(rows=len(cells) // 3, cols=3)
                table.style = "Table Grid"
                for k, text in enumerate(cells[: 3 * (len(cells) // 3)]):
                    table.cell(k // 3, k % 3).text = text
                table_done = True
        else:
            paragraph = document.add_paragraph()
            for sentence in sentences:
                for text, style in styled(sentence, rng) + [(" ", None)]:
                    run = paragraph.add_run(text)
                    run.bold, run.italic = style == "bold", style == "italic"
    path = work / "bench.docx"
    document.save(path)
    subprocess.run(["soffice", "--headless", "--convert-to", "pdf", "--outdir", str(work), str(path)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return (work / "bench.pdf").read_bytes()


def story_pdf(parts: list[tuple[str, list[str]]], rng: random.Random) -> bytes:
    import html

    import pymupdf

    body = []
    for kind, sentences in parts:
        if kind == "heading":
            body.append(f"<h2>{html.escape(sentences[0])}</h2>")
            continue
        runs = [run for sentence in sentences for run in styled(sentence, rng) + [(" ", None)]]
        tags = {"bold": "b", "italic": "i"}
        text = "".join(f"<{tags[s]}>{html.escape(t)}</{tags[s]}>" if s else html.escape(t) for t, s in runs)
        body.append(f"<p>{text}</p>")
    story, out = pymupdf.Story("".join(body)), io.BytesIO()
    writer = pymupdf.DocumentWriter(out)
    page, more = pymupdf.paper_rect("a4"), True
    while more:
        device = writer.begin_page(page)
        more, _ = story.place(page + (56, 56, -56, -56))
        story.draw(device)
        writer.end_page()
    writer.close()
    return out.getvalue()


def order_of(parts: list[tuple[str, list[str]]], table_rows: int) -> list[str]:
    """The sentences in the order the document holds them (the table's cells, row by row)."""
    cells = [sentences[0] for kind, sentences in parts if kind == "cell"][: 3 * table_rows]
    out = []
    for kind, sentences in parts:
        if kind == "cell":
            if cells:
                out += cells
                cells = []
        else:
            out += sentences
    return out


def pdf_text(data: bytes) -> str:
    """The PDF's text as a reader sees it (typeset ligatures such as "ﬁ" as their letters: NFKC)."""
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", "-", "-"], input=data, capture_output=True, check=True).stdout.decode()
    else:
        import pymupdf

        text = "\n".join(page.get_text() for page in pymupdf.open(stream=data, filetype="pdf"))
    return unicodedata.normalize("NFKC", text)


def measure(name: str, data: bytes, sentences: list[str], translator_for, plain_of, refs_of) -> list[list[object]]:
    import pymupdf

    from mtkit.documents.formats import read_document
    from mtkit.text.langid import identify
    from mtkit.translation.markup import translate_document

    started = time.perf_counter()
    out = translate_document(translator_for(), read_document(data, f"{name}.pdf", "pdf"), "de")
    seconds = time.perf_counter() - started
    before, after = pymupdf.open(stream=data, filetype="pdf"), pymupdf.open(stream=out, filetype="pdf")
    blocks = [b[4] for page in after for b in page.get_text("blocks") if len(b[4].split()) >= 3]
    german = sum(identify(" ".join(text.split()), ("en", "de"))[0] == "de" for text in blocks)
    outside = sum(
        len(span["text"])
        for page in after
        for block in page.get_text("dict")["blocks"]
        for line in block.get("lines", [])
        for span in line["spans"]
        if pymupdf.Rect(span["bbox"]) not in page.rect + (-0.5, -0.5, 0.5, 0.5)
    )
    joined = lambda lines: " ".join(" ".join(lines).split())  # noqa: E731
    reference = joined(refs_of(sentences))
    got = sacrebleu.corpus_bleu([joined([pdf_text(out)])], [[reference]]).score
    plain, plain_seconds = plain_of(sentences)
    plain_bleu = sacrebleu.corpus_bleu([joined(plain)], [[reference]]).score
    return [[name, f"{before.page_count} -> {after.page_count}", f"{german / max(len(blocks), 1):.1%} of {len(blocks)}",
             outside, f"{got:.2f}", f"{plain_bleu:.2f}", f"{got - plain_bleu:+.2f}", f"{seconds:.1f}",
             f"{plain_seconds:.1f}"]], out  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pictures", type=Path, help="write page 1 of the LibreOffice PDF before and after here")
    args = parser.parse_args()
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.translation.translate import Translator

    model_file = load_model_file(args.model)
    translator_for = lambda: Translator(model_file, SearchConfig(beam=args.beam), "cpu")  # noqa: E731
    sources = [ended(s) for s in (args.data / "test2016.en").read_text(encoding="utf-8").splitlines()]
    references = dict(zip(sources, (args.data / "test2016.de").read_text(encoding="utf-8").splitlines()))

    def plain_of(sentences: list[str]) -> tuple[list[str], float]:
        translator = translator_for()
        translator.set_segmenter(split_sentences=True)
        started = time.perf_counter()
        return translator.translate(sentences), time.perf_counter() - started

    refs_of = lambda sentences: [references[s] for s in sentences]  # noqa: E731
    parts = layout(sources)
    print(f"conditions: {conditions()}")
    print(
        f"model: {args.model}; en->de, beam {args.beam}; test2016 ({len(sources):,} sentences) in {len(parts)} parts\n"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if shutil.which("soffice"):
            data = word_pdf(parts, random.Random(args.seed), Path(tmp))
            table_rows = sum(kind == "cell" for kind, _ in parts) // 3
            found, out = measure("LibreOffice", data, order_of(parts, table_rows), translator_for, plain_of, refs_of)
            rows += found
            if args.pictures and shutil.which("pdftoppm"):
                args.pictures.mkdir(parents=True, exist_ok=True)
                for label, pdf in (("before", data), ("after", out)):
                    (Path(tmp) / f"{label}.pdf").write_bytes(pdf)
                    subprocess.run(["pdftoppm", "-png", "-scale-to", "560", "-f", "1", "-l", "1", "-singlefile",
                                    str(Path(tmp) / f"{label}.pdf"), str(args.pictures / f"pdf-{label}")], check=True)  # fmt: skip
        else:
            print("LibreOffice (soffice) is not installed: its PDF left out (apt-get install libreoffice-writer)")
        data = story_pdf(parts, random.Random(args.seed))
        all_in_order = [s for kind, sentences in parts for s in sentences]
        rows += measure("PyMuPDF", data, all_in_order, translator_for, plain_of, refs_of)[0]
    print_table(["PDF", "pages", "blocks in German", "chars outside", "BLEU", "plain BLEU", "difference",
                 "seconds", "plain seconds"], rows)  # fmt: skip
    print("\ntargets: pages equal, >= 95% of blocks in the target language, none outside, BLEU within 1.0 of plain")


if __name__ == "__main__":
    main()
