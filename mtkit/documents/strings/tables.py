"""Line-by-line string files: Java's `.properties` (`key=value`, `key: value` or `key value`; comments,
blank lines, continued lines and `\\uXXXX` escapes read as Java reads them; a file in UTF-8 stays so,
one in ASCII or ISO-8859-1 gets `\\uXXXX` for what its encoding cannot hold) and CSV, where one column
is translated: in place, or into another column (`SOURCE:TARGET`, made where the header lacks it;
cells already filled left alone unless retranslated, as for PO)."""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Sequence

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import Document, FileLimits, decode_text
from mtkit.documents.strings.common import Message, MessageFile

PROPERTY = re.compile(r"(?P<key>[ \t\f]*(?:\\.|[^\s=:\\])*(?:[ \t\f]*[=:][ \t\f]*|[ \t\f]+|))(?P<value>.*)", re.DOTALL)
PROPERTY_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
UNESCAPED = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ESCAPED = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\f": "\\f"}


def continued(line: str) -> bool:
    """Whether a line of a .properties file goes on in the next (it ends in an odd run of backslashes)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


class JavaProperties(MessageFile):
    def __init__(self, data: bytes, name: str, limits: FileLimits):
        try:
            self.text, self.codec = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            self.text, self.codec = data.decode("latin-1"), "latin-1"
        self.highest = 0x10FFFF if self.codec == "utf-8" and not data.isascii() else 0x7F if data.isascii() else 0xFF
        self.lines = self.text.splitlines(keepends=True)
        self.units: list[tuple[int, int, str, str]] = []  # first line, line after, key as written, end of line
        values, index = [], 0
        while index < len(self.lines):
            start, logical = index, self.lines[index].rstrip("\r\n")
            index += 1
            if not logical.strip(" \t\f") or logical.lstrip(" \t\f")[0] in "#!":
                continue
            pieces = [logical]
            while continued(pieces[-1]) and index < len(self.lines):  # joined once: linear in the lines
                pieces[-1] = pieces[-1][:-1]
                pieces.append(self.lines[index].rstrip("\r\n").lstrip(" \t\f"))
                index += 1
            match = PROPERTY.fullmatch("".join(pieces))
            ending = self.lines[index - 1][len(self.lines[index - 1].rstrip("\r\n")) :]
            self.units.append((start, index, match.group("key"), ending))
            values.append(_value(match.group("value"), f"{name}: line {start + 1}"))
            limits.check_segments(len(self.units), "properties")
        # A value holding a lone surrogate (a lone \\uD800: Java's strings may) has no text to translate
        # around it that would come back whole: it stays as written.
        self.built = [Message("" if LONE_SURROGATE.search(value) else value) for value in values]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        lines = list(self.lines)
        for (start, end, key, ending), filled in zip(self.units, self.filled(translations)):
            if filled is not None:
                value = self._escaped(filled)
                lines[start:end] = [key + value + ending] + [""] * (end - start - 1)
        return "".join(lines).encode(self.codec)

    def _escaped(self, value: str) -> str:
        out = "".join(
            ESCAPED.get(c, c) if ord(c) <= self.highest and not 0xD800 <= ord(c) <= 0xDFFF else _u_escapes(c)
            for c in value
        )  # a lone surrogate (from a lone \\uD800) has no encoding but its escape
        return "\\" + out if out.startswith((" ", "\t")) else out


def _value(escaped: str, where: str) -> str:
    """A value as Java reads it: escapes resolved, a surrogate pair of \\u escapes one character."""

    def unescaped(match: re.Match) -> str:
        code = match.group(1)
        if code == "u":
            raise MtkitError(f"{where}: a \\u not followed by four hexadecimal digits (Java refuses it too)")
        return chr(int(code[1:], 16)) if len(code) == 5 else UNESCAPED.get(code, code)

    value = PROPERTY_ESCAPE.sub(unescaped, escaped)
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _u_escapes(char: str) -> str:
    """A character as Java's `\\uXXXX` (two, a surrogate pair, beyond the Basic Multilingual Plane)."""
    units = char.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{int.from_bytes(units[k : k + 2], 'big'):04X}" for k in range(0, len(units), 2))


class CsvColumn(MessageFile):
    def __init__(
        self, data: bytes, name: str, limits: FileLimits, retranslate: bool = False, column: str | None = None
    ):
        if not column:
            raise MtkitError(
                f"{name}: which column is to be translated? Give --column (on a server, the form field column): "
                "a header's name, a number from 1, or SOURCE:TARGET"
            )
        self.bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
        text = decode_text(data, name)
        self.newline = "\r\n" if "\r\n" in text[: text.find("\n") + 1] else "\n"
        try:  # the delimiter as the file has it (sniffed on its first lines: the sniffer's time grows
            # faster than its input); quoting as RFC 4180 has it (doubled quotes)
            self.delimiter = csv.Sniffer().sniff(sniffed_prefix(text), delimiters=",;\t|").delimiter
        except csv.Error:
            self.delimiter = ","
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter)
        try:
            self.rows = []
            for row in reader:
                self.rows.append(row)
                limits.check_segments(len(self.rows), "rows")
        except csv.Error as err:
            raise MtkitError(f"{name}: line {reader.line_num}: not CSV ({err})") from None
        source, _, target = column.partition(":")
        self.source = self._column(source, name)
        self.target = self._column(target, name, make=True) if target else self.source
        first = 1 if not source.isdigit() else 0  # a column named: the first row is the header
        self.places = [
            row
            for row in self.rows[first:]
            if len(row) > self.source
            and (retranslate or self.target == self.source or len(row) <= self.target or not row[self.target])
        ]
        self.built = [Message(row[self.source]) for row in self.places]

    def _column(self, spec: str, name: str, make: bool = False) -> int:
        """A column's index: a number from 1 (up to one past the widest row where make), or a name in
        the first row (made there where make)."""
        header = self.rows[0] if self.rows else []
        if spec.isdigit() and int(spec) >= 1:
            widest = max(map(len, self.rows), default=0) + make
            if int(spec) > widest:
                raise MtkitError(f"{name}: --column {spec[:20]}: the rows have at most {widest - make} columns")
            return int(spec) - 1
        if spec in header:
            return header.index(spec)
        if make and header:
            header.append(spec)
            return len(header) - 1
        raise MtkitError(f"{name}: --column {spec}: no such column (the first row names {', '.join(header)})")

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for row, filled in zip(self.places, self.filled(translations)):
            row.extend([""] * (self.target + 1 - len(row)))
            row[self.target] = formula_safe(filled if filled is not None else row[self.source])
        out = io.StringIO(newline="")
        csv.writer(out, delimiter=self.delimiter, lineterminator=self.newline).writerows(self.rows)
        return self.bom + out.getvalue().encode("utf-8")


def sniffed_prefix(text: str, lines: int = 20, most: int = 4096) -> str:
    """What the delimiter is guessed from: the first lines, cut at a line's end where it can be."""
    head = text[:most]
    cut = head.rfind("\n", 0, len(head) if len(text) <= most else None)
    return "".join(head[: cut + 1 if cut > 0 else len(head)].splitlines(keepends=True)[:lines])


def formula_safe(cell: str) -> str:
    """A written cell that a spreadsheet would read as a formula (=, +, -, @, a tab or a carriage return
    first) gets a leading apostrophe, which spreadsheets show as text: OWASP's advice on CSV injection."""
    return "'" + cell if cell[:1] in FORMULA_STARTS else cell


def read_properties(data: bytes, name: str, limits: FileLimits) -> Document:
    return JavaProperties(data, name, limits)


def read_csv(data: bytes, name: str, limits: FileLimits, retranslate: bool = False, column: str | None = None):
    return CsvColumn(data, name, limits, retranslate, column)
