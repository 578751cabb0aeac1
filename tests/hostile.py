"""Files a stranger might send to /translate_file, built in memory: zip bombs (honest and lying
directories), a million empty paragraphs, deep nesting in every format, catalogues that name paths
or ask for millions of plural forms, quadratic Markdown. Shared by the tests and bench/hostile_files.py."""

from __future__ import annotations

import io
import os
import struct
import time
import warnings
import zipfile

import docx

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
DOCUMENT_XML = "word/document.xml"


def word_xml(body: str, doctype: str = "") -> bytes:
    """A Word document part whose body is the given XML."""
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>{doctype}'
            f'<w:document xmlns:w="{W_NS}"><w:body>{body}</w:body></w:document>').encode()  # fmt: skip


def paragraph(text: str) -> str:
    return f'<w:p><w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


def package(parts: dict[str, bytes], base: bytes, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """The zip `base` with the given parts replacing (or added to) its own, in its order."""
    source = zipfile.ZipFile(io.BytesIO(base))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        names = [info.filename for info in source.infolist()]
        for name in names + [name for name in parts if name not in names]:
            archive.writestr(name, parts.get(name) or source.read(name))
    return out.getvalue()


def word_file(body: str = paragraph("A dog runs."), doctype: str = "") -> bytes:
    """A .docx (python-docx's own package) with this body."""
    blank = io.BytesIO()
    docx.Document().save(blank)
    return package({DOCUMENT_XML: word_xml(body, doctype)}, blank.getvalue())


def inflating_word_file(inflated: int) -> bytes:
    """A .docx whose document part inflates to about `inflated` bytes (of spaces), written in chunks."""
    head, tail = word_xml("").split(b"<w:body>")
    blank = zipfile.ZipFile(io.BytesIO(word_file()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for info in blank.infolist():
            if info.filename != DOCUMENT_XML:
                archive.writestr(info.filename, blank.read(info))
                continue
            with archive.open(DOCUMENT_XML, "w", force_zip64=True) as part:
                part.write(head + b"<w:body>")
                chunk = b" " * (1 << 20)
                for _ in range(inflated >> 20):
                    part.write(chunk)
                part.write(tail)
    return out.getvalue()


def lying_sizes(data: bytes, part: str, stated: int) -> bytes:
    """The zip with `part`'s inflated size stated as `stated` in its local header and its directory
    entry (the compressed data unchanged): a bomb whose directory looks harmless."""
    out = bytearray(data)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(part)
    struct.pack_into("<I", out, info.header_offset + 22, stated)  # local header: uncompressed size
    directory = out.rfind(b"PK\x01\x02")  # the directory's entries, from the last
    while directory >= 0:
        name_length = struct.unpack_from("<H", out, directory + 28)[0]
        if out[directory + 46 : directory + 46 + name_length] == part.encode():
            struct.pack_into("<I", out, directory + 24, stated)
            break
        directory = out.rfind(b"PK\x01\x02", 0, directory)
    return bytes(out)


def empty_paragraphs(count: int, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    blank = io.BytesIO()
    docx.Document().save(blank)
    return package({DOCUMENT_XML: word_xml("<w:p/>" * count)}, blank.getvalue(), compression)


def duplicate_part(data: bytes, part: str) -> bytes:
    """The zip with a second part of the same name (its text changed) after the first."""
    out = io.BytesIO(data)
    with zipfile.ZipFile(out, "a") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name: that is the point
        archive.writestr(part, zipfile.ZipFile(io.BytesIO(data)).read(part).replace(b"dog", b"cat"))
    return out.getvalue()


def po_file(header: str = "", body: str = 'msgid "A dog runs."\nmsgstr ""\n') -> bytes:
    return f'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n{header}\n{body}'.encode()


def plural_po(nplurals: str) -> bytes:
    header = f'"Plural-Forms: nplurals={nplurals}; plural=n;\\n"'
    return po_file(header, 'msgid "a dog"\nmsgid_plural "dogs"\nmsgstr[0] ""\nmsgstr[1] ""\n')


def deep(fmt: str, depth: int) -> tuple[str, bytes]:
    """A file of `fmt` whose one text sits `depth` levels of formatting deep."""
    words = "A dog runs."
    if fmt == "html":
        return "deep.html", f"<p>{'<span>' * depth}{words}{'</span>' * depth}</p>".encode()
    if fmt == "srt":
        return "deep.srt", f"1\n00:00:01,000 --> 00:00:02,000\n{'<i>' * depth}{words}{'</i>' * depth}\n".encode()
    if fmt == "md":
        return "deep.md", f"{'*' * depth}{words}{'*' * depth}\n\n{'> ' * depth}{words}\n".encode()
    if fmt == "xliff":
        opening = '<g id="1">'
        source = f"{opening * depth}{words}{'</g>' * depth}"
        return "deep.xliff", (
            '<xliff xmlns="urn:oasis:names:tc:xliff:document:1.2" version="1.2"><file source-language="en" '
            f'datatype="plaintext" original="a"><body><trans-unit id="1"><source>{source}</source></trans-unit>'
            "</body></file></xliff>"
        ).encode()
    if fmt == "docx":
        return "deep.docx", word_file(f"<w:p>{'<w:hyperlink>' * depth}<w:r><w:t>{words}</w:t></w:r>"
                                      f"{'</w:hyperlink>' * depth}</w:p>")  # fmt: skip
    raise ValueError(fmt)


def reference_links(count: int) -> bytes:
    """A Markdown paragraph of `count` reference links (no inline link's end anywhere)."""
    return ("A dog " + " ".join(f"[runs][r{i % 100}]" for i in range(count)) + "\n\n"
            + "".join(f"[r{i}]: https://example.com/{i}\n" for i in range(100))).encode()  # fmt: skip


def hold_until(started: str, go_on: str) -> int:
    """A document worker's job that says it started (a file) and holds the worker until the file
    go_on exists; its process id."""
    open(started, "w").close()
    while not os.path.exists(go_on):
        time.sleep(0.01)
    return os.getpid()


def endless(deaf: bool) -> None:
    """A document worker's job that never ends, busy: in Python (the timer of its CPU time stops it),
    or deaf to the timer (it blocks the signal, as a long call into C would not see it)."""
    import signal

    if deaf:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    while True:
        pass


def busy(seconds: float) -> float:
    """A document worker's job that takes `seconds` of CPU time; the CPU time it took."""
    started = time.process_time()
    while time.process_time() - started < seconds:
        pass
    return time.process_time() - started


def yaml_alias_bomb(levels: int = 10) -> bytes:
    """YAML's billion laughs: each level an anchored list of nine aliases of the one before."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, levels)]
    return ("\n".join(lines) + "\n").encode()


def yaml_merge_chain(count: int = 2000) -> bytes:
    """Each mapping merges the one before it (`<<: *previous`): quadratic to build."""
    return (
        "b0: &b0 {k0: v}\n" + "".join(f"b{n}: &b{n}\n  <<: *b{n - 1}\n  k{n}: v\n" for n in range(1, count))
    ).encode()
