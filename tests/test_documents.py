"""Documents through translation (mtkit.documents): each format made by its own library, translated
by engines whose output is known (copy, upper-case, reversed word order, each with its alignment),
and read back by the same library (and by msgfmt and LibreOffice where installed)."""

import io
import shutil
import subprocess
import zipfile

import docx
import pptx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.documents.formats import document_format, read_document
from mtkit.text.markup_placement import translate_markup

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def copy_engine(texts):
    return [(text, [(i, i) for i in range(len(text.split()))]) for text in texts]


def upper_engine(texts):
    return [(text.upper(), [(i, i) for i in range(len(text.split()))]) for text in texts]


def reverse_engine(texts):
    out = []
    for text in texts:
        words = text.split()
        out.append((" ".join(reversed(words)), [(i, len(words) - 1 - i) for i in range(len(words))]))
    return out


def translated(data: bytes, name: str, engine, target="de", **options) -> bytes:
    document = read_document(data, name, document_format(name), **options)
    return document.write(translate_markup(document.segments(), document.markup, engine), target)


def saved(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# Word


def word_document(runs: list[tuple[str, bool, bool]]) -> bytes:
    """A .docx with a paragraph of the given runs (text, bold, italic), a heading, a table, a header
    and a footer."""
    document = docx.Document()
    paragraph = document.add_paragraph()
    for text, bold, italic in runs:
        run = paragraph.add_run(text)
        run.bold, run.italic = bold or None, italic or None
    document.add_heading("A child is swimming", 1)
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "a woman sings", "people walk"
    document.sections[0].header.paragraphs[0].text = "a dog runs"
    document.sections[0].footer.paragraphs[0].text = "page footer"
    return saved(document)


def word_runs(data: bytes) -> list[list[tuple[str, bool, bool]]]:
    document = docx.Document(io.BytesIO(data))
    return [[(run.text, bool(run.bold), bool(run.italic)) for run in p.runs] for p in document.paragraphs]


def word_texts(data: bytes) -> list[str]:
    document = docx.Document(io.BytesIO(data))
    section = document.sections[0]
    return ([p.text for p in document.paragraphs] + [c.text for c in document.tables[0].rows[0].cells]
            + [section.header.paragraphs[0].text, section.footer.paragraphs[0].text])  # fmt: skip


RUNS = [("A man in a ", False, False), ("blue shirt", True, False), (" rides a ", False, False), ("bike", False, True)]


def test_a_copied_word_document_has_the_same_text_and_runs():
    data = word_document(RUNS)
    out = translated(data, "a.docx", copy_engine)
    assert word_texts(out) == word_texts(data)
    assert word_runs(out) == word_runs(data)


def test_every_paragraph_of_a_word_document_is_translated_headers_tables_and_footers_too():
    out = translated(word_document(RUNS), "a.docx", upper_engine)
    assert word_texts(out) == [text.upper() for text in word_texts(word_document(RUNS))]


def test_reversed_words_keep_their_runs_in_word():
    out = translated(word_document(RUNS), "a.docx", reverse_engine)
    # "A man in a blue shirt rides a bike" reversed
    assert word_runs(out)[0] == [("bike", False, True), (" a rides ", False, False), ("shirt blue", True, False),
                                 (" a in man A", False, False)]  # fmt: skip


def test_fields_hyperlinks_and_tabs_are_kept_whole_in_word():
    document = docx.Document()
    paragraph = document.add_paragraph("Page ")
    field = ('<w:r {ns}><w:fldChar w:fldCharType="begin"/></w:r>', '<w:r {ns}><w:instrText> PAGE </w:instrText></w:r>',
             '<w:r {ns}><w:fldChar w:fldCharType="separate"/></w:r>', '<w:r {ns}><w:t>7</w:t></w:r>',
             '<w:r {ns}><w:fldChar w:fldCharType="end"/></w:r>')  # fmt: skip
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    for xml in field:
        paragraph._p.append(etree.fromstring(xml.format(ns=ns)))
    paragraph.add_run(" of the report").add_tab()
    part = document.part
    rid = part.relate_to("http://example.org/x", docx.opc.constants.RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    link = etree.fromstring(f'<w:hyperlink {ns} xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/'
                            f'relationships" r:id="{rid}"><w:r><w:t>the site</w:t></w:r></w:hyperlink>')  # fmt: skip
    paragraph._p.append(link)
    out = translated(saved(document), "a.docx", upper_engine)
    p = docx.Document(io.BytesIO(out)).paragraphs[0]._p
    assert [e.text for e in p.iter(W + "instrText")] == [" PAGE "]
    assert [e.get(W + "fldCharType") for e in p.iter(W + "fldChar")] == ["begin", "separate", "end"]
    assert "7" in [t.text for t in p.iter(W + "t")] and len(list(p.iter(W + "tab"))) == 1
    (hyperlink,) = p.iter(W + "hyperlink")
    assert [t.text for t in hyperlink.iter(W + "t")] == ["THE SITE"] and hyperlink.get(link.keys()[0]) == rid
    assert [t.text.strip() for t in p.iter(W + "t")] == ["PAGE", "7", "OF THE REPORT", "THE SITE"]


def test_footnotes_and_endnotes_are_translated_with_the_body():
    """python-docx cannot write footnotes: its document with a footnotes part added as Word writes one."""
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    footnotes = (f'<w:footnotes {ns}><w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r>'
                 f'<w:r><w:t xml:space="preserve"> a small note</w:t></w:r></w:p></w:footnote></w:footnotes>')  # fmt: skip
    data = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(word_document(RUNS))) as source, zipfile.ZipFile(data, "w") as target:
        for item in source.infolist():
            target.writestr(item, source.read(item))
        target.writestr("word/footnotes.xml", footnotes)
    out = zipfile.ZipFile(io.BytesIO(translated(data.getvalue(), "a.docx", upper_engine)))
    root = etree.fromstring(out.read("word/footnotes.xml"))
    assert [t.text for t in root.iter(W + "t")] == [" A SMALL NOTE"] and len(list(root.iter(W + "footnoteRef"))) == 1


def test_the_word_documents_language_becomes_the_target():
    out = translated(word_document(RUNS), "a.docx", copy_engine, target="de")
    styles = etree.fromstring(zipfile.ZipFile(io.BytesIO(out)).read("word/styles.xml"))
    assert {e.get(W + "val") for e in styles.iter(W + "lang")} == {"de"}


def test_parts_that_are_not_translated_stay_byte_for_byte():
    data = word_document(RUNS)
    out = translated(data, "a.docx", upper_engine)
    before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(out))
    assert after.namelist() == before.namelist()
    kept = [
        n for n in before.namelist() if not n.startswith(("word/document", "word/header", "word/footer", "word/styles"))
    ]
    assert kept and all(after.read(name) == before.read(name) for name in kept)


words = st.text(alphabet="abcdefgh", min_size=1, max_size=5)
run_lists = st.lists(
    st.tuples(st.lists(words, min_size=1, max_size=3), st.booleans(), st.booleans()), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(run_lists)
def test_any_runs_reversed_keep_each_word_with_its_formatting(runs):
    """Whatever runs a paragraph is cut into, reversing its words keeps each word's bold and italic."""
    source = [(" ".join(ws) + " ", bold, italic) for ws, bold, italic in runs]
    out = word_runs(translated(word_document(source), "a.docx", reverse_engine))[0]
    words_of = lambda runs: sorted((w, b, i) for text, b, i in runs for w in text.split())  # noqa: E731
    assert words_of(out) == words_of(source)


@settings(max_examples=40, deadline=None)
@given(run_lists, st.randoms(use_true_random=False))
def test_any_runs_in_any_order_give_a_valid_document_with_the_same_words_and_formats(runs, rng):
    source = [(" ".join(ws) + " ", bold, italic) for ws, bold, italic in runs]

    def shuffle_engine(texts):
        out = []
        for text in texts:
            order = list(range(len(text.split())))
            rng.shuffle(order)
            words = text.split()
            out.append((" ".join(words[i] for i in order), [(i, order.index(i)) for i in order]))
        return out

    out = word_runs(translated(word_document(source), "a.docx", shuffle_engine))[0]
    assert sorted(w for text, *_ in out for w in text.split()) == sorted(w for ws, *_ in runs for w in ws)
    formats = lambda runs: {(b, i) for text, b, i in runs if text.strip()}  # noqa: E731
    assert formats(out) <= formats(source)


# PowerPoint


def slides() -> bytes:
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "a dog runs"
    body = slide.placeholders[1].text_frame
    paragraph = body.paragraphs[0]
    for text, bold in (("a man in a ", False), ("blue shirt", True), (" rides", False)):
        run = paragraph.add_run()
        run.text, run.font.bold = text, bold or None
        run.font.language_id = pptx.enum.lang.MSO_LANGUAGE_ID.ENGLISH_US
    slide.notes_slide.notes_text_frame.text = "speaker notes here"
    return saved(presentation)


def slide_texts(data: bytes) -> list[list[tuple[str, bool]]]:
    presentation = pptx.Presentation(io.BytesIO(data))
    slide = presentation.slides[0]
    shapes = [[(run.text, bool(run.font.bold)) for p in shape.text_frame.paragraphs for run in p.runs]
              for shape in slide.shapes if shape.has_text_frame]  # fmt: skip
    return shapes + [[(slide.notes_slide.notes_text_frame.text, False)]]


def test_slides_and_their_notes_are_translated_with_their_runs():
    data = slides()
    assert slide_texts(translated(data, "a.pptx", copy_engine)) == slide_texts(data)
    assert slide_texts(translated(data, "a.pptx", reverse_engine)) == [
        [("runs dog a", False)],
        [("rides ", False), ("shirt blue", True), (" a in man a", False)],
        [("here notes speaker", False)],
    ]


def test_the_slides_language_becomes_the_target():
    out = translated(slides(), "a.pptx", copy_engine, target="fr")
    xml = zipfile.ZipFile(io.BytesIO(out)).read("ppt/slides/slide1.xml")
    assert b'lang="fr"' in xml and b'lang="en-US"' not in xml


# Excel


def spreadsheet() -> bytes:
    import openpyxl
    from openpyxl.cell.rich_text import CellRichText, TextBlock
    from openpyxl.cell.text import InlineFont

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "kept name"
    sheet["A1"], sheet["B1"], sheet["C1"] = "a dog runs", 42, "=B1*2"
    sheet["A2"] = CellRichText(["a man in a ", TextBlock(InlineFont(b=True), "blue shirt"), " rides"])
    sheet["A3"] = " spaced words "
    return saved(book)


def cells(data: bytes) -> list:
    import openpyxl

    sheet = openpyxl.load_workbook(io.BytesIO(data), rich_text=True).active
    return [sheet.title] + [
        [(str(block.text), bool(block.font.b)) if hasattr(block, "font") else str(block) for block in cell.value]
        if hasattr(cell.value, "__iter__") and not isinstance(cell.value, str) else cell.value
        for row in sheet.iter_rows() for cell in row
    ]  # fmt: skip


def test_a_spreadsheets_strings_are_translated_and_its_numbers_and_formulas_kept():
    data = spreadsheet()
    assert cells(translated(data, "a.xlsx", copy_engine)) == cells(data)
    assert cells(translated(data, "a.xlsx", reverse_engine)) == [
        "kept name", "runs dog a", 42, "=B1*2",
        ["rides ", ("shirt blue", True), " a in man a"], None, None,
        " words spaced ", None, None,
    ]  # fmt: skip


# OpenDocument


def open_document(kind: str) -> bytes:
    from odf.opendocument import OpenDocumentPresentation, OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.text import A, LineBreak, Note, NoteBody, NoteCitation, P, Span

    document = OpenDocumentText() if kind == "odt" else OpenDocumentPresentation()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold", language="en", country="US"))
    document.automaticstyles.addElement(bold)
    paragraph = P(text="a man in a ")
    paragraph.addElement(Span(stylename=bold, text="blue shirt"))
    paragraph.addText(" rides a")
    paragraph.addElement(LineBreak())
    paragraph.addElement(A(href="http://example.org/", text="bike"))
    if kind == "odt":
        note = Note(id="ftn1", noteclass="footnote")
        note.addElement(NoteCitation(text="1"))
        body = NoteBody()
        body.addElement(P(text="a footnote"))
        note.addElement(body)
        paragraph.addElement(note)
        document.text.addElement(paragraph)
    else:
        from odf.draw import Frame, Page, TextBox

        page = Page(name="one", masterpagename="Default")
        frame = Frame(width="20cm", height="5cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(paragraph)
        frame.addElement(box)
        page.addElement(frame)
        document.presentation.addElement(page)
    return saved(document)


def odf_paragraphs(data: bytes) -> list[str]:
    from odf import teletype
    from odf.opendocument import load
    from odf.text import P

    return [teletype.extractText(p) for p in load(io.BytesIO(data)).getElementsByType(P)]


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_opendocument_copied_is_the_same_and_translated_keeps_its_spans(kind):
    data = open_document(kind)
    assert odf_paragraphs(translated(data, f"a.{kind}", copy_engine)) == odf_paragraphs(data)
    out = translated(data, f"a.{kind}", upper_engine)
    assert odf_paragraphs(out)[-1] == ("A FOOTNOTE" if kind == "odt" else "A MAN IN A BLUE SHIRT RIDES A\nBIKE")
    content = zipfile.ZipFile(io.BytesIO(out)).read("content.xml").decode()
    assert '<text:span text:style-name="Bold">BLUE SHIRT</text:span> RIDES A<text:line-break/>' in content
    assert 'xlink:href="http://example.org/"' in content and ">BIKE</text:a>" in content
    assert 'fo:language="de"' in content and "fo:country" not in content
    assert zipfile.ZipFile(io.BytesIO(out)).infolist()[0].filename == "mimetype"


def test_an_opendocument_footnote_is_translated_in_its_place():
    out = translated(open_document("odt"), "a.odt", upper_engine)
    content = zipfile.ZipFile(io.BytesIO(out)).read("content.xml").decode()
    assert "<text:note-citation>1</text:note-citation><text:note-body><text:p>A FOOTNOTE</text:p>" in content


# Office files read by LibreOffice

NO_LIBREOFFICE = (
    "LibreOffice is not installed (Debian: libreoffice-writer-nogui, libreoffice-impress-nogui, libreoffice-calc-nogui)"
)


@pytest.mark.skipif(
    shutil.which("soffice") is None,
    reason="LibreOffice is not installed (Debian: libreoffice-writer-nogui, libreoffice-impress-nogui)",
)
def test_libreoffice_reads_the_translated_office_files(tmp_path):
    files = {"a.docx": word_document(RUNS), "b.odt": open_document("odt")}
    for name, data in files.items():
        (tmp_path / name).write_bytes(translated(data, name, upper_engine))
    profile = f"-env:UserInstallation=file://{tmp_path}/profile"
    subprocess.run(["soffice", profile, "--headless", "--convert-to", "txt:Text", "--outdir", str(tmp_path / "txt"),
                    *(str(tmp_path / name) for name in files)], check=True, capture_output=True, timeout=300)  # fmt: skip
    assert "A MAN IN A BLUE SHIRT RIDES A BIKE" in (tmp_path / "txt" / "a.txt").read_text(encoding="utf-8-sig")
    assert "A MAN IN A BLUE SHIRT RIDES A" in (tmp_path / "txt" / "b.txt").read_text(encoding="utf-8-sig")
    sheet = tmp_path / "d.xlsx"
    sheet.write_bytes(translated(spreadsheet(), "d.xlsx", upper_engine))
    subprocess.run(["soffice", profile, "--headless", "--convert-to", "csv", "--outdir", str(tmp_path / "csv"),
                    str(sheet)], check=True, capture_output=True, timeout=300)  # fmt: skip
    assert (tmp_path / "csv" / "d.csv").read_text().splitlines()[:2] == [
        "A DOG RUNS,42,84",
        "A MAN IN A BLUE SHIRT RIDES,,",
    ]
    presentation = tmp_path / "c.pptx"
    presentation.write_bytes(translated(slides(), "c.pptx", upper_engine))
    subprocess.run(["soffice", profile, "--headless", "--convert-to", "odp", "--outdir", str(tmp_path / "odp"),
                    str(presentation)], check=True, capture_output=True, timeout=300)  # fmt: skip
    assert "A MAN IN A " in " ".join(odf_paragraphs((tmp_path / "odp" / "c.odp").read_bytes()))


@pytest.mark.skipif(shutil.which("soffice") is None, reason=NO_LIBREOFFICE)
def test_libreoffice_calc_reads_the_translated_spreadsheet(tmp_path):
    (tmp_path / "source.xlsx").write_bytes(spreadsheet())
    (tmp_path / "d.xlsx").write_bytes(translated(spreadsheet(), "d.xlsx", upper_engine))
    subprocess.run(["soffice", f"-env:UserInstallation=file://{tmp_path}/profile", "--headless", "--convert-to", "csv",
                    "--outdir", str(tmp_path / "csv"), str(tmp_path / "source.xlsx"), str(tmp_path / "d.xlsx")],
                   capture_output=True, timeout=300)  # fmt: skip
    if not (tmp_path / "csv" / "source.csv").exists():
        pytest.skip("LibreOffice has no Calc to read spreadsheets (Debian: libreoffice-calc-nogui)")
    assert (tmp_path / "csv" / "d.csv").read_text().splitlines()[:2] == [
        "A DOG RUNS,42,84",
        "A MAN IN A BLUE SHIRT RIDES,,",
    ]


# Subtitles

SRT = """1
00:00:01,000 --> 00:00:02,500
<i>a man in a blue shirt</i>
rides a bike

2
00:00:03,000 --> 00:00:04,000
on the street.

3
00:00:05,000 --> 00:00:06,000
Two dogs play.
"""
VTT = """WEBVTT
Kind: captions

NOTE a note that is kept

intro
00:00:01.000 --> 00:00:02.500 align:start position:10%
Hello <b>there</b> friend.

00:00:03.000 --> 00:00:04.000
Bye now.
"""


def test_copied_subtitles_are_the_same_file():
    assert translated(SRT.encode(), "a.srt", copy_engine).decode() == SRT
    assert translated(VTT.encode(), "a.vtt", copy_engine).decode() == VTT


def test_a_sentence_over_cues_is_translated_whole_and_cut_back_by_alignment():
    import pysubs2

    document = read_document(SRT.encode(), "a.srt", "srt")
    assert document.segments()[0] == ('<g id="0">a man in a blue shirt</g> rides a bike <x id="1"/> on the street.')
    out = translated(SRT.encode(), "a.srt", reverse_engine).decode()
    cues = pysubs2.SSAFile.from_string(out)
    assert [(cue.start, cue.end) for cue in cues] == [(1000, 2500), (3000, 4000), (5000, 6000)]
    texts = [block.split("\n")[2:] for block in out.strip().split("\n\n")]
    # where the alignment leaves a cue without words, they are shared out by the cues' lengths
    assert texts == [["street. the on bike", "a rides <i>shirt blue a</i>"], ["<i>in man a</i>"], ["play. dogs Two"]]


def test_webvtt_keeps_its_header_notes_identifiers_and_cue_settings():
    out = translated(VTT.encode(), "a.vtt", upper_engine).decode()
    assert out.startswith(
        "WEBVTT\nKind: captions\n\nNOTE a note that is kept\n\nintro\n00:00:01.000 --> 00:00:02.500 align:start position:10%\n"
    )
    assert "HELLO <b>THERE</b> FRIEND." in out and "BYE NOW." in out


def test_rewrapping_balances_the_lines():
    from mtkit.documents.subtitles import wrap

    assert wrap("one two three four", 2) == ["one two", "three four"]
    assert wrap("<i>one</i> two", 3) == ["<i>one</i>", "two"]
    assert wrap("word", 2) == ["word"]


# Message catalogues

PO = r"""msgid ""
msgstr ""
"Content-Type: text/plain; charset=CHARSET\n"
"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\n"

#, python-format
msgid "Hello %(name)s, you have mail\n"
msgstr ""

#, c-format
msgid "one file on %s"
msgid_plural "%d files on %s"
msgstr[0] ""
msgstr[1] ""

msgid "already done"
msgstr "schon fertig"

#, fuzzy
msgid "a guess"
msgstr "eine Vermutung"
"""


def test_po_fills_untranslated_messages_marks_them_fuzzy_and_keeps_placeholders():
    import polib

    out = polib.pofile(translated(PO.encode(), "a.pot", reverse_engine, target="cs").decode())
    hello, files, done, guess = list(out)
    # the placeholder goes after the target word aligned to the source word before it
    assert hello.msgstr == "mail have you , Hello %(name)s\n" and "fuzzy" in hello.flags
    assert files.msgstr_plural == {0: "on file one %s", 1: "%d on files %s", 2: "%d on files %s"}
    assert (done.msgstr, done.flags) == ("schon fertig", []) and guess.msgstr == "eine Vermutung"
    assert out.metadata["Language"] == "cs" and out.metadata["Plural-Forms"].startswith("nplurals=3;")


def test_unnumbered_placeholders_keep_their_order_and_named_ones_their_place():
    from mtkit.documents.catalogs import _placeholders
    from mtkit.documents.strings.placeholders import fill_placeholders

    built = _placeholders("%d files on %s for %(user)s")
    assert built.codes == ["%d", "%s", "%(user)s"]
    assert fill_placeholders('<x id="2"/> a <x id="1"/> b <x id="0"/>', built) == "%(user)s a %d b %s"


def test_po_retranslates_on_request_only():
    import polib

    out = polib.pofile(translated(PO.encode(), "a.po", upper_engine, retranslate=True).decode())
    assert [entry.msgstr for entry in out][2:] == ["ALREADY DONE", "A GUESS"]


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="gettext's msgfmt is not installed (Debian: gettext)")
def test_msgfmt_checks_the_translated_catalogue(tmp_path):
    path = tmp_path / "de.po"
    path.write_bytes(translated(PO.encode(), "a.pot", reverse_engine))
    subprocess.run(["msgfmt", "--check-format", "--check-header", "-o", "/dev/null", str(path)], check=True)


def test_a_po_file_with_plurals_and_no_known_plural_forms_is_refused():
    with pytest.raises(MtkitError, match="a.pot: its header has no Plural-Forms and mtkit does not know those of xx"):
        translated(PO.encode(), "a.pot", copy_engine, target="xx")


XLIFF = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
 <file source-language="en" datatype="plaintext" original="x">
  <body>
   <trans-unit id="1"><source>a man in a <g id="b">blue shirt</g> rides<x id="img"/>.</source></trans-unit>
   <trans-unit id="2"><source>a woman sings</source><target>eine Frau singt</target></trans-unit>
   <trans-unit id="3" translate="no"><source>mtkit</source></trans-unit>
  </body>
 </file>
</xliff>
"""
XLIFF2 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en">
 <file id="f"><unit id="u"><segment><source>a <pc id="1">bold</pc> word<ph id="2"/></source></segment></unit></file>
</xliff>
"""


def test_xliff_targets_keep_inline_codes_and_say_they_are_machine_translated():
    root = etree.fromstring(translated(XLIFF.encode(), "a.xlf", reverse_engine))
    ns = "{urn:oasis:names:tc:xliff:document:1.2}"
    first, second, third = root.iter(ns + "trans-unit")
    target = first.find(ns + "target")
    assert etree.tostring(target, encoding="unicode", with_tail=False).split(">", 1)[1] == (
        'rides. <g id="b">shirt blue</g> a in man a<x id="img"/></target>'
    )
    assert (target.get("state"), target.get("state-qualifier")) == ("needs-review-translation", "leveraged-mt")
    assert second.find(ns + "target").text == "eine Frau singt" and third.find(ns + "target") is None
    assert root.find(ns + "file").get("target-language") == "de"
    root2 = etree.fromstring(translated(XLIFF2.encode(), "a.xliff", upper_engine))
    segment = root2.find(".//{urn:oasis:names:tc:xliff:document:2.0}segment")
    assert (segment.get("state"), root2.get("trgLang")) == ("translated", "de")
    target = etree.tostring(segment[-1], encoding="unicode", with_tail=False)
    assert target.endswith('>A <pc id="1">BOLD</pc> WORD<ph id="2"/></target>')


# Markdown, HTML, EPUB, text

MARKDOWN = """---
title: kept
---
# a **blue** shirt

- a man rides a [bike](http://example.org/a_b "t") on the `street`
  and smiles

| head | tail |
|------|------|
| cat | a dog |

```
code stays
```
"""


def test_markdown_copied_renders_the_same_and_keeps_code_and_links():
    from markdown_it import MarkdownIt

    render = MarkdownIt("commonmark").enable("table").render
    out = translated(MARKDOWN.encode(), "a.md", copy_engine).decode()
    assert render(out) == render(MARKDOWN).replace("street</code>\nand", "street</code> and")
    upper = translated(MARKDOWN.encode(), "a.md", upper_engine).decode()
    assert upper.startswith("---\ntitle: kept\n---\n# A **BLUE** SHIRT\n")
    assert '- A MAN RIDES A [BIKE](http://example.org/a_b "t") ON THE `street` AND SMILES\n' in upper
    assert "| CAT | A DOG |" in upper and "```\ncode stays\n```" in upper


def test_html_files_are_translated_with_their_language_set():
    page = '<!DOCTYPE html>\n<html lang="en"><head><title>a title</title></head><body><p>a <b>bold</b> word</p><script>x = "a"</script></body></html>\n'
    out = translated(page.encode(), "a.html", upper_engine).decode()
    assert out == page.replace('lang="en"', 'lang="de"').replace("a title", "A TITLE").replace(
        "a <b>bold</b> word", "A <b>BOLD</b> WORD"
    )


def epub_book() -> bytes:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("a book")
    book.set_language("en")
    chapter = epub.EpubHtml(title="one", file_name="one.xhtml", lang="en")
    chapter.content = "<h1>a chapter</h1><p>a <i>dog</i> runs</p>"
    book.add_item(chapter)
    book.toc, book.spine = [chapter], ["nav", chapter]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    path = io.BytesIO()
    epub.write_epub(path, book)
    return path.getvalue()


def test_an_epub_is_translated_chapter_by_chapter_and_reopens():
    from ebooklib import epub

    out = translated(epub_book(), "a.epub", upper_engine)
    (tmp := __import__("tempfile").NamedTemporaryFile(suffix=".epub")).write(out)
    tmp.flush()
    reopened = epub.read_epub(tmp.name)
    assert reopened.get_metadata("DC", "language")[0][0] == "de"
    text = reopened.get_item_with_href("one.xhtml").get_content().decode()
    assert "<h1>A CHAPTER</h1>" in text and "<p>A <i>DOG</i> RUNS</p>" in text
    assert zipfile.ZipFile(io.BytesIO(out)).infolist()[0].filename == "mimetype"


def test_plain_text_keeps_its_lines_and_blank_lines():
    assert translated(b"a dog\n\nruns  here\n", "a.txt", upper_engine) == b"A DOG\n\nRUNS HERE\n"


# What is not the format it says


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("a.docx", b"plain text", "a.docx: not a .docx file (not a readable zip archive"),
        ("a.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1rest", "a.docx: encrypted, or an old binary Office file"),
        ("a.pptx", None, "a.pptx: not a .pptx file (it has no ppt/presentation.xml)"),
        ("a.odt", None, "a.odt: not an .odt file (it has no content.xml)"),
        ("a.epub", None, "a.epub: not an .epub file (it has no META-INF/container.xml)"),
        ("a.srt", b"just words\n", "a.srt: not an SRT file"),
        ("a.vtt", b"1\n00:00:01.000 --> 00:00:02.000\nhi\n", "a.vtt: not a WebVTT file"),
        ("a.xliff", b"<html/>", "a.xliff: not an XLIFF 1.2 or 2.x file (its root is html)"),
        ("a.xliff", b"<xliff", "a.xliff: not well-formed XML"),
        ("a.po", b'msgid "x"\nbogus line\n', "a.po: not a PO file (Syntax error in po file (line 2))"),
        ("a.txt", b"\xff\xfe", "a.txt: not UTF-8 text (byte 1)"),
        ("a.rtf", b"{\\rtf1}", "a.rtf: not a format mtkit translates (its extension .rtf"),
    ],
)
def test_a_file_that_is_not_what_it_says_is_named_with_the_reason(name, data, message):
    if data is None:  # a zip archive of another kind
        data = word_document(RUNS)
    with pytest.raises(MtkitError) as err:
        read_document(data, name, document_format(name))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_broken_archive_is_named():
    data = bytearray(word_document(RUNS))
    data[len(data) // 2 : len(data) // 2 + 200] = bytes(200)
    with pytest.raises(MtkitError, match="a.docx: "):
        read_document(bytes(data), "a.docx", "docx")


# The command


def test_translate_file_writes_a_valid_document_with_a_trained_model(trained_run, tmp_path):
    from conftest import run_mtkit

    source = tmp_path / "in.docx"
    source.write_bytes(word_document(RUNS))
    result = run_mtkit("translate-file", source, "-o", tmp_path / "out.docx", "-m", trained_run, "--beam", "2")
    assert result.returncode == 0, result.stderr.decode()
    out = (tmp_path / "out.docx").read_bytes()
    assert len(word_texts(out)) == len(word_texts(source.read_bytes())) and result.stdout == b""
    bold = [run for run in word_runs(out)[0] if run[1]]
    assert bold and all(text.strip() for text, *_ in bold)  # the bold run holds words of the translation
    piped = run_mtkit(
        "translate-file", "-", "--format", "txt", "-o", "-", "-m", trained_run, stdin=b"A dog.\n\nA cat.\n"
    )
    assert piped.returncode == 0 and piped.stdout.count(b"\n") == 3 and piped.stdout.split(b"\n")[1::2] == [b"", b""]


def test_a_missing_documents_extra_is_named_with_its_pip_command(monkeypatch):
    import sys

    import mtkit.documents
    from mtkit.cli.documents import require_documents

    require_documents()  # imported once, then taken away as if its dependencies were missing
    monkeypatch.delattr(mtkit.documents, "formats")
    monkeypatch.setitem(sys.modules, "mtkit.documents.formats", None)
    with pytest.raises(
        MtkitError, match=r"translating files needs mtkit.documents.formats: pip install 'mtkit\[documents\]'"
    ):
        require_documents()


def test_progress_counts_every_sentence_once(trained_run):
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.translation.markup import translate_document
    from mtkit.translation.translate import Translator

    model = load_model_file(trained_run / "checkpoints" / "step_00000040.pt")
    for name, data in (("a.docx", word_document(RUNS)), ("a.txt", b"A dog. A cat.\n\nTwo men.\n")):
        seen: list[tuple[int, int]] = []
        document = read_document(data, name, document_format(name))
        translator = Translator(model, SearchConfig(beam=2), "cpu")
        translate_document(translator, document, "de", True, lambda *a, seen=seen: seen.append(a))
        total = seen[-1][1]
        assert seen == [(n, total) for n in range(1, total + 1)] and total >= 3


def test_a_catalogue_that_cannot_be_written_in_the_target_is_refused_before_translating():
    from mtkit.translation.markup import translate_document

    document = read_document(PO.encode(), "a.pot", "po")
    with pytest.raises(MtkitError, match="a.pot: its header has no Plural-Forms"):
        translate_document(object(), document, "xx")  # refused before the translator is used


def test_only_sentences_with_codes_are_aligned(trained_run):
    """A paragraph in one formatting needs no alignment (with beam search, no second pass for it)."""
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.model.files import load_model_file
    from mtkit.translation.markup import translate_document
    from mtkit.translation.translate import Translator

    translator = Translator(
        load_model_file(trained_run / "checkpoints" / "step_00000040.pt"), SearchConfig(beam=2), "cpu"
    )
    aligned: list[str] = []
    original = translator.alignments
    translator.alignments = lambda lines, hypotheses: aligned.extend(lines) or original(lines, hypotheses)
    translate_document(translator, read_document(word_document(RUNS), "a.docx", "docx"), "de")
    assert aligned == ["A man in a blue shirt rides a bike"]  # not the heading, the table, the header or footer
