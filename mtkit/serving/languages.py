"""Which languages a request translates between, and how its pieces say so to the engine: a model's
one pair, its target tags (a multilingual mtkit or OPUS-MT model: a tag starts the source), or its
language tokens (NLLB, M2M100: the source's token starts the source, and the target's is given as
the translation's first token). Requests for different targets share batches either way."""

from __future__ import annotations

from mtkit.core.errors import MtkitError
from mtkit.text.targets import LANGUAGE_TOKENS, model_language, tag_id, target_tag
from mtkit.text.tokenizer import Tokenizer


class LanguageError(Exception):
    """A request's language that the model does not have: a 400 with this message."""


class Languages:
    def __init__(self, meta: dict, source: str | None, target: str | None, tokenizer: Tokenizer):
        """source, target: the server's defaults (serve --src-lang, --tgt-lang, or the model's own)."""
        self.meta, self.source, self.target, self.tokenizer = meta, source, target, tokenizer
        self.tokens: dict[str, str] = meta.get(LANGUAGE_TOKENS) or {}
        self._ids: dict[tuple[str | None, str | None], tuple[int | None, tuple[int, ...]]] = {}

    def targets(self) -> list[str]:
        """The languages this server translates into."""
        if self.tokens:
            return list(self.tokens)
        tags = self.meta.get("target_tags")
        return sorted(tags) if tags else [lang for lang in [self.target] if lang]

    def sources(self) -> list[str | None]:
        """The languages this server translates from (None: the model does not say)."""
        if self.tokens:
            return list(self.tokens)
        return sorted({s for s, _ in self.meta.get("directions", [])}) or [self.source]

    def directions(self) -> list[list[str]]:
        """Each source with each target, for LibreTranslate's /languages."""
        if self.tokens:
            return [[s, t] for s in self.tokens for t in self.tokens if s != t]
        return self.meta.get("directions") or [[self.source, target] for target in self.targets()]

    def check_source(self, source: str | None) -> None:
        """A request's source, where it names one, must be one of the model's (where it says them)."""
        sources = self.sources()
        if self.tokens and source is not None:
            self._code(source, "source")
        elif source is not None and None not in sources and source not in sources:
            raise LanguageError(f"source {source}: this server translates from {', '.join(map(str, sources))}")

    def framing(self, source: str | None, target: str | None) -> tuple[int | None, tuple[int, ...]]:
        """For a request from `source` into `target` (None: the server's default): the id that starts
        each of its sources (None: none), and the ids given as each translation's start."""
        key = (source, target)
        if key not in self._ids:
            self._ids[key] = self._token_framing(source, target) if self.tokens else (self._tag(target), ())
        return self._ids[key]

    def _token_framing(self, source: str | None, target: str | None) -> tuple[int, tuple[int, ...]]:
        ids = []
        for asked, field in ((source or self.source, "source"), (target or self.target, "target")):
            if asked is None:
                raise LanguageError(f"{field}: give one of this model's {len(self.tokens)} languages (see /languages)")
            ids.append(tag_id(self.tokenizer, self.tokens[self._code(asked, field)]))
        return ids[0], (ids[1],)

    def _code(self, asked: str, field: str) -> str:
        try:
            return model_language(list(self.tokens), asked, field)
        except MtkitError as err:
            raise LanguageError(str(err)) from None

    def _tag(self, target: str | None) -> int | None:
        into = f"this server translates into {', '.join(self.targets()) or self.target}"
        if not self.meta.get("target_tags"):
            if target is not None and target != self.target:
                raise LanguageError(f"target {target}: {into}")
            return None
        target = target or self.target
        if target is None:
            raise LanguageError(f"target: give one of {', '.join(self.targets())}")
        try:
            return tag_id(self.tokenizer, target_tag(self.meta, target))
        except MtkitError:
            raise LanguageError(f"target {target}: {into}") from None
