"""PDF, through PyMuPDF (the pdf extra; PyMuPDF is AGPL-3.0 or Artifex's commercial licence). Each
paragraph of horizontal text (MuPDF's blocks, parted where paragraphs or cells meet) is a segment:
its lines joined (a word broken by a hyphen at a line's end joined again), spans whose bold, italic,
colour or size differ from the paragraph's own as runs. The translation is set back into its box:
the old text is redacted (images, vector graphics and links stay), the new one laid out by MuPDF's
HTML engine in the paragraph's font family, size and colour, shrunk where the target runs longer,
with MuPDF's fallback fonts for scripts the base font lacks; the document's language is set to the
target. Pages without a text layer (scans) are named;
mtkit does not OCR them. Before any page is read, the file's compressed streams are inflated in
chunks within FileLimits (a PDF bomb is refused as a zip bomb is), and its pages and objects counted."""

from __future__ import annotations

import html
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import Document, FileLimits, InlineBuilder, language_tag, pieces
from mtkit.documents.pdf_streams import check_streams

PDF_EXTRA = "pip install 'mtkit[pdf]'"
BOLD, ITALIC, SERIF, MONO = 16, 2, 4, 8  # PyMuPDF's span flags
MOST_COMPARED = 4_000_000  # a page's blocks x boxes where room() looks for space (linear in the page)
LINE_HEIGHT = 1.15  # of the font size: about what a PDF's lines take (their boxes hold ascent and descent)


def require_pymupdf():
    try:
        import pymupdf
    except ImportError:
        raise MtkitError(f"translating PDF needs PyMuPDF: {PDF_EXTRA}") from None
    pymupdf.TOOLS.mupdf_display_errors(False)  # its errors come back as exceptions, told in one line
    pymupdf.TOOLS.mupdf_display_warnings(False)
    return pymupdf


@dataclass(frozen=True)
class Style:
    """How a span of text looks: what a run of the segment stands for."""

    bold: bool
    italic: bool
    family: str  # "serif", "sans-serif" or "monospace"
    color: int  # 0xRRGGBB
    size: float  # points, to a tenth

    @classmethod
    def of(cls, span: dict) -> Style:
        flags = span["flags"]
        family = "monospace" if flags & MONO else "serif" if flags & SERIF else "sans-serif"
        return cls(bool(flags & BOLD), bool(flags & ITALIC), family, span["color"], round(span["size"], 1))

    def css(self, base: Style | None = None) -> str:
        """The CSS that sets this style (only what differs from base, where given)."""
        rules = []
        if base is None or self.bold != base.bold:
            rules.append(f"font-weight: {'bold' if self.bold else 'normal'}")
        if base is None or self.italic != base.italic:
            rules.append(f"font-style: {'italic' if self.italic else 'normal'}")
        if base is None or self.family != base.family:
            rules.append(f"font-family: {self.family}")
        if base is None or self.color != base.color:
            rules.append(f"color: #{self.color:06x}")
        if base is None or self.size != base.size:
            rules.append(f"font-size: {self.size}pt")
        return "; ".join(rules)


@dataclass
class TextBlock:
    page: int
    rect: tuple[float, float, float, float]
    lines: list[tuple[float, float, float, float]]  # each line's box: what is redacted
    base: Style  # the style of most of its characters
    builder: InlineBuilder


class PdfDocument(Document):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        pymupdf = require_pymupdf()
        self.name = name
        with mupdf_errors(f"{name}: not a PDF MuPDF can read"):
            self.pdf = pymupdf.open(stream=data, filetype="pdf")
        if self.pdf.needs_pass:
            raise MtkitError(f"{name}: encrypted: it needs a password to open (decrypt it first, e.g. qpdf --decrypt)")
        if self.pdf.metadata.get("encryption"):  # written again, it would lose its owner's password and permissions
            raise MtkitError(f"{name}: encrypted with an owner password that restricts it: mtkit does not lift that "
                             "(decrypt it first where you may, e.g. qpdf --decrypt)")  # fmt: skip
        with mupdf_errors(f"{name}: cannot be read"):
            self._read(pymupdf, limits)

    def _read(self, pymupdf, limits: FileLimits) -> None:
        limits.check_segments(self.pdf.xref_length(), "objects")
        limits.check_pages(self.pdf.page_count)
        check_streams(self.pdf, limits)
        flags = pymupdf.TEXTFLAGS_DICT & ~pymupdf.TEXT_PRESERVE_IMAGES & ~pymupdf.TEXT_PRESERVE_LIGATURES
        self.blocks: list[TextBlock] = []
        self.scans: list[int] = []  # pages with images and no text
        self.images: list[list] = []  # each page's image boxes
        for number, page in enumerate(self.pdf):
            with mupdf_errors(f"page {number + 1} cannot be read"):
                found = page.get_text("dict", flags=flags)["blocks"]
            blocks = [block for block in found if block["type"] == 0 and _horizontal(block)]
            self.images.append([pymupdf.Rect(image["bbox"]) for image in page.get_image_info()])
            if not any(span["text"].strip() for b in blocks for line in b["lines"] for span in line["spans"]):
                if page.get_images():
                    self.scans.append(number + 1)
                continue
            self.blocks += [text_block(number, lines) for block in blocks for lines in paragraphs(block)]
            limits.check_segments(len(self.blocks), "text blocks")
        if self.scans and not self.blocks:
            raise MtkitError(f"{self.name}: no page has a text layer (a scan? mtkit does not OCR: ocrmypdf can)")

    def notes(self) -> list[str]:
        if not self.scans:
            return []
        pages = ", ".join(map(str, self.scans[:20])) + (" ..." if len(self.scans) > 20 else "")
        return [f"{self.name}: pages without a text layer (scans?) left as they are: {pages}"]

    def segments(self) -> list[str]:
        return [block.builder.markup() for block in self.blocks]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        with mupdf_errors(f"{self.name}: cannot be written again"):
            return self._write(require_pymupdf(), translations, target_lang)

    def _write(self, pymupdf, translations: Sequence[str], target_lang: str | None) -> bytes:
        blocks: dict[int, list[TextBlock]] = {}  # by page, each page's found once
        chosen: dict[int, list[tuple[TextBlock, str]]] = {}
        for block, translation in zip(self.blocks, translations):
            blocks.setdefault(block.page, []).append(block)
            if block.builder.has_words():
                chosen.setdefault(block.page, []).append((block, translation))
        for number, on_page in sorted(chosen.items()):
            page = self.pdf[number]
            links = page.get_links()
            _redact(pymupdf, page, [_inner(pymupdf.Rect(line)) for block, _ in on_page for line in block.lines])
            kept = {(tuple(link["from"]), link.get("uri"), link.get("page")) for link in page.get_links()}
            for link in links:  # a redaction takes the links it touches with it: they come back
                if (tuple(link["from"]), link.get("uri"), link.get("page")) not in kept:
                    page.insert_link(link)
            boxes = [tuple(pymupdf.Rect(b.rect)) for b in blocks[number]] + [tuple(i) for i in self.images[number]]
            if len(boxes) * len(on_page) <= MOST_COMPARED:
                boxes += [tuple(drawing["rect"]) for drawing in page.get_drawings()]
            crowded = len(boxes) * len(on_page) > MOST_COMPARED  # no room looked for: the page would cost too much
            placed = []
            for block, translation in on_page:
                rect = pymupdf.Rect(block.rect) & page.rect if crowded else room(block, boxes, page.rect)
                css = f"* {{margin: 0; padding: 0; line-height: {LINE_HEIGHT}; {block.base.css()}}}"
                placed.append((rect, block_html(block, translation), css))
            set_in_bulk(pymupdf, page, placed)
        if target_lang:
            self.pdf.set_language(language_tag(target_lang))
        without_actions(self.pdf)
        return self.pdf.tobytes(garbage=3, deflate=True)


def set_in_bulk(pymupdf, page, placed: list[tuple[Any, str, str]]) -> None:
    """Each (box, HTML, CSS) laid out as page.insert_htmlbox lays it out (in its box, shrunk until it
    fits), all drawn on one page that is then drawn over this one: inserted a box at a time, MuPDF
    reads every box set before it again (800 blocks on a page took 112 s)."""
    out = io.BytesIO()
    writer = pymupdf.DocumentWriter(out)
    device = writer.begin_page(page.rect)
    for rect, text, css in placed:
        story = pymupdf.Story(html=text, user_css="body {margin:1px;}" + css)
        box = pymupdf.Rect(0, 0, rect.width, rect.height)
        fit = story.fit_scale(box, scale_min=1, flags=pymupdf.mupdf.FZ_PLACE_STORY_FLAG_NO_OVERFLOW)
        if not fit.big_enough:
            continue  # as insert_htmlbox: nothing drawn where no scale fits
        story.reset()
        story.place(fit.rect)
        scale = 1 / fit.parameter
        story.draw(device, pymupdf.Matrix(scale, 0, 0, scale, rect.x0, rect.y0))
    writer.end_page()
    writer.close()
    page.show_pdf_page(page.rect, pymupdf.open("pdf", out.getvalue()), 0)


def without_actions(pdf) -> None:
    """Drop what a reader would run or open by itself from a translation: the document's open action,
    additional actions, JavaScript and embedded files, each page's additional actions, and its
    annotations' launch and JavaScript actions (links to addresses and pages stay)."""
    catalog = pdf.pdf_catalog()
    for key in ("OpenAction", "AA", "Names/JavaScript", "Names/EmbeddedFiles"):
        pdf.xref_set_key(catalog, key, "null")
    for page in pdf:
        pdf.xref_set_key(page.xref, "AA", "null")
        for xref, *_ in page.annot_xrefs():
            pdf.xref_set_key(xref, "AA", "null")
            if pdf.xref_get_key(xref, "A/S")[1] in ("/Launch", "/JavaScript", "/ImportData", "/SubmitForm"):
                pdf.xref_set_key(xref, "A", "null")


Box = tuple[float, float, float, float]  # x0, y0, x1, y1: room() compares thousands (MuPDF's Rect is slow)
INFINITE: Box = (-2147483648.0, -2147483648.0, 2147483520.0, 2147483520.0)  # MuPDF's infinite rectangle


def _holds(box: Box, rect: Box) -> bool:
    """box.contains(rect), as MuPDF's Rect says it."""
    return box[0] <= rect[0] <= rect[2] <= box[2] and box[1] <= rect[1] <= rect[3] <= box[3]


def _meets(box: Box, rect: Box) -> bool:
    """box.intersects(rect), as MuPDF's Rect says it: neither empty nor infinite, and overlapping."""
    if INFINITE in (box, rect) or box[0] >= box[2] or box[1] >= box[3] or rect[0] >= rect[2] or rect[1] >= rect[3]:
        return False
    return box[0] < rect[2] and rect[0] < box[2] and box[1] < rect[3] and rect[1] < box[3]


def room(block: TextBlock, boxes: list[Box], page):
    """Where a block's translation may go: its own box, lengthened down to the nearest box below it
    (or the lowest text on the page); a block of one line also widened to the right, up to the
    nearest box beside it or the right margin. boxes: the page's text blocks, images and drawings;
    a drawing that holds the block (a frame, a table's cell) bounds it too."""
    rect: Box = tuple(block.rect)
    frames = [box for box in boxes if _holds(box, rect) and box != rect]
    others = [box for box in boxes if not _meets(box, rect) and box not in frames]
    left = min([box[0] for box in boxes] + [rect[0]])
    right = rect[2]
    if len(block.lines) == 1:
        beside = [box[0] for box in others if box[0] >= rect[2] and box[1] < rect[3] and box[3] > rect[1]]
        right = max(min(beside + [frame[2] for frame in frames] + [page.x1 - left]), rect[2])
    lowest = max([box[3] for box in boxes if not _holds(box, rect)] + [rect[3]])
    below = [box[1] for box in others if box[1] >= rect[3] and box[0] < right and box[2] > rect[0]]
    bottom = max(min(below + [frame[3] for frame in frames] + [lowest]), rect[3])
    return type(page)(rect[0], rect[1], right, bottom) & page


@contextmanager
def mupdf_errors(what: str) -> Iterator[None]:
    """MuPDF's errors (on a broken or hostile file; their classes tell nothing apart) as one line."""
    try:
        yield
    except MtkitError:
        raise
    except Exception as err:
        raise MtkitError(f"{what} ({' '.join(str(err).split())})") from None


def _horizontal(block: dict) -> bool:
    return all(abs(line["dir"][0] - 1) < 1e-3 and abs(line["dir"][1]) < 1e-3 for line in block["lines"])


def _redact(pymupdf, page, rects: list) -> None:
    """The text under each box taken away (images and drawings kept), by MuPDF's own calls as PyMuPDF's
    add_redact_annot and apply_redactions make them, less what costs a page of 800 lines seconds: the
    name the first gives each redaction (it reads every annotation before it, twice) and the fill and
    text the second reads back from each (loading each by number, a walk over them all)."""
    mupdf, rotation = pymupdf.mupdf, page.rotation
    if rotation:
        page.set_rotation(0)  # the boxes are the unrotated page's
    pdf_page = mupdf.pdf_page_from_fz_page(page.this)
    try:
        for rect in rects:
            annot = mupdf.pdf_create_annot(pdf_page, mupdf.PDF_ANNOT_REDACT)
            mupdf.pdf_set_annot_rect(annot, mupdf.FzRect(rect.x0, rect.y0, rect.x1, rect.y1))
            mupdf.pdf_update_annot(annot)
    finally:
        if rotation:
            page.set_rotation(rotation)
    options = mupdf.PdfRedactOptions()
    options.black_boxes, options.text = 0, pymupdf.PDF_REDACT_TEXT_REMOVE
    options.image_method, options.line_art = pymupdf.PDF_REDACT_IMAGE_NONE, pymupdf.PDF_REDACT_LINE_ART_NONE
    mupdf.pdf_redact_page(pdf_page.doc(), pdf_page, options)


def _inner(rect):
    """A line's box less a sliver at top and bottom: what a redaction takes is this line's text, not
    the descenders of the line above."""
    shrink = rect.height * 0.15
    return type(rect)(rect.x0, rect.y0 + shrink, rect.x1, rect.y1 - shrink)


def paragraphs(block: dict) -> list[list[dict]]:
    """A block's lines as paragraphs (MuPDF may put a heading and the paragraph under it in one
    block, or a table's cells one after another): a new one where the font size changes, a gap
    wider than half a line opens or a line stands beside the last rather than under it; those without
    letters (a page number) left out."""
    found: list[list[dict]] = []
    for line in block["lines"]:
        last = found[-1][-1] if found else None
        (x0, y0, x1, _), (a0, _, a1, b1) = line["bbox"], last["bbox"] if last else (0, 0, 0, 0)
        if last is None or _size(line) != _size(last) or y0 - b1 > 0.5 * _size(last) or x0 >= a1 or x1 <= a0:
            found.append([line])
        else:
            found[-1].append(line)
    return [lines for lines in found if any(c.isalpha() for line in lines for s in line["spans"] for c in s["text"])]


def _size(line: dict) -> float:
    """The size of most of a line's characters."""
    sizes: dict[float, int] = {}
    for span in line["spans"]:
        sizes[round(span["size"])] = sizes.get(round(span["size"]), 0) + len(span["text"].strip())
    return max(sizes, key=sizes.get) if sizes else 0.0


def text_block(page: int, block_lines: list[dict]) -> TextBlock:
    """A paragraph as a segment: its lines joined, runs where the style is not the paragraph's own."""
    lines = [[(span["text"], Style.of(span)) for span in line["spans"] if span["text"]] for line in block_lines]
    weights: dict[Style, int] = {}
    for line in lines:
        for text, style in line:
            weights[style] = weights.get(style, 0) + len(text.strip())
    base = max(weights, key=weights.get)
    spans: list[tuple[str, Style]] = []
    for line in lines:
        if not line:
            continue
        if spans and spans[-1][0].endswith("-") and spans[-1][0][-2:-1].isalpha() and line[0][0][:1].islower():
            spans[-1] = (spans[-1][0][:-1], spans[-1][1])  # a word broken at the line's end
        elif spans and not spans[-1][0].endswith(" "):
            spans.append((" ", base))
        spans += line
    builder, current = InlineBuilder(), None
    for text, style in spans:
        style = base if not text.strip() else style
        if style != current and current not in (None, base):
            builder.close()
        if style != current and style != base:
            builder.open(style)
        builder.text(text)
        current = style
    if current not in (None, base):
        builder.close()
    boxes = [tuple(line["bbox"]) for line in block_lines]
    rect = (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))
    return TextBlock(page, rect, boxes, base, builder)


def block_html(block: TextBlock, translation: str) -> str:
    """A block's translation as the HTML MuPDF lays out: each run's words in a span of its style."""
    out = []
    for piece in pieces(translation, block.builder.separators):
        text = html.escape(piece.text, quote=False)
        for run in reversed(piece.within):
            text = f'<span style="{block.builder.codes[run].css(block.base)}">{text}</span>'
        out.append(text)
    return "<div>" + "".join(out) + "</div>"


def read_pdf(data: bytes, name: str, limits: FileLimits) -> Document:
    return PdfDocument(data, name, limits)
