"""Zip packages (OOXML, OpenDocument, EPUB): read once from bytes with a clear error for what is not
the package its extension says, within the bounds of mtkit.documents.inline (checked on the zip's
directory before anything is inflated, and again while inflating), and written again with every
part not translated kept byte for byte, in the same order and compression (an OpenDocument's or
EPUB's `mimetype` first and stored)."""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Callable

from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import DEFAULT_LIMITS, FileLimits, FileTooLarge, read_xml

CHUNK = 1 << 20
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # encrypted OOXML, and the old binary .doc/.ppt/.xls


def unsafe_part_name(name: str) -> bool:
    """A name no package format allows (OPC's part names, ODF's and EPUB's paths): absolute, with a
    drive, a backslash or a NUL, or a "." or ".." segment."""
    segments = name.rstrip("/").split("/")
    return (
        name.startswith("/")
        or "\\" in name
        or "\0" in name
        or re.match(r"[A-Za-z]:", name) is not None
        or any(segment in (".", "..") for segment in segments)
    )


class Package:
    """A zip package's parts by name, in their order; changed parts replace their bytes on write."""

    def __init__(
        self,
        data: bytes,
        name: str,
        kind: str,
        required: str,
        mimetype: str | None = None,
        limits: FileLimits = DEFAULT_LIMITS,
    ):
        """kind names the format in errors ("a .docx"); required: a part every such package has;
        mimetype: what its `mimetype` part says, where the format has one (OpenDocument, EPUB)."""
        self.name, self.limits = name, limits
        if data[:8] == OLE_MAGIC:
            raise MtkitError(
                f"{name}: encrypted, or an old binary Office file, not {kind} (save it unprotected as {kind})"
            )
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            self.infos = self.zip.infolist()
            if any(info.flag_bits & 0x1 for info in self.infos):
                raise MtkitError(f"{name}: its parts are encrypted")
            self._check_directory(kind)
            self.inflated = 0
            self.parts = {info.filename: self._inflate(info) for info in self.infos}
        except FileTooLarge as err:
            raise FileTooLarge(f"{name}: {err}") from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as err:
            raise MtkitError(f"{name}: not {kind} (not a readable zip archive: {err})") from None
        except zlib.error as err:
            raise MtkitError(f"{name}: a broken zip archive ({err})") from None
        if required not in self.parts:
            raise MtkitError(f"{name}: not {kind} (it has no {required})")
        found = " ".join(self.parts.get("mimetype", b"").decode("ascii", "replace").split())[:100]
        if mimetype is not None and found != mimetype:
            raise MtkitError(f"{name}: not {kind} (its mimetype is {found or 'missing'})")
        self.changed: dict[str, bytes] = {}

    def _check_directory(self, kind: str) -> None:
        """The bounds, as the zip's directory states the sizes, before anything is inflated."""
        self.limits.check_members(len(self.infos))
        seen: set[str] = set()
        for info in self.infos:
            if info.filename in seen:
                raise MtkitError(f"{self.name}: two parts named {info.filename}: not {kind}")
            if unsafe_part_name(info.filename):  # written back as is, it would leave any folder it is unpacked in
                raise MtkitError(f"{self.name}: a part named {info.filename[:200]!r}: not {kind}")
            seen.add(info.filename)
            self.limits.check_member(info.filename, info.file_size, info.compress_size)
        self.limits.check_package(sum(info.file_size for info in self.infos))

    def _inflate(self, info: zipfile.ZipInfo) -> bytes:
        """A part's bytes, inflated a chunk at a time and stopped at a bound (a directory may lie)."""
        out = bytearray()
        with self.zip.open(info) as member:
            while chunk := member.read(CHUNK):
                out += chunk
                self.limits.check_member(info.filename, len(out), info.compress_size)
                self.limits.check_package(self.inflated + len(out))
        self.inflated += len(out)
        return bytes(out)

    def names(self, matches: Callable[[str], bool]) -> list[str]:
        return [info.filename for info in self.infos if matches(info.filename)]

    def xml(self, part: str) -> etree._Element:
        """A part's XML tree (no entities expanded, nothing fetched)."""
        return read_xml(self.parts[part], f"{self.name}: {part}")

    def replace(self, part: str, root: etree._Element) -> None:
        self.changed[part] = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)

    def replace_bytes(self, part: str, data: bytes) -> None:
        self.changed[part] = data

    def write(self) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            for info in self.infos:
                data = self.changed.get(info.filename, self.parts[info.filename])
                copy = zipfile.ZipInfo(info.filename, info.date_time)
                copy.compress_type, copy.external_attr = info.compress_type, info.external_attr
                archive.writestr(copy, data)
        return out.getvalue()
