"""Zip packages (OOXML, OpenDocument, EPUB): read once from bytes with a clear error for what is not
the package its extension says, and written again with every part not translated kept byte for byte,
in the same order and compression (an OpenDocument's or EPUB's `mimetype` first and stored)."""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable

from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import read_xml

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # encrypted OOXML, and the old binary .doc/.ppt/.xls


class Package:
    """A zip package's parts by name, in their order; changed parts replace their bytes on write."""

    def __init__(self, data: bytes, name: str, kind: str, required: str, mimetype: str | None = None):
        """kind names the format in errors ("a .docx"); required: a part every such package has;
        mimetype: what its `mimetype` part says, where the format has one (OpenDocument, EPUB)."""
        self.name = name
        if data[:8] == OLE_MAGIC:
            raise MtkitError(
                f"{name}: encrypted, or an old binary Office file, not {kind} (save it unprotected as {kind})"
            )
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            self.infos = self.zip.infolist()
            if any(info.flag_bits & 0x1 for info in self.infos):
                raise MtkitError(f"{name}: its parts are encrypted")
            self.parts = {info.filename: self.zip.read(info) for info in self.infos}
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as err:
            raise MtkitError(f"{name}: not {kind} (not a readable zip archive: {err})") from None
        except zlib.error as err:
            raise MtkitError(f"{name}: a broken zip archive ({err})") from None
        if required not in self.parts:
            raise MtkitError(f"{name}: not {kind} (it has no {required})")
        found = self.parts.get("mimetype", b"").decode("ascii", "replace").strip()
        if mimetype is not None and found != mimetype:
            raise MtkitError(f"{name}: not {kind} (its mimetype is {found or 'missing'})")
        self.changed: dict[str, bytes] = {}

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
