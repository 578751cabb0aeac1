"""Which reader a file goes to: by its extension, or by the format asked for; and the bounds every
document keeps (mtkit.documents.inline), its characters counted once it is read (and a file of light
markup's before)."""

from __future__ import annotations

import codecs
import html
import importlib.util
import re
from collections.abc import Callable
from pathlib import PurePath

from mtkit.core.errors import MtkitError
from mtkit.documents import catalogs, ooxml, opendocument, pdf, subtitles, web
from mtkit.documents.inline import DEFAULT_LIMITS, Document, FileLimits, FileTooLarge
from mtkit.documents.strings import android, apple, icu, tables, trees
from mtkit.text.segments import plain_text

READERS: dict[str, Callable[[bytes, str, FileLimits], Document]] = {
    "docx": ooxml.read_docx,
    "pptx": ooxml.read_pptx,
    "xlsx": ooxml.read_xlsx,
    "odt": opendocument.read_odt,
    "odp": opendocument.read_odp,
    "srt": subtitles.read_srt,
    "vtt": subtitles.read_vtt,
    "po": catalogs.read_po,
    "xliff": catalogs.read_xliff,
    "md": web.read_markdown,
    "html": web.read_html,
    "epub": web.read_epub,
    "txt": web.read_txt,
    "json": trees.read_json,
    "yaml": trees.read_yaml,
    "arb": icu.read_arb,
    "android": android.read_android,
    "strings": apple.read_strings,
    "stringsdict": apple.read_stringsdict,
    "properties": tables.read_properties,
    "csv": tables.read_csv,
    "pdf": pdf.read_pdf,
}
INLINE_CODE = re.compile(r'<g id="\d+">|</g>|<x id="\d+"/>')  # InlineBuilder's codes (its text escapes "<")
RETRANSLATABLE = {"po", "xliff", "csv"}  # formats whose messages may be translated already
LIGHT_MARKUP = {"txt", "md", "srt", "vtt", "po", "properties", "strings"}  # characters bound before parsing
MARKUP_ROOM = 4  # a file of light markup: its characters in all per character of text to translate, at most
UTF8_CONTINUATION = bytes(range(0x80, 0xC0))  # the bytes after a character's first
ALIASES = {
    "pot": "po",
    "xlf": "xliff",
    "sdlxliff": "xliff",
    "markdown": "md",
    "htm": "html",
    "xhtml": "html",
    "text": "txt",
    "yml": "yaml",
    "xml": "android",  # an Android string resource (res/values*/strings.xml)
}
EXTENSIONS = sorted({*READERS, *ALIASES} - {"android"})  # "android" names a reader: its files end in .xml
MEDIA_TYPES = {
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "odt": "application/vnd.oasis.opendocument.text",
    "odp": "application/vnd.oasis.opendocument.presentation",
    "srt": "application/x-subrip", "vtt": "text/vtt", "po": "text/x-gettext-translation",
    "xliff": "application/xliff+xml", "md": "text/markdown", "html": "text/html",
    "epub": "application/epub+zip", "txt": "text/plain", "json": "application/json", "android": "application/xml",
    "yaml": "application/yaml", "arb": "application/json", "strings": "text/plain",
    "stringsdict": "application/x-plist", "properties": "text/x-java-properties", "csv": "text/csv",
    "pdf": "application/pdf",
}  # fmt: skip


def uploadable() -> list[str]:
    """The extensions a client that sends only the file can have translated here: not CSV (it needs
    its column), and PDF only where PyMuPDF is installed."""
    has_pdf = importlib.util.find_spec("pymupdf") is not None
    return [ext for ext in EXTENSIONS if ext != "csv" and (ext != "pdf" or has_pdf)]


def document_format(name: str, fmt: str | None = None, option: str = "--format") -> str:
    """The format of a file: fmt where given, else its extension's; an MtkitError names what is known."""
    if fmt:
        chosen = ALIASES.get(fmt.lower().lstrip("."), fmt.lower().lstrip("."))
        if chosen not in READERS:
            raise MtkitError(f"{option} {fmt}: must be one of {', '.join(EXTENSIONS)}")
        return chosen
    suffix = PurePath(name).suffix.lower().lstrip(".")
    chosen = ALIASES.get(suffix, suffix)
    if chosen not in READERS:
        what = f"its extension .{suffix}" if suffix else "it has no extension"
        raise MtkitError(
            f"{name}: not a format mtkit translates ({what}; known: {', '.join(EXTENSIONS)}; or give {option})"
        )
    return chosen


def read_document(
    data: bytes,
    name: str,
    fmt: str,
    retranslate: bool = False,
    limits: FileLimits = DEFAULT_LIMITS,
    column: str | None = None,
) -> Document:
    """The file's segments (fmt from document_format; column: CSV's, tables.CsvColumn); an MtkitError
    naming the file where it is not that format, or past one of the limits (a FileTooLarge where it is
    too large)."""
    try:
        if fmt in LIGHT_MARKUP:
            check_raw_chars(data, limits)
        if fmt == "csv":
            document = tables.read_csv(data, name, limits, retranslate, column)
        elif fmt in RETRANSLATABLE:
            document = READERS[fmt](data, name, limits, retranslate)  # type: ignore[call-arg]
        else:
            document = READERS[fmt](data, name, limits)
        limits.check_chars(characters(document))
    except MtkitError as err:  # one line, naming the file (a part's name may hold a line break)
        message = " ".join(str(err).split())
        raise type(err)(message if message.startswith(f"{name}:") else f"{name}: {message}") from None
    return document


def check_raw_chars(data: bytes, limits: FileLimits) -> None:
    """Before a file of light markup (plain text, Markdown, subtitles, messages) is parsed: its
    characters in all at most MARKUP_ROOM times the characters it may give to translate, so that a
    file far past the limit is refused at once, not after its parse has taken seconds and memory."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):  # (.strings files may be UTF-16)
        count = len(data) // 2 - 1
    else:  # UTF-8's characters, without decoding (a Latin-1 .properties file counts fewer)
        count = len(data.translate(None, UTF8_CONTINUATION))
    if count > MARKUP_ROOM * limits.max_chars:
        raise FileTooLarge(f"{count:,} characters, more than {MARKUP_ROOM} times the {limits.max_chars:,} "
                           "characters to translate a document may hold (--max-file-chars)")  # fmt: skip


def characters(document: Document) -> int:
    """The characters of text a document gives to translate (its markup not counted)."""
    if document.markup == "html":
        return sum(len(plain_text(text, "html")) for text in document.segments())
    return sum(len(html.unescape(INLINE_CODE.sub("", segment))) for segment in document.segments())
