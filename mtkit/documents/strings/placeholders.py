"""Placeholders, read in one place for every format that has them: gettext's (printf, Python's `%(n)s`
and `{name}`, tags, entities) and app string files' (`%s`, `%1$d`, `%@`, `%#@var@`, `{0}`, `{{name}}`,
`%{name}`, `$t(...)`, inline HTML), each kept whole as a code of the segment, line breaks parting
words; and put back into a translation, printf's unnumbered ones in the source's order."""

from __future__ import annotations

import re

from mtkit.documents.inline import InlineBuilder, pieces

PLACEHOLDER = re.compile(
    r"%(?:\(\w+\)|\d+\$)?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[hlLqjzt]*[diouxXeEfFgGcrsab%]"  # printf, Python %
    r"|\{[\w.\[\]]*(?:![rsa])?(?::[^{}]*)?\}"  # str.format, ICU-style {name}
    r"|\$\{\w+\}|</?[A-Za-z][^<>]*>|&\w+;|\n|\t"  # shell/JS ${x}, tags, entities, breaks
)
UNNUMBERED = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[hlLqjzt]*[diouxXeEfFgGcrsab]")  # not %(n)s, %1$s, %%
APP_PLACEHOLDER = re.compile(
    r"\{\{[^{}]*\}\}|\$t\([^()]*\)|%\{\w+\}|%#@\w+@"  # i18next {{name}} and $t(key), Rails %{name}, iOS %#@var@
    r"|%(?:\d+\$)?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?(?:hh|h|ll|l|q|L|z|j|t)?[@diouxXeEfFgGcsSaA%]"  # printf, %@
    r"|\{[\w.]+(?:,[^{}]*)?\}"  # {0}, {name}, {count, number}
    r"|</?[A-Za-z][^<>]*>|\\[nt]|\n|\t"  # inline HTML, escaped and real line breaks
)
BREAKS = ("\n", "\t", "\\n", "\\t")  # line breaks and tabs, and their escapes: they part words


def read_placeholders(builder, text: str, pattern: re.Pattern = PLACEHOLDER, markup_is_text: bool = False) -> None:
    """Text into the builder (an InlineBuilder, or one's super()) with its placeholders (what pattern
    finds) and line breaks kept whole; with markup_is_text, tags found stay text (an XML file's
    elements are its parser's)."""
    position = 0
    for match in pattern.finditer(text):
        if markup_is_text and match.group().startswith("<"):
            continue
        builder.text(text[position : match.start()])
        builder.kept(match.group(), match.group() in BREAKS)
        position = match.end()
    builder.text(text[position:])


def fill_placeholders(translation: str, built: InlineBuilder) -> str:
    """The translated message with its placeholders; printf's unnumbered ones (`%s`, `%d`) stay in the
    source's order wherever the alignment put them, as their arguments come in that order."""
    found = pieces(translation, built.separators)
    codes = built.codes
    unnumbered = [p.kept for p in found if p.kept is not None and UNNUMBERED.fullmatch(codes[p.kept])]
    in_order = dict(zip(unnumbered, sorted(unnumbered)))
    return "".join(piece.text if piece.kept is None else codes[in_order.get(piece.kept, piece.kept)] for piece in found)
