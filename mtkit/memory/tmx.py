"""TMX 1.4, the file format translation memories travel in: read as a stream (one <tu> at a time, every
<tuv>'s language) and written so that CAT tools open it again.

A segment's inline codes (<bpt>, <ept>, <ph>, <it>, <ut>: formatting of the original file) are not
text: a unit's plain text leaves them out, and its segment is kept as written for export."""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO
from xml.sax.saxutils import escape, quoteattr

from mtkit import __version__
from mtkit.core.errors import MtkitError

XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
CODES = frozenset({"bpt", "ept", "ph", "it", "ut"})  # inline codes, whose content is the original's markup
MAX_SEGMENT = 100_000  # characters of one segment


@dataclass
class Variant:
    """One language's text of a unit: the locale as the file wrote it, the plain text, and the
    segment's inner XML where it holds elements: inline codes or <hi> (None: the text is all there is)."""

    locale: str
    text: str
    segment: str | None = None


@dataclass
class Unit:
    variants: list[Variant] = field(default_factory=list)

    def text_in(self, lang: str) -> str | None:
        return next((v.text for v in self.variants if language(v.locale) == language(lang)), None)


def language(locale: str) -> str:
    """The language a locale names, as memories match it: "en-US", "EN_gb" and "en" are "en"."""
    return locale.replace("_", "-").split("-")[0].strip().lower()


def read_tmx(handle: BinaryIO, name: str) -> tuple[str | None, Iterator[Unit]]:
    """The header's source language ("*all*": None) and the units, read one at a time."""
    events = ET.iterparse(handle, events=("start", "end"))
    try:
        _, root = next(events)
        if root.tag != "tmx":
            raise MtkitError(f"{name}: not a TMX file (its root is <{root.tag}>)")
        for event, element in events:
            if event == "end" and element.tag == "header":
                source = element.get("srclang")
                return (None if source in (None, "*all*") else source), _units(events, root, name)
    except ET.ParseError as err:
        raise MtkitError(f"{name}: not well-formed XML ({err})") from None
    raise MtkitError(f"{name}: a TMX file without a <header>")


def _units(events: Iterator, root: ET.Element, name: str) -> Iterator[Unit]:
    body = root
    try:
        for event, element in events:
            if event == "start" and element.tag == "body":
                body = element
            elif event == "end" and element.tag == "tu":
                unit = Unit([variant for tuv in element.iter("tuv") if (variant := _variant(tuv, name))])
                body.clear()  # the units read so far: a memory of millions streams in constant space
                if unit.variants:
                    yield unit  # one of a single language too: the memory counts it as skipped
    except ET.ParseError as err:
        raise MtkitError(f"{name}: not well-formed XML ({err})") from None


def _variant(tuv: ET.Element, name: str) -> Variant | None:
    locale, segment = tuv.get(XML_LANG) or tuv.get("lang"), tuv.find("seg")
    if not locale or segment is None:
        return None
    text = " ".join(_plain(segment).split())
    if len(text) > MAX_SEGMENT:
        raise MtkitError(f"{name}: a segment of {len(text):,} characters (at most {MAX_SEGMENT:,})")
    return Variant(locale, text, _inner_xml(segment) if len(segment) else None)


def _plain(element: ET.Element) -> str:
    """An element's text without its inline codes' content (a <hi>'s text is text)."""
    pieces = [element.text or ""]
    for child in element:
        if child.tag not in CODES:
            pieces.append(_plain(child))
        pieces.append(child.tail or "")
    return "".join(pieces)


def _inner_xml(segment: ET.Element) -> str:
    return escape(segment.text or "") + "".join(ET.tostring(child, encoding="unicode") for child in segment)


def write_tmx(units: Iterable[Unit], handle, source_lang: str) -> int:
    """Write a TMX 1.4 document to a text handle; returns the units written."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    handle.write('<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4">\n')
    handle.write(
        f'  <header creationtool="mtkit" creationtoolversion={quoteattr(__version__)} segtype="sentence"'
        f' o-tmf="mtkit" adminlang="en" srclang={quoteattr(source_lang)} datatype="plaintext"'
        f' creationdate="{now}"/>\n  <body>\n'
    )
    written = 0
    for unit in units:
        handle.write("    <tu>\n")
        for variant in unit.variants:
            segment = variant.segment if variant.segment is not None else escape(variant.text)
            handle.write(f"      <tuv xml:lang={quoteattr(variant.locale)}><seg>{segment}</seg></tuv>\n")
        handle.write("    </tu>\n")
        written += 1
    handle.write("  </body>\n</tmx>\n")
    return written
