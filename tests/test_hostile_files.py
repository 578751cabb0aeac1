"""Files from strangers (mtkit.documents.inline): bombs, deep nesting, paths posing as content and
quadratic inputs get one line naming the file and the bound, read within bounded memory (a child
process with an address-space limit); and mutated files of every format give a document or an
MtkitError, nothing else."""

import io
import json
import subprocess
import sys
import zipfile

import docx
import pytest
from hostile import (
    DOCUMENT_XML,
    deep,
    duplicate_part,
    empty_paragraphs,
    inflating_word_file,
    lying_sizes,
    package,
    paragraph,
    plural_po,
    po_file,
    reference_links,
    word_file,
    yaml_alias_bomb,
    yaml_merge_chain,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree
from test_documents import (
    MARKDOWN,
    PO,
    RUNS,
    SRT,
    VTT,
    XLIFF,
    copy_engine,
    epub_book,
    open_document,
    reverse_engine,
    slides,
    spreadsheet,
    translated,
    word_document,
)
from test_pdf import made_pdf
from test_string_files import ARB, PROPERTIES, RAILS, STRINGS, STRINGSDICT, TABLE
from test_strings import ANDROID

from mtkit.core.errors import MtkitError
from mtkit.documents import web
from mtkit.documents.formats import document_format, read_document
from mtkit.documents.inline import FileLimits, FileTooLarge, inline_entities
from mtkit.text.markup import MAX_DEPTH
from mtkit.text.markup_placement import translate_markup

MEMORY = 1 << 30  # the address space a child reading a hostile file may take
CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
from mtkit.core.errors import MtkitError
from mtkit.documents.formats import document_format, read_document
data = sys.stdin.buffer.read()
try:
    document = read_document(data, {name!r}, document_format({name!r}))
    print("read", len(document.segments()))
except MtkitError as err:
    print("error", err)
"""


def read_in_child(name: str, data: bytes) -> str:
    """What a child limited to MEMORY bytes of address space says of the file: "read N" (segments) or
    "error MESSAGE"; a child killed for memory or raising anything else fails the test."""
    child = subprocess.run([sys.executable, "-c", CHILD.format(memory=MEMORY, name=name)], input=data,
                           capture_output=True, timeout=600)  # fmt: skip
    assert child.returncode == 0 and child.stdout.count(b"\n") == 1, child.stderr.decode()[-2000:]
    return child.stdout.decode().strip()


def refused(name: str, data: bytes, **limits) -> str:
    """The one-line error reading the file gives."""
    with pytest.raises(MtkitError) as err:
        read_document(data, name, document_format(name), limits=FileLimits(**limits))
    message = str(err.value)
    assert message.startswith(f"{name}: ") and "\n" not in message
    return message


# Zip bombs and packages


def test_a_part_that_inflates_to_a_quarter_gib_is_refused_from_the_directory_in_little_memory():
    bomb = inflating_word_file(256 << 20)
    assert len(bomb) < 400_000
    said = read_in_child("bomb.docx", bomb)
    assert said == "error bomb.docx: word/document.xml inflates to more than 128 MiB (the limit)"


def test_a_directory_that_lies_about_sizes_is_caught_while_inflating():
    bomb = lying_sizes(inflating_word_file(64 << 20), DOCUMENT_XML, 1000)
    assert zipfile.ZipFile(io.BytesIO(bomb)).getinfo(DOCUMENT_XML).file_size == 1000
    said = read_in_child("lying.docx", bomb)
    assert said.startswith("error lying.docx: ") and "CRC" in said  # inflating stopped at the stated size


def test_a_part_that_inflates_past_the_ratio_is_refused_at_the_bound():
    message = refused("ratio.docx", inflating_word_file(8 << 20))
    assert message.endswith("word/document.xml inflates more than 500-fold (8,317 bytes to 8,388,776): a zip bomb?")
    # while inflating: the directory states a small size that the data runs past
    with pytest.raises(FileTooLarge, match="more than 3-fold"):
        read_document(word_file(paragraph("a dog " * 300_000)), "a.docx", "docx", limits=FileLimits(max_ratio=3))


def test_the_package_bounds_are_exact():
    data = word_file()
    parts = len(zipfile.ZipFile(io.BytesIO(data)).infolist())
    read_document(data, "a.docx", "docx", limits=FileLimits(max_members=parts))
    assert refused("a.docx", data, max_members=parts - 1).endswith(f"{parts:,} parts in the package: the limit is "
                                                                   f"{parts - 1:,}")  # fmt: skip
    total = sum(info.file_size for info in zipfile.ZipFile(io.BytesIO(data)).infolist())
    read_document(data, "a.docx", "docx", limits=FileLimits(max_package_bytes=total))
    assert "inflate to more than" in refused("a.docx", data, max_package_bytes=total - 1)


def test_a_million_empty_paragraphs_are_refused_in_little_memory():
    said = read_in_child("empty.docx", empty_paragraphs(1_000_000))
    assert said.startswith("error empty.docx: word/document.xml inflates more than 500-fold")
    stored = empty_paragraphs(600_000, zipfile.ZIP_STORED)  # no inflation at all: the paragraphs are counted
    assert read_in_child("stored.docx", stored) == "error stored.docx: 600,000 paragraphs: the limit is 500,000"


def test_segment_bounds_are_exact_in_every_kind_of_file():
    cases = [("a.docx", empty_paragraphs(5, zipfile.ZIP_STORED), 5, "paragraphs"),
             ("a.srt", SRT.encode(), SRT.count("-->"), "cues"), ("a.txt", b"a\nb\nc", 3, "lines"),
             ("a.html", b"<p>a</p><p>b</p>", 4, "tags")]  # fmt: skip
    for name, data, count, what in cases:
        read_document(data, name, document_format(name), limits=FileLimits(max_segments=count))
        assert refused(name, data, max_segments=count - 1).endswith(f"{count:,} {what}: the limit is {count - 1:,}")


def test_two_parts_of_one_name_are_refused():
    assert refused("a.docx", duplicate_part(word_file(), DOCUMENT_XML)) == (
        "a.docx: two parts named word/document.xml: not a .docx file"
    )


@pytest.mark.parametrize("part", ["../../evil.sh", "/etc/cron.d/x", "word/../../x.xml", "C:/x.xml", "word\\..\\x.xml"])
@pytest.mark.parametrize("name", ["a.docx", "a.odt", "a.epub"])
def test_a_part_named_outside_the_package_is_refused(part, name):
    """Written back as is, such a part would land outside the folder the translation is unpacked in."""
    base = {"a.docx": word_file, "a.odt": lambda: open_document("odt"), "a.epub": epub_book}[name]()
    message = refused(name, package({part: b"x"}, base))
    assert message.startswith(f"{name}: a part named {part!r}: not ")


def test_entity_references_become_their_text_and_the_text_after_them_is_kept():
    doctype = '<!DOCTYPE w:document [<!ENTITY e "big &amp; red"><!ENTITY m "<b/>"><!ENTITY s SYSTEM "/etc/hostname">]>'
    body = paragraph("a &e; dog &m;&s;runs") + paragraph("&e;")
    data = word_file(body, doctype)
    assert read_document(data, "a.docx", "docx").segments() == ["a big &amp; red dog runs", "big &amp; red"]
    out = translated(data, "a.docx", reverse_engine)  # python-docx reopens it: no entity left undeclared
    assert [p.text for p in docx.Document(io.BytesIO(out)).paragraphs] == ["runs dog red & big a", "red & big"]
    laughs = "".join(f'<!ENTITY l{n} "{f"&l{n - 1};" * 10 if n else "lol" * 10}">' for n in range(10))
    bomb = word_file(paragraph("&l9;" * 100 + "&l0;" * 40_000), f"<!DOCTYPE w:document [{laughs}]>")
    assert refused("a.docx", bomb).startswith("a.docx: word/document.xml: not well-formed XML (Maximum entity "
                                              "amplification factor exceeded")  # libxml2's own guard  # fmt: skip

    def unresolved():
        text = b'<!DOCTYPE d [<!ENTITY q "0123456789">]><d>&q;&q;&q;</d>'
        return etree.fromstring(text, etree.XMLParser(resolve_entities=False))

    inline_entities(root := unresolved(), 30, "d.xml")  # and ours, behind it: here 30 characters at most
    assert root.text == "0123456789" * 3
    with pytest.raises(MtkitError, match="d.xml: its entity references expand to more than 29 characters"):
        inline_entities(unresolved(), 29, "d.xml")


# Characters


def test_a_documents_characters_are_bounded():
    data = word_file(paragraph("A dog &amp; a cat") + "<w:p><w:r><w:rPr><w:b/></w:rPr><w:t>run.</w:t></w:r></w:p>")
    chars = len("A dog & a cat") + len("run.")
    read_document(data, "a.docx", "docx", limits=FileLimits(max_chars=chars))
    assert refused("a.docx", data, max_chars=chars - 1) == (
        f"a.docx: {chars:,} characters to translate: the limit is {chars - 1:,} (--max-file-chars)"
    )
    page = b"<p>a <b>dog</b> &amp; cat</p><script>not text</script>"
    read_document(page, "a.html", "html", limits=FileLimits(max_chars=len("a dog & cat")))
    refused("a.html", page, max_chars=len("a dog & cat") - 1)


@pytest.mark.parametrize("name", ["a.md", "a.txt", "a.srt", "a.vtt", "a.po", "a.properties", "a.strings"])
def test_a_file_of_light_markup_far_past_the_characters_is_refused_before_it_is_parsed(name, monkeypatch):
    """Characters, not bytes (a 2-byte "é" is one): 4 x the limit reaches the reader, one more is
    refused without calling it."""
    from mtkit.documents import formats

    fmt = document_format(name)
    within, past = "é" * 40, "é" * 41

    def unreachable(*_):
        raise AssertionError("parsed")

    monkeypatch.setitem(formats.READERS, fmt, unreachable)
    assert refused(name, past.encode(), max_chars=10) == (
        f"{name}: 41 characters, more than 4 times the 10 characters to translate a document may hold (--max-file-chars)"
    )
    with pytest.raises(AssertionError, match="parsed"):
        read_document(within.encode(), name, fmt, limits=FileLimits(max_chars=10))
    if name == "a.strings":  # UTF-16, after its byte-order mark
        with pytest.raises(AssertionError, match="parsed"):
            read_document(within.encode("utf-16"), name, fmt, limits=FileLimits(max_chars=10))
        assert refused(name, past.encode("utf-16"), max_chars=10).startswith(f"{name}: 41 characters, more than 4")


def test_a_file_of_heavy_markup_is_bounded_by_its_text_alone():
    page = b"<p>" + b'<b class="x"></b>' * 1000 + b"a dog</p>"
    assert len(read_document(page, "a.html", "html", limits=FileLimits(max_chars=5)).segments()) == 1


def test_translate_file_names_the_bound_and_writes_nothing(trained_run, tmp_path):
    from conftest import run_mtkit

    (tmp_path / "a.txt").write_text("A dog runs.\n")
    result = run_mtkit("translate-file", tmp_path / "a.txt", "-o", tmp_path / "b.txt", "-m", trained_run,
                       "--max-file-chars", "5")  # fmt: skip
    error = result.stderr.decode().strip()
    assert result.returncode == 1 and "Traceback" not in error and len(error.splitlines()) == 1
    assert error.endswith("a.txt: 11 characters to translate: the limit is 5 (--max-file-chars)")
    assert not (tmp_path / "b.txt").exists()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('{"n": ' + "7" * 5000 + ', "t": "Hello."}', "an integer of more than 4,300 digits"),
        ('{"n": 1e999, "t": "Hello."}', "the number 1e999 is out of a double's range"),
        ('{"n": -Infinity, "t": "Hello."}', "-Infinity is not JSON"),
        ('{"t": "Hello.", "t": "Bye."}', 'the key "t" twice in one object'),
    ],
)
@pytest.mark.parametrize("suffix", [".json", ".arb"])
def test_json_that_would_not_come_back_as_the_same_json_is_one_line(trained_run, tmp_path, body, named, suffix):
    """Read as a document and through the CLI: one line naming the file, nothing written (they were a
    500 on the server, a traceback in the CLI, or Infinity and a lost key in the output)."""
    from conftest import run_mtkit

    source = tmp_path / f"app{suffix}"
    source.write_text(body)
    with pytest.raises(MtkitError, match=named):
        read_document(source.read_bytes(), source.name, document_format(source.name))
    result = run_mtkit("translate-file", source, "-o", tmp_path / f"out{suffix}", "-m", trained_run)
    error = result.stderr.decode().strip()
    assert result.returncode == 1 and "Traceback" not in error and len(error.splitlines()) == 1
    assert error.endswith(named) and not (tmp_path / f"out{suffix}").exists()


def test_yaml_merge_keys_that_expand_a_file_are_refused_before_it_is_built(trained_run, tmp_path):
    """Counted on the parser's events: a merge copies what it merges (2,000 chained merges, 78 KB, are
    two million entries; 34 KB of them took 91 s); plain aliases stay shared (an alias bomb reads in
    its size)."""
    from conftest import run_mtkit

    assert refused("en.yml", yaml_merge_chain()).startswith("en.yml: its merge keys expand it past 100,000 nodes")
    (tmp_path / "en.yml").write_bytes(yaml_merge_chain())
    result = run_mtkit("translate-file", tmp_path / "en.yml", "-o", tmp_path / "de.yml", "-m", trained_run)
    error = result.stderr.decode().strip()
    assert result.returncode == 1 and "Traceback" not in error and len(error.splitlines()) == 1
    merged = b"en:\n  defaults: &d\n    a: Hello\n  one:\n    <<: *d\n    c: Thanks\n"
    assert read_document(merged, "en.yml", "yaml").segments() == ["Hello", "Thanks", "Hello"]
    assert len(read_document(yaml_alias_bomb(), "bomb.yml", "yaml").segments()) == 9


# Catalogues


def test_a_po_file_naming_a_path_is_content_not_that_file(tmp_path):
    real = tmp_path / "real.po"
    real.write_bytes(po_file())
    assert read_document(real.read_bytes(), "real.po", "po").segments() == ["A dog runs."]
    for content in (str(real), f"{real}\n", "/etc/hostname"):
        message = refused("a.po", content.encode())
        assert message.startswith("a.po: not a PO file"), message


@pytest.mark.parametrize("nplurals", ["0", "7", "10000000", "9" * 5000])
def test_plural_forms_beyond_a_handful_are_refused(nplurals):
    shown = nplurals if len(nplurals) <= 12 else nplurals[:12] + "..."
    assert refused("a.po", plural_po(nplurals)) == f"a.po: Plural-Forms nplurals={shown}: must be between 1 and 6"


def test_six_plural_forms_are_filled():
    out = translated(plural_po("6"), "a.po", copy_engine).decode()
    assert all(f'msgstr[{n}] "' in out for n in range(6)) and "msgstr[6]" not in out


# Depth


def deep_in(fmt: str, depth: int) -> tuple[str, bytes]:
    """deep() for every format, ODF and EPUB too."""
    if fmt == "odt":
        spans = '<text:span text:style-name="T1">' * depth + "A dog runs." + "</text:span>" * depth
        data = open_document("odt")
        content = zipfile.ZipFile(io.BytesIO(data)).read("content.xml").decode()
        content = content.replace("<office:text>", f"<office:text><text:p>{spans}</text:p>", 1)
        return "deep.odt", _replaced(data, "content.xml", content.encode())
    if fmt == "epub":
        data = epub_book()
        page = zipfile.ZipFile(io.BytesIO(data)).read("EPUB/one.xhtml").decode()
        nested = "<span>" * (depth - 3) + "a dog" + "</span>" * (depth - 3)  # html, body and p around it
        return "deep.epub", _replaced(data, "EPUB/one.xhtml", page.replace("a chapter", nested).encode())
    if fmt == "html":
        return deep(fmt, depth - 1)  # and the p around
    return deep(fmt, depth)


def _replaced(data: bytes, part: str, new: bytes) -> bytes:
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            archive.writestr(info, new if info.filename == part else source.read(info))
    return out.getvalue()


def in_a_deep_stack(frames: int, work):
    """work() called under `frames` frames of the caller's own (a server's stack is deep already)."""
    return work() if frames == 0 else in_a_deep_stack(frames - 1, work)


@pytest.mark.parametrize("fmt", ["html", "srt", "md", "xliff", "odt", "epub"])
def test_nesting_to_the_limit_translates_and_past_it_is_one_line(fmt):
    name, data = deep_in(fmt, MAX_DEPTH)
    out = in_a_deep_stack(150, lambda: translated(data, name, reverse_engine))
    if zipfile.is_zipfile(io.BytesIO(out)):
        out = b"".join(zipfile.ZipFile(io.BytesIO(out)).read(part) for part in ("content.xml", "EPUB/one.xhtml")
                       if part in zipfile.ZipFile(io.BytesIO(out)).namelist())  # fmt: skip
    assert (b"dog a" if fmt == "epub" else b"runs. dog A") in out
    name, data = deep_in(fmt, MAX_DEPTH + 1)
    if fmt == "md":  # markdown-it nests emphasis so far and no further: the rest stays text
        name, data = deep_in(fmt, 5 * MAX_DEPTH)
    message = refused(name, data)
    assert message.startswith(f"{name}: elements nested more than {MAX_DEPTH} levels deep"), message


@pytest.mark.parametrize("fmt", ["html", "srt", "md", "xliff", "odt", "epub", "docx"])
def test_a_file_500_levels_deep_is_read_in_a_child_in_bounded_memory(fmt):
    name, data = deep_in(fmt, 500)
    said = read_in_child(name, data)
    if fmt == "docx":  # hyperlinks in hyperlinks: Word's reader keeps the runs, not the nesting
        assert said == "read 1"
    else:
        assert said.startswith(f"error {name}: elements nested more than {MAX_DEPTH} levels deep"), said


# Time


def test_markdown_links_are_found_in_linear_time(monkeypatch):
    """Each reference link once looked for an inline link's end from the same place to the end of
    the paragraph; the search is now reused: a paragraph's searches are at most its links + 1."""
    searches = []

    class Counted:
        def search(self, text, position):
            searches.append(position)
            return original.search(text, position)

    original = web.LINK_END
    monkeypatch.setattr(web, "LINK_END", Counted())
    document = read_document(reference_links(2000), "links.md", "md")
    assert len(searches) <= 2 and document.segments()[0].count("<g id=") == 2000
    searches.clear()
    inline = b'A [dog](https://a.example) and [a cat][r1] and [runs](/b "t").\n\n[r1]: /c\n'
    segment = read_document(inline, "a.md", "md").segments()[0]
    assert len(searches) == 2 and segment.count("<g id=") == 3
    # the same as before: a reference link is written with its target, an inline link's target as written
    assert (
        translated(inline, "a.md", copy_engine)
        == b'A [dog](https://a.example) and [a cat](/c) and [runs.](/b "t")\n\n[r1]: /c\n'
    )


# Fuzzing


def seeds() -> dict[str, bytes]:
    return {
        "a.docx": word_document(RUNS), "a.pptx": slides(), "a.xlsx": spreadsheet(), "a.odt": open_document("odt"),
        "a.odp": open_document("odp"), "a.epub": epub_book(), "a.srt": SRT.encode(), "a.vtt": VTT.encode(),
        "a.po": PO.encode(), "a.xliff": XLIFF.encode(), "a.md": MARKDOWN.encode(),
        "a.html": b"<html><body><h1>a <b>dog</b></h1><p>runs <i>here</i></p></body></html>",
        "a.txt": b"a dog\n\nruns here\n",
        "a.json": b'{"a": {"b": "Open %s now", "n_one": "one dog", "n_other": "{{count}} dogs"}, "c": [1, "x"]}',
        "strings.xml": ANDROID.encode(), "a.yml": RAILS.encode(), "a.arb": json.dumps(ARB).encode(),
        "a.strings": STRINGS.encode(), "a.stringsdict": STRINGSDICT.encode(), "a.properties": PROPERTIES,
        "a.csv": TABLE, "a.pdf": made_pdf(pages=1),
    }  # fmt: skip


SEEDS = seeds()
SNIPPETS = [b"<", b">", b"</", b"<b>", b"<g id=\"1\">", b"&", b"&e;", b"*", b"_", b"[", b"](", b"\n", b"\x00",
            b"\xff", b"-->", b"msgid ", b'"', b"\\", b"{", b"%s", b"<w:p>", b"<!DOCTYPE x [<!ENTITY e \"y\">]>"]  # fmt: skip


@st.composite
def mutated(draw, name: str) -> bytes:
    """A seed file with a few of: bytes flipped, a cut, a snippet inserted, nesting added, and for
    zip packages a part dropped, duplicated, inflated or itself mutated."""
    data = SEEDS[name]
    if zipfile.is_zipfile(io.BytesIO(data)) and draw(st.booleans()):
        return _mutated_package(draw, data)
    return _mutated_bytes(draw, data)


def _mutated_bytes(draw, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "nest"]))
        at = draw(st.integers(0, len(out)))
        if kind == "flip" and at < len(out):
            out[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del out[at : at + draw(st.integers(1, 64))]
        elif kind == "insert":
            out[at:at] = draw(st.sampled_from(SNIPPETS))
        else:
            depth = draw(st.integers(1, 3 * MAX_DEPTH))
            out[at:at] = b"<i>" * depth + b"x" + b"</i>" * draw(st.integers(0, depth))
    return bytes(out)


def _mutated_package(draw, data: bytes) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    infos = source.infolist()
    target = draw(st.sampled_from(infos)).filename
    kind = draw(st.sampled_from(["drop", "duplicate", "inflate", "mutate"]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in infos:
            content = source.read(info)
            if info.filename == target and kind == "drop":
                continue
            if info.filename == target and kind == "inflate":
                content += b" " * draw(st.sampled_from([1 << 10, 3 << 20]))
            if info.filename == target and kind == "mutate":
                content = _mutated_bytes(draw, content)
            archive.writestr(info.filename, content)
    data = out.getvalue()
    return duplicate_part(data, target) if kind == "duplicate" and target in source.namelist() else data


def read_and_write(name: str, data: bytes) -> None:
    """A mutated file reads into a document that writes again, or is an MtkitError naming it in one
    line (a PDF's may come only when it is written: MuPDF reads what it can of a broken page)."""
    try:
        document = read_document(data, name, document_format(name), column="en:de")
        document.check_target("de")
    except MtkitError as err:
        assert str(err).startswith(f"{name}: ") and "\n" not in str(err), str(err)
        return
    try:
        document.write(translate_markup(document.segments(), document.markup, reverse_engine), "de")
    except MtkitError as err:
        assert (
            name.endswith(".pdf") and str(err).startswith(f"{name}: cannot be written again (") and "\n" not in str(err)
        )


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_mutated_files_give_a_document_or_one_line(name):
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutated(name))
    def check(data):
        read_and_write(name, data)

    check()
