"""Subtitles (.srt, .vtt): each cue's lines are translated as one text and wrapped again to as many
lines as the cue had; a sentence that runs over cues (a cue that does not end a sentence, up to
MAX_JOINED cues) is translated whole, its cue boundaries kept as inline codes and the translation
cut at them by alignment. Numbers, timings, cue settings, a WebVTT file's header, NOTE, STYLE and
REGION blocks are kept byte for byte; tags in a cue (<i>, <b>, <font>, <v Speaker>, {\\an8}) are
inline codes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mtkit.core.errors import MtkitError
from mtkit.documents.inline import (
    BuiltDocument,
    Document,
    FileLimits,
    InlineBuilder,
    decode_text,
    pieces,
    render_pieces,
)

MAX_JOINED = 3
TIMING = re.compile(r"^\s*(\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}\s*-->\s*(\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}")
TAG = re.compile(r"<[^<>]*>|\{\\[^{}]*\}")
SENTENCE_END = re.compile(r"[.!?…。！？♪][\"'”’»)\]]*$")
CUE_BOUNDARY = "\x00"  # where one cue ends in a rendered group (no subtitle holds it)
EMPTY_PAIR = re.compile(r"<([A-Za-z]+)[^<>]*>\s*</\1>")
WORD = re.compile(r"(?:<[^<>]*>|\{\\[^{}]*\}|\S)+")


@dataclass
class Cue:
    head: list[str]  # its identifier line (if any) and timing line, as written
    lines: list[str]  # its text
    end: str = ""  # the blank lines after it, as written
    text: list[str] = field(default_factory=list)  # translated lines


class Subtitles(BuiltDocument):
    def __init__(self, data: bytes, name: str, kind: str, limits: FileLimits):
        text = decode_text(data, name)
        self.blocks = _blocks(text.replace("\r\n", "\n"))
        self.newline = "\r\n" if "\r\n" in text else "\n"
        if kind == ".vtt" and not text.lstrip("\ufeff").startswith("WEBVTT"):
            raise MtkitError(f"{name}: not a WebVTT file (it does not begin with WEBVTT)")
        cues = [block for block in self.blocks if isinstance(block, Cue)]
        limits.check_segments(len(cues), "cues")
        if not cues and text.strip() and kind == ".srt":
            raise MtkitError(
                f"{name}: not an SRT file (no cue has a timing line such as 00:00:01,000 --> 00:00:02,000)"
            )
        self.groups = _sentence_groups(cues)
        self.built = [_read(group) for group in self.groups]

    def write(self, translations: Sequence[str], target_lang: str | None) -> bytes:
        for group, builder, translation in zip(self.groups, self.built, translations):
            _write(group, builder, translation)
        out = []
        for block in self.blocks:
            if isinstance(block, Cue):
                out.append("\n".join(block.head + (block.text or block.lines)) + block.end)
            else:
                out.append(block)
        return "".join(out).replace("\n", self.newline).encode("utf-8")


def _blocks(text: str) -> list[str | Cue]:
    """The file as cues and text kept as written (a header, notes, blank lines)."""
    blocks: list[str | Cue] = []
    for chunk in re.split(r"(\n[ \t]*\n+)", text):  # blocks, and the blank lines between them
        lines = chunk.split("\n")
        timing = next((i for i, line in enumerate(lines[:2]) if TIMING.match(line)), None)
        if chunk.strip() and timing is not None and not lines[0].startswith(("NOTE", "STYLE", "REGION")):
            text, ends = lines[timing + 1 :], 0
            while text and not text[-1].strip():  # the file's last cue ends with its newline
                text.pop()
                ends += 1
            blocks.append(Cue(lines[: timing + 1], text, "\n" * ends))
        elif blocks and isinstance(blocks[-1], Cue) and not chunk.strip():
            blocks[-1].end += chunk
        else:
            blocks.append(chunk)
    return blocks


def _sentence_groups(cues: list[Cue]) -> list[list[Cue]]:
    groups: list[list[Cue]] = []
    for cue in cues:
        if groups and len(groups[-1]) < MAX_JOINED and not _ends_sentence(groups[-1][-1]):
            groups[-1].append(cue)
        else:
            groups.append([cue])
    return groups


def _ends_sentence(cue: Cue) -> bool:
    visible = TAG.sub("", " ".join(cue.lines)).strip()
    return not visible or bool(SENTENCE_END.search(visible))


def _read(group: list[Cue]) -> InlineBuilder:
    builder = InlineBuilder()
    for index, cue in enumerate(group):
        if index:
            builder.kept(("cue", index), separates=True)
        _read_tags(builder, " ".join(line.strip() for line in cue.lines))
    return builder


def _read_tags(builder: InlineBuilder, text: str) -> None:
    """A cue's text: paired tags (<i>...</i>) are runs where they nest, every other tag is kept."""
    tags = list(TAG.finditer(text))
    pairs = _pairs([match.group() for match in tags])
    position = 0
    for index, match in enumerate(tags):
        builder.text(text[position : match.start()])
        if index in pairs:
            builder.open((match.group(), tags[pairs[index]].group()))
        elif index in pairs.values():
            builder.close()
        else:
            builder.kept(("tag", match.group()))
        position = match.end()
    builder.text(text[position:])


def _pairs(tags: list[str]) -> dict[int, int]:
    """Open tag index -> its end tag's index, for the HTML-like tags that nest properly."""
    stack: list[tuple[int, str]] = []
    pairs: dict[int, int] = {}
    for index, tag in enumerate(tags):
        name = re.match(r"</?([A-Za-z]+)", tag)
        if not name:
            continue
        if tag.startswith("</"):
            if not stack or stack[-1][1] != name.group(1).lower():
                return {}
            pairs[stack.pop()[0]] = index
        elif not tag.endswith("/>") and not re.fullmatch(r"<\d", tag[:2]):
            stack.append((index, name.group(1).lower()))
    return {} if stack else pairs


def _write(group: list[Cue], built: InlineBuilder, translation: str) -> None:
    found = pieces(translation, built.separators)
    rendered = render_pieces(found, built.codes, kept=lambda code: CUE_BOUNDARY if code[0] == "cue" else code[1])
    texts = [EMPTY_PAIR.sub("", text) for text in _balanced(rendered.split(CUE_BOUNDARY))]
    if any(not TAG.sub("", text).strip() for text in texts) and len(texts) > 1:
        texts = _shared_out(" ".join(texts), group)
    for cue, text in zip(group, texts):
        if text.split() == " ".join(cue.lines).split():
            cue.text = cue.lines  # the same words: the same lines
        else:
            cue.text = wrap(text, len([line for line in cue.lines if line.strip()]) or 1)


def _shared_out(text: str, group: list[Cue]) -> list[str]:
    """Where the alignment left a cue without words: the words shared out in the proportions of the
    cues' source words (each cue at least one)."""
    words = WORD.findall(text)
    sizes = [max(1, len(TAG.sub("", " ".join(cue.lines)).split())) for cue in group]
    bounds = [round(len(words) * sum(sizes[: i + 1]) / sum(sizes)) for i in range(len(sizes))]
    bounds = [min(max(b, i + 1), len(words) - (len(sizes) - 1 - i)) for i, b in enumerate(bounds)]
    return _balanced([" ".join(words[a:b]) for a, b in zip([0, *bounds[:-1]], bounds)])


def _balanced(texts: list[str]) -> list[str]:
    """Cues' texts in which a tag still open at a cue's end closes there and opens again in the next."""
    out, carried = [], ""
    for text in texts:
        text = carried + text
        opened = _open_tags(text)
        out.append(text + "".join(f"</{name}>" for name, _ in reversed(opened)))
        carried = "".join(tag for _, tag in opened)
    return out


def _open_tags(text: str) -> list[tuple[str, str]]:
    stack: list[tuple[str, str]] = []
    for match in re.finditer(r"<(/?)([A-Za-z]+)[^<>]*>", text):
        if match.group(1) and stack and stack[-1][0] == match.group(2):
            stack.pop()
        elif not match.group(1):
            stack.append((match.group(2), match.group()))
    return stack


def wrap(text: str, lines: int) -> list[str]:
    """The text in at most `lines` lines of about equal visible length, cut between words."""
    words = WORD.findall(text)
    if lines <= 1 or len(words) <= 1:
        return [" ".join(words)]
    sizes = [len(TAG.sub("", word)) + 1 for word in words]
    total, out, current, done = sum(sizes), [], [], 0
    for word, size in zip(words, sizes):
        if current and done + size / 2 > total * (len(out) + 1) / lines and len(out) < lines - 1:
            out.append(current)
            current = []
        current.append(word)
        done += size
    return [" ".join(line) for line in out + [current]]


def read_srt(data: bytes, name: str, limits: FileLimits) -> Document:
    return Subtitles(data, name, ".srt", limits)


def read_vtt(data: bytes, name: str, limits: FileLimits) -> Document:
    return Subtitles(data, name, ".vtt", limits)
