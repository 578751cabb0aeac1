"""PDF (mtkit.documents.pdf), made here with PyMuPDF: a copying engine gives back the text of each
page, a reversing one keeps each run's formatting on its words; images, links, drawings and page
geometry stay; the output reopens with PyMuPDF, pypdf and poppler's pdftotext; scans, encrypted
files and PDF bombs are one line within FileLimits."""

import base64
import binascii
import functools
import io
import re
import shutil
import subprocess
import sys
import unicodedata
import zlib

import pymupdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pypdf import PdfReader
from test_documents import copy_engine, reverse_engine, translated

from mtkit.core.errors import MtkitError
from mtkit.documents.formats import read_document
from mtkit.documents.inline import FileLimits, FileTooLarge

PARAGRAPHS = [
    "A man in a <b>blue shirt</b> rides a bike near the <i>red house</i>.",
    'Two dogs run on the grass while a <span style="color:#ff0000">girl</span> watches them.',
]


def made_pdf(pages: int = 2, image: bool = True) -> bytes:
    document = pymupdf.open()
    for number in range(pages):
        page = document.new_page(width=595, height=842)
        page.insert_htmlbox(pymupdf.Rect(60, 60, 420, 160), f"<h2>Page {'one two three'.split()[number % 3]}</h2>")
        page.insert_htmlbox(pymupdf.Rect(60, 180, 420, 400), "".join(f"<p>{p}</p>" for p in PARAGRAPHS))
        page.draw_rect(pymupdf.Rect(50, 50, 430, 410), color=(0, 0, 1))
        page.insert_link(
            {"kind": pymupdf.LINK_URI, "from": pymupdf.Rect(60, 180, 120, 195), "uri": "https://example.com"}
        )
        if image:
            page.insert_image(
                pymupdf.Rect(60, 450, 160, 550), pixmap=pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 8, 8), 0)
            )
        page.insert_text((290, 800), str(number + 1))  # a page number: no words
    return document.tobytes()


def page_texts(data: bytes) -> list[str]:
    return [
        " ".join(unicodedata.normalize("NFKC", page.get_text(sort=True)).split()) for page in pymupdf.open(stream=data)
    ]


def test_a_copy_engine_gives_back_each_pages_text_and_what_is_not_text():
    source = made_pdf()
    out = translated(source, "doc.pdf", copy_engine)
    assert page_texts(out) == page_texts(source)
    before, after = pymupdf.open(stream=source), pymupdf.open(stream=out)
    for old, new in zip(before, after):
        assert new.rect == old.rect and len(new.get_images()) == len(old.get_images()) == 1
        assert [link["uri"] for link in new.get_links()] == ["https://example.com"]
        assert len(new.get_drawings()) == len(old.get_drawings())


def styled_words(data: bytes) -> dict[str, list[str]]:
    """The words set in bold, in italic and in red, in the order of the page."""
    found: dict[str, list[str]] = {"bold": [], "italic": [], "red": []}
    for page in pymupdf.open(stream=data):
        for block in page.get_text("dict")["blocks"]:
            for line in block.get("lines", []):
                for span in line["spans"]:
                    if span["size"] > 14:
                        continue  # the heading
                    words = span["text"].split()
                    found["bold"] += words if span["flags"] & 16 else []
                    found["italic"] += words if span["flags"] & 2 else []
                    found["red"] += words if span["color"] == 0xFF0000 else []
    return found


def test_a_reversing_engine_keeps_each_runs_formatting_on_its_words():
    source = made_pdf(pages=1)
    out = translated(source, "doc.pdf", reverse_engine)
    assert styled_words(source) == {"bold": ["blue", "shirt"], "italic": ["red", "house"], "red": ["girl"]}
    assert styled_words(out) == {"bold": ["shirt", "blue"], "italic": ["house.", "red"], "red": ["girl"]}
    assert "near bike a rides" in page_texts(out)[0]  # the full stop goes with its word


def test_the_output_reopens_with_pypdf_and_says_its_language():
    out = translated(made_pdf(), "doc.pdf", copy_engine, target="de")
    reader = PdfReader(__import__("io").BytesIO(out))
    assert len(reader.pages) == 2 and "rides a bike" in reader.pages[1].extract_text()
    assert reader.trailer["/Root"]["/Lang"] == "de"


@pytest.mark.skipif(
    shutil.which("pdftotext") is None, reason="poppler's pdftotext is not installed (apt-get install poppler-utils)"
)
def test_pdftotext_reads_the_translation():
    out = translated(made_pdf(), "doc.pdf", reverse_engine)
    text = subprocess.run(["pdftotext", "-", "-"], input=out, capture_output=True, check=True).stdout.decode()
    assert " ".join(unicodedata.normalize("NFKC", text).split()).count("bike a rides") == 2


def test_a_target_in_other_scripts_is_set_in_fonts_that_have_them():
    words = "Привет мир 你好世界 Γειά σου"

    def other_scripts(texts):
        return [(words, [(i, i) for i in range(len(words.split()))]) for _ in texts]

    out = translated(made_pdf(pages=1), "doc.pdf", other_scripts, target="ru")
    fonts = {span["font"] for block in pymupdf.open(stream=out)[0].get_text("dict")["blocks"]
             for line in block.get("lines", []) for span in line["spans"] if "你" in span["text"]}  # fmt: skip
    assert page_texts(out)[0].count(words) == 3 and fonts and "\ufffd" not in page_texts(out)[0]


def test_a_block_runs_together_its_lines_and_a_word_broken_at_a_lines_end():
    document = pymupdf.open()
    page = document.new_page()
    for k, line in enumerate(["A man in a blue shirt is rid-", "ing a bike near the house", "while two dogs run."]):
        page.insert_text((72, 100 + 14 * k), line, fontsize=11)
    segments = read_document(document.tobytes(), "doc.pdf", "pdf").segments()
    assert segments == ["A man in a blue shirt is riding a bike near the house while two dogs run."]


def test_a_page_of_many_blocks_is_set_in_one_drawing_with_each_translation_in_its_block():
    """The translations of a page are drawn over it once (inserted a block at a time, MuPDF read every
    block set before each new one again: 800 blocks took 112 s)."""
    document = pymupdf.open()
    page = document.new_page(width=1000, height=600)
    for n in range(60):
        page.insert_text((20 + (n % 10) * 95, 30 + (n // 10) * 80), f"Block {n} reads here.", fontsize=8)
    document_read = read_document(document.tobytes(), "blocks.pdf", "pdf")
    out = pymupdf.open(
        stream=document_read.write([t.replace("reads", "liest") for t in document_read.segments()], "de")
    )
    assert len([xobject for xobject in out[0].get_xobjects() if xobject[2] == 0]) == 1  # drawn by the page itself
    words = out[0].get_text("words")
    for n in range(60):  # each block's words where its own were
        x, y = 20 + (n % 10) * 95, 30 + (n // 10) * 80
        found = [w[4] for w in words if x - 2 <= w[0] < x + 90 and abs(w[3] - y) < 6]
        assert found == ["Block", str(n), "liest", "here."]


def test_a_scanned_page_is_named_and_a_scan_alone_is_one_line():
    scan = pymupdf.open()
    scan.new_page().insert_image(
        pymupdf.Rect(0, 0, 595, 842), pixmap=pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 8, 8), 0)
    )
    with pytest.raises(MtkitError, match=r"^scan\.pdf: no page has a text layer \(a scan\?"):
        read_document(scan.tobytes(), "scan.pdf", "pdf")
    mixed = pymupdf.open(stream=made_pdf(pages=1))
    mixed.insert_pdf(scan)
    document = read_document(mixed.tobytes(), "mixed.pdf", "pdf")
    assert document.notes() == ["mixed.pdf: pages without a text layer (scans?) left as they are: 2"]


def test_an_encrypted_pdf_is_one_line():
    data = pymupdf.open(stream=made_pdf(pages=1)).tobytes(
        encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="secret", owner_pw="owner"
    )
    with pytest.raises(MtkitError) as err:
        read_document(data, "locked.pdf", "pdf")
    assert str(err.value).startswith("locked.pdf: encrypted: it needs a password to open") and "\n" not in str(
        err.value
    )


def pdf_with_stream(content: bytes, compressed: bool = True, filters: bytes = b"", stream: bytes = b"") -> bytes:
    """A one-page PDF whose page draws a content stream (Flate-compressed where asked; or `stream`, encoded
    as `filters` say, where given: a /Filter 5 0 R names object 5, which holds /FlateDecode)."""
    if not filters:
        stream = zlib.compress(content, 9) if compressed else content
        filters = b"/FlateDecode" if compressed else b""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< "
        + (b"/Filter " + filters + b" " if filters else b"")
        + b"/Length %d >>\nstream\n" % len(stream)
        + stream
        + b"\nendstream",
        b"/FlateDecode",
    ]
    out, offsets = b"%PDF-1.7\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(
        b"%010d 00000 n \n" % o for o in offsets
    )
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


@functools.cache
def deflated_noops() -> bytes:
    """200 MiB of no-ops deflated (about 200 KiB): made once, when a test first needs it."""
    return zlib.compress(b"q Q " * (50 << 20), 9)


def test_a_stream_that_inflates_past_the_bounds_is_refused_before_any_page_is_read():
    bomb = pdf_with_stream(b"", filters=b"/FlateDecode", stream=deflated_noops())
    with pytest.raises(FileTooLarge, match=r"^bomb\.pdf: stream 4 inflates"):
        read_document(bomb, "bomb.pdf", "pdf")


@pytest.mark.parametrize(
    "filters, encode",
    [
        (b"/Fl", lambda deflated: deflated),  # abbreviated
        (b"[/AHx /Fl]", lambda deflated: binascii.hexlify(deflated) + b">"),  # after an ASCII encoding
        (b"[/ASCII85Decode /FlateDecode]", lambda deflated: base64.a85encode(deflated, adobe=True)),
        (b"5 0 R", lambda deflated: deflated),  # an indirect object
        (b"[/FlateDecode /FlateDecode]", lambda deflated: zlib.compress(deflated, 9)),  # twice: about 1 KiB
    ],
    ids=["abbreviated", "hex", "ascii85", "indirect", "twice"],
)
def test_a_stream_bomb_in_any_spelling_of_its_filters_is_refused(filters, encode):
    bomb = pdf_with_stream(b"", filters=filters, stream=encode(deflated_noops()))
    with pytest.raises(FileTooLarge, match=r"^bomb\.pdf: stream 4 inflates"):
        read_document(bomb, "bomb.pdf", "pdf")


def test_an_lzw_stream_is_refused_in_one_line():
    lzw = pdf_with_stream(b"", filters=b"/LZWDecode", stream=b"\x80\x0b\x60\x50\x22\x0c\x0c\x85\x01")
    with pytest.raises(FileTooLarge, match=r"^lzw\.pdf: stream 4 is LZW-compressed, which mtkit does not read"):
        read_document(lzw, "lzw.pdf", "pdf")


def run_length(data: bytes) -> bytes:
    """RunLengthDecode's encoding: literal runs of up to 128 bytes, then the end mark."""
    return (
        b"".join(bytes([len(part) - 1]) + part for part in (data[i : i + 128] for i in range(0, len(data), 128)))
        + b"\x80"
    )


ENCODERS = {
    "FlateDecode": lambda data: zlib.compress(data),
    "ASCIIHexDecode": lambda data: binascii.hexlify(data) + b">",
    "ASCII85Decode": lambda data: base64.a85encode(data, adobe=True),
    "RunLengthDecode": run_length,
}


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600), st.lists(st.sampled_from(sorted(ENCODERS)), min_size=1, max_size=3))
def test_a_chain_of_filters_decodes_to_the_stream_s_own_size(content, filters):
    from mtkit.documents.pdf_streams import decoded_size

    stream = content
    for name in reversed(filters):  # the first filter listed is the first decoded
        stream = ENCODERS[name](stream)
    growing = [n for n, name in enumerate(filters) if name in ("FlateDecode", "RunLengthDecode")]
    after = content  # what the last filter that grows decodes to: the content as the filters after it encode it
    for name in reversed(filters[growing[-1] + 1 :] if growing else []):
        after = ENCODERS[name](after)
    assert decoded_size(stream, filters, FileLimits(), "stream 4") == len(after)


def test_pages_and_nesting_are_bounded():
    with pytest.raises(FileTooLarge, match=r"^many\.pdf: 3 pages: the limit is 2"):
        read_document(made_pdf(pages=3, image=False), "many.pdf", "pdf", limits=FileLimits(max_pages=2))
    deep = pdf_with_stream(b"[" * 200_000 + b"]" * 200_000, compressed=False)
    with pytest.raises(MtkitError) as err:  # MuPDF bounds its own nesting and says so
        read_document(deep, "deep.pdf", "pdf")
    assert str(err.value) == "deep.pdf: page 1 cannot be read (code=5: exception stack overflow!)"


def test_without_pymupdf_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymupdf", None)
    with pytest.raises(MtkitError, match=re.escape("translating PDF needs PyMuPDF: pip install 'mtkit[pdf]'")):
        read_document(b"%PDF-1.7", "doc.pdf", "pdf")


def test_what_a_reader_would_run_by_itself_is_dropped_and_links_stay():
    document = pymupdf.open(stream=made_pdf(pages=1, image=False))
    catalog, page = document.pdf_catalog(), document[0]
    script = document.get_new_xref()
    document.update_object(script, "<</S/JavaScript/JS(app.alert\\('opened'\\))>>")
    document.xref_set_key(catalog, "OpenAction", f"{script} 0 R")
    document.xref_set_key(catalog, "AA", "<</WC<</S/JavaScript/JS(app.alert\\('closed'\\))>>>>")
    document.xref_set_key(page.xref, "AA", "<</O<</S/Launch/F(calc.exe)>>>>")
    document.embfile_add("payload.exe", b"MZ payload")
    out = translated(document.tobytes(), "a.pdf", reverse_engine)
    again = pymupdf.open(stream=out)
    assert [again.xref_get_key(again.pdf_catalog(), key)[1] for key in ("OpenAction", "AA")] == ["null", "null"]
    assert again.xref_get_key(again[0].xref, "AA")[1] == "null" and again.embfile_count() == 0
    assert b"/JS" not in out and b"calc.exe" not in out and b"MZ payload" not in out
    assert [link["uri"] for link in again[0].get_links()] == ["https://example.com"]
    assert PdfReader(io.BytesIO(out)).pages[0].extract_text()  # a reader opens it


def test_a_pdf_an_owner_password_restricts_is_refused_not_unlocked():
    document = pymupdf.open(stream=made_pdf(pages=1, image=False))
    locked = document.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner", user_pw="",
                              permissions=pymupdf.PDF_PERM_PRINT)  # fmt: skip
    with pytest.raises(MtkitError) as err:
        read_document(locked, "locked.pdf", "pdf")
    assert str(err.value).startswith("locked.pdf: encrypted with an owner password that restricts it")


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_redaction_takes_what_pymupdfs_own_takes_on_a_page_of_any_rotation(rotation):
    """pdf._redact marks and applies by MuPDF's own calls without PyMuPDF's names and read-backs (each
    a walk over the page's annotations): the same words go, the same stay where they were, the page
    looks the same."""
    from mtkit.documents.pdf import _redact

    left, looks = [], []
    for own in (True, False):
        document = pymupdf.open()
        page = document.new_page(width=400, height=300)
        for n in range(6):
            page.insert_text((30, 40 + 30 * n), f"Line {n} of text here, keep {n}", fontsize=11)
        page.set_rotation(rotation)
        rects = [pymupdf.Rect(word[:4]) for word in page.get_text("words") if word[4] in ("Line", "text")]
        if own:
            for rect in rects:
                page.add_redact_annot(rect)
            page.apply_redactions(images=pymupdf.PDF_REDACT_IMAGE_NONE, graphics=pymupdf.PDF_REDACT_LINE_ART_NONE)
        else:
            _redact(pymupdf, page, rects)
        left.append([(word[4], tuple(round(x, 1) for x in word[:4])) for word in page.get_text("words")])
        looks.append((page.get_pixmap(dpi=72).samples, page.first_annot))
    assert left[0] == left[1] and len(left[0]) == 6 * 5
    assert looks[0] == looks[1] and looks[1][1] is None  # no redaction left behind
    assert {word for word, _ in left[1]} == {"of", "here,", "keep", *map(str, range(6))}
