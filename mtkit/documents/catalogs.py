"""Message catalogues: gettext PO/POT (polib) and XLIFF 1.2 and 2.x (lxml). Every untranslated
message is filled and marked as machine output (PO: `fuzzy`, gettext's convention; XLIFF 1.2:
state needs-review-translation, state-qualifier leveraged-mt; XLIFF 2: state translated with
subState mtkit:mt), messages already translated are left alone unless retranslate. Placeholders
(`%s`, `%(n)d`, `{name}`, `${x}`, tags) and line breaks are kept whole as inline codes, as are
XLIFF's own inline codes; a PO message's leading and trailing whitespace stays as it was."""

from __future__ import annotations

import re
from collections.abc import Sequence

import polib
from lxml import etree

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import (
    BuiltDocument,
    Document,
    FileLimits,
    InlineBuilder,
    language_tag,
    read_mixed,
    read_xml,
    write_mixed,
)
from mtkit.documents.strings.placeholders import fill_placeholders, read_placeholders

PLURAL_FORMS = {
    "nplurals=1; plural=0;": "ja ko zh vi th id ms lo my km",
    "nplurals=2; plural=(n != 1);": "en de nl sv da nb nn no fi et el it es ca eu gl hu bg he af sq az eo fy is "
    "ka kk ky lb mn ne ps ta te tr ur uz hi bn mr gu kn ml sw pt",
    "nplurals=2; plural=(n > 1);": "fr pt-BR oc br fil tl",
    "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;": "cs sk",
    "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);": "pl",
    "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);":
    "ru uk be sr hr bs",
    "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && (n%100<10 || n%100>=20) ? 1 : 2);": "lt",
    "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n != 0 ? 1 : 2);": "lv",
    "nplurals=3; plural=(n==1 ? 0 : (n==0 || (n%100 > 0 && n%100 < 20)) ? 1 : 2);": "ro",
    "nplurals=4; plural=(n%100==1 ? 0 : n%100==2 ? 1 : n%100==3 || n%100==4 ? 2 : 3);": "sl",
    "nplurals=6; plural=(n==0 ? 0 : n==1 ? 1 : n==2 ? 2 : n%100>=3 && n%100<=10 ? 3 : n%100>=11 ? 4 : 5);": "ar",
}  # fmt: skip


def plural_forms(lang: str | None) -> str | None:
    """gettext's Plural-Forms for a language ("pt-BR", "pt_BR" or "de"), where the table knows it."""
    tag = language_tag(lang) or ""
    for name in (tag, tag.split("-")[0]):
        for forms, languages in PLURAL_FORMS.items():
            if name and name in languages.split():
                return forms
    return None


class PoCatalog(BuiltDocument):
    def __init__(self, data: bytes, name: str, limits: FileLimits, retranslate: bool = False):
        self.name = name
        try:
            text = data.decode("utf-8-sig")
            self.catalog = parse_po(text)
        except UnicodeDecodeError as err:
            raise MtkitError(
                f"{name}: not UTF-8 (byte {err.start + 1}); convert it with msgconv --to-code=UTF-8"
            ) from None
        except (OSError, ValueError) as err:
            raise MtkitError(f"{name}: not a PO file ({str(err).splitlines()[0]})") from None
        if "msgid" not in text:
            raise MtkitError(f"{name}: not a PO file (no messages)")
        self.nplurals = _nplurals(self.catalog.metadata.get("Plural-Forms", ""), name, limits)
        limits.check_segments(len(self.catalog), "messages")
        self.entries = [e for e in self.catalog if not e.obsolete and e.msgid and (retranslate or not e.translated())]
        self.entries = [e for e in self.entries if retranslate or not e.fuzzy]
        self.texts: list[tuple[str, str, str]] = []  # each segment's lead, text, trail
        for entry in self.entries:
            self.texts += [_strip(entry.msgid)] + ([_strip(entry.msgid_plural)] if entry.msgid_plural else [])
        self.built = [_placeholders(text) for _, text, _ in self.texts]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        filled = (lead + fill_placeholders(translation, builder).strip() + trail
                  for (lead, _, trail), builder, translation in zip(self.texts, self.built, translations))  # fmt: skip
        forms = self._plural_forms(target_lang)
        for entry in self.entries:
            singular = next(filled)
            if entry.msgid_plural:
                plural, count = next(filled), self.nplurals or _nplurals(forms, self.name, FileLimits())
                entry.msgstr_plural = {i: singular if i == 0 and count > 1 else plural for i in range(count)}
            else:
                entry.msgstr = singular
            if "fuzzy" not in entry.flags:
                entry.flags.append("fuzzy")
        metadata = self.catalog.metadata
        if target_lang:
            metadata["Language"] = language_tag(target_lang)
        if forms:
            metadata["Plural-Forms"] = forms
        metadata["Content-Type"] = "text/plain; charset=UTF-8"
        metadata.setdefault("Content-Transfer-Encoding", "8bit")
        return str(self.catalog).encode("utf-8")

    def check_target(self, target_lang: str | None) -> None:
        self._plural_forms(target_lang)

    def _plural_forms(self, target_lang: str | None) -> str:
        given = self.catalog.metadata.get("Plural-Forms", "")
        if re.search(r"nplurals\s*=\s*\d+", given):
            return given
        forms = plural_forms(target_lang)
        if forms is None and any(entry.msgid_plural for entry in self.entries):
            raise MtkitError(f"{self.name}: its header has no Plural-Forms and mtkit does not know those of "
                             f"{target_lang or 'the target language'}: add a Plural-Forms line to the header")  # fmt: skip
        return forms or given


class _TextParser(polib._POFileParser):
    """polib's parser on a text and nothing else: polib.pofile() opens its argument as a file
    wherever a file of that name exists, and a stranger's upload may be a path on the server."""

    def __init__(self, text: str):
        super().__init__("", encoding="utf-8")  # "": no file
        self.fhandle = text.splitlines()


def parse_po(text: str) -> polib.POFile:
    catalog = _TextParser(text).parse()
    catalog.wrapwidth = 78
    return catalog


NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")


def _nplurals(forms: str, name: str, limits: FileLimits) -> int | None:
    """The number of plural forms a Plural-Forms header states (None: it states none)."""
    found = NPLURALS.search(forms)
    if found is None:
        return None
    digits = found.group(1).lstrip("0") or "0"
    if len(digits) > 3 or not 1 <= int(digits) <= limits.max_plural_forms:
        shown = found.group(1) if len(found.group(1)) <= 12 else found.group(1)[:12] + "..."
        raise MtkitError(f"{name}: Plural-Forms nplurals={shown}: must be between 1 and {limits.max_plural_forms}")
    return int(digits)


def _strip(text: str) -> tuple[str, str, str]:
    core = text.strip()
    if not core:
        return text, "", ""
    start = text.index(core)
    return text[:start], core, text[start + len(core) :]


def _placeholders(text: str) -> InlineBuilder:
    builder = InlineBuilder()
    read_placeholders(builder, text)
    return builder


XLIFF1 = "urn:oasis:names:tc:xliff:document:1.2"
XLIFF2 = "urn:oasis:names:tc:xliff:document:2."
WRAPPERS = {"g", "mrk", "pc"}  # XLIFF's inline codes that hold text; the others are kept whole


class XliffCatalog(BuiltDocument):
    def __init__(self, data: bytes, name: str, limits: FileLimits, retranslate: bool = False):
        self.root = read_xml(data, name)
        namespace = etree.QName(self.root).namespace or ""
        if etree.QName(self.root).localname != "xliff" or not namespace.startswith((XLIFF1, XLIFF2)):
            raise MtkitError(f"{name}: not an XLIFF 1.2 or 2.x file (its root is {etree.QName(self.root).localname})")
        self.ns, self.version2 = "{" + namespace + "}", namespace.startswith(XLIFF2)
        units = self.root.iter(self.ns + ("segment" if self.version2 else "trans-unit"))
        self.units = [
            unit for unit in units if unit.get("translate") != "no" and unit.find(self.ns + "source") is not None
        ]
        limits.check_segments(len(self.units), "units")
        self.units = [unit for unit in self.units if retranslate or not _has_text(unit.find(self.ns + "target"))]
        is_wrapper = lambda element: etree.QName(element).localname in WRAPPERS  # noqa: E731
        self.built = [read_mixed(unit.find(self.ns + "source"), is_wrapper) for unit in self.units]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for unit, builder, translation in zip(self.units, self.built, translations):
            target = unit.find(self.ns + "target")
            if target is None:
                target = etree.Element(self.ns + "target")
                unit.find(self.ns + "source").addnext(target)
                target.tail = unit.find(self.ns + "source").tail
            write_mixed(target, builder, translation)
            if self.version2:
                unit.set("state", "translated")
                unit.set("subState", "mtkit:mt")
            else:
                target.set("state", "needs-review-translation")
                target.set("state-qualifier", "leveraged-mt")
        lang = language_tag(target_lang)
        if lang and self.version2:
            self.root.set("trgLang", lang)
        elif lang:
            for file in self.root.iter(self.ns + "file"):
                file.set("target-language", lang)
        return etree.tostring(self.root.getroottree(), xml_declaration=True, encoding="UTF-8")


def _has_text(element: etree._Element | None) -> bool:
    return element is not None and "".join(element.itertext()).strip() != ""


def read_po(data: bytes, name: str, limits: FileLimits, retranslate: bool = False) -> Document:
    return PoCatalog(data, name, limits, retranslate)


def read_xliff(data: bytes, name: str, limits: FileLimits, retranslate: bool = False) -> Document:
    return XliffCatalog(data, name, limits, retranslate)
