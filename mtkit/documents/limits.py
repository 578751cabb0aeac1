"""The bounds a document must keep before mtkit does any work on it: files come from strangers
(serve's /translate_file), and a few kilobytes can inflate to gigabytes, nest a million levels
deep or hold a million empty paragraphs. Each bound is checked as early as the file allows (a zip's
directory before any part is inflated, and again while inflating), and an error names the bound.
The defaults let any real document through: a 2,000-page book is about 5 million characters.
Nesting is bounded where trees are built (mtkit.text.markup.MAX_DEPTH)."""

from __future__ import annotations

from dataclasses import dataclass

from mtkit.core.errors import MtkitError


class FileTooLarge(MtkitError):
    """A document over one of its bounds (the server answers 413)."""


@dataclass(frozen=True)
class FileLimits:
    max_chars: int = 5_000_000  # characters of text to translate (translate-file/serve --max-file-chars)
    max_segments: int = 500_000  # paragraphs, cells, cues, messages
    max_members: int = 10_000  # parts of a zip package (.docx, .odt, .epub, ...)
    max_member_bytes: int = 128 << 20  # one part, inflated
    max_package_bytes: int = 512 << 20  # all parts, inflated
    max_ratio: int = 500  # inflated / compressed size of a part larger than RATIO_FLOOR
    max_plural_forms: int = 6  # gettext's nplurals (Arabic has 6, the most of any language)

    def check_members(self, count: int) -> None:
        if count > self.max_members:
            raise FileTooLarge(f"{count:,} parts in the package: the limit is {self.max_members:,}")

    def check_member(self, part: str, size: int, compressed: int) -> None:
        """A part's inflated size against the bounds (from the zip's directory, or as inflated so far)."""
        if size > self.max_member_bytes:
            raise FileTooLarge(f"{part} inflates to more than {self.max_member_bytes >> 20:,} MiB (the limit)")
        if size > RATIO_FLOOR and size > self.max_ratio * max(compressed, 1):
            raise FileTooLarge(
                f"{part} inflates more than {self.max_ratio}-fold ({compressed:,} bytes to {size:,}): a zip bomb?"
            )

    def check_package(self, size: int) -> None:
        if size > self.max_package_bytes:
            raise FileTooLarge(f"its parts inflate to more than {self.max_package_bytes >> 20:,} MiB (the limit)")

    def check_segments(self, count: int, what: str = "paragraphs") -> None:
        if count > self.max_segments:
            raise FileTooLarge(f"{count:,} {what}: the limit is {self.max_segments:,}")

    def check_chars(self, count: int) -> None:
        if count > self.max_chars:
            raise FileTooLarge(f"{count:,} characters to translate: the limit is {self.max_chars:,} (--max-file-chars)")


RATIO_FLOOR = 1 << 20  # parts smaller than this may inflate as much as they like (a few hundred KiB of XML)
DEFAULT_LIMITS = FileLimits()
