"""A PDF's streams decoded within bounds before MuPDF reads a page: each stream whose filters can grow it
(Flate, RunLength; after ASCII encodings; in any spelling: abbreviated, in an array, an indirect
object) decoded in chunks, its size held to the limits of a zip's part (the bound, the ratio) and
the whole file to the package's; LZW, whose output cannot be bounded as it is decoded here, is refused."""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterator

from mtkit.documents.inline import FileLimits, FileTooLarge

CHUNK = 1 << 20
FILTER_NAMES = {"Fl": "FlateDecode", "AHx": "ASCIIHexDecode", "A85": "ASCII85Decode", "LZW": "LZWDecode",
                "RL": "RunLengthDecode", "CCF": "CCITTFaxDecode", "DCT": "DCTDecode"}  # fmt: skip
GROWING = {"FlateDecode", "LZWDecode", "RunLengthDecode"}  # the filters whose output can be many times their input


def check_streams(pdf, limits: FileLimits) -> None:
    """Every stream of the PDF (a pymupdf Document) that can grow, decoded within the limits."""
    total = 0
    for xref in range(1, pdf.xref_length()):
        if not pdf.xref_is_stream(xref):
            continue
        filters = stream_filters(pdf, xref)
        if not GROWING & set(filters):
            continue
        total += decoded_size(pdf.xref_stream_raw(xref) or b"", filters, limits, f"stream {xref}")
        limits.check_package(total)


def stream_filters(pdf, xref: int) -> list[str]:
    """A stream's filters in order, by their full names."""
    kind, value = pdf.xref_get_key(xref, "Filter")
    if kind == "xref":  # an indirect object: "12 0 R"
        value = pdf.xref_object(int(value.split()[0]), compressed=True)
    return [FILTER_NAMES.get(name, name) for name in re.findall(r"/([^\s/\[\]<>()]+)", value)]


def decoded_size(raw: bytes, filters: list[str], limits: FileLimits, part: str) -> int:
    """What the stream decodes to, in bytes, each growing filter's output checked as it grows."""
    data, size = raw, len(raw)
    for n, name in enumerate(filters):
        keep = bool(GROWING & set(filters[n + 1 :]))  # a later filter that grows needs this one's output
        if name == "LZWDecode":
            raise FileTooLarge(f"{part} is LZW-compressed, which mtkit does not read: its size cannot be bounded")
        if name == "ASCIIHexDecode":
            text = re.sub(rb"\s", b"", data).split(b">")[0]
            data = binascii.unhexlify(text + b"0" * (len(text) % 2)) if re.fullmatch(rb"[0-9A-Fa-f]*", text) else b""
        elif name == "ASCII85Decode":
            try:
                data = base64.a85decode(re.sub(rb"\s", b"", data).removeprefix(b"<~").split(b"~>")[0])
            except ValueError:  # MuPDF reads what it can of a broken stream; so does the page reader
                data = b""
        elif name in ("FlateDecode", "RunLengthDecode"):
            data, size = _decoded(data, name, limits, part, len(raw), keep)
            if not keep:
                return size
            continue
        else:  # an image's codec: reading the text decodes none of it
            return size
        size = len(data)
    return size


def _decoded(data: bytes, name: str, limits: FileLimits, part: str, raw: int, keep: bool) -> tuple[bytes, int]:
    """Flate or RunLength output, chunk by chunk within the limits: (the bytes where keep, its size)."""
    out, size = [], 0
    for chunk in _inflated(data) if name == "FlateDecode" else _run_lengths(data):
        size += len(chunk)
        limits.check_member(part, size, raw)
        if keep:
            out.append(chunk)
    return b"".join(out), size


def _inflated(data: bytes) -> Iterator[bytes]:
    inflater, pending = zlib.decompressobj(), data
    while pending:
        try:
            yield inflater.decompress(pending, CHUNK)
        except zlib.error:
            return  # MuPDF reads what it can of a broken stream; so does the page reader
        pending = inflater.unconsumed_tail


def _run_lengths(data: bytes) -> Iterator[bytes]:
    """RunLengthDecode (PDF 32000-1, 7.4.5): a length byte, then that many + 1 literal bytes (0-127) or
    one byte repeated 257 - length times (129-255); 128 ends the data."""
    at = 0
    while at < len(data) and data[at] != 128:
        length = data[at]
        if length < 128:
            yield data[at + 1 : at + 2 + length]
            at += 2 + length
        else:
            yield data[at + 1 : at + 2] * (257 - length)
            at += 2
