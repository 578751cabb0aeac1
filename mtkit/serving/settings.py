"""What a server starts with: its settings (ServeConfig), the served model's information
(ModelInfo), which languages a request translates between (Languages), and each model it serves (Slot).

Languages: how a request's pieces say their languages to the engine: a model's one pair, its target tags (a multilingual mtkit or OPUS-MT model: a tag starts the source), or its
language tokens (NLLB, M2M100: the source's token starts the source, and the target's is given as
the translation's first token). Requests for different targets share batches either way."""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtkit.core.errors import MtkitError
from mtkit.text.targets import LANGUAGE_TOKENS, model_language, tag_id, target_tag
from mtkit.text.tokenizer import Tokenizer


@dataclass
class ServeConfig:
    max_batch_tokens: int = 4096
    max_client_tokens: int = 128  # of them one client's sentences hold while another's wait or search beside them
    max_wait_ms: float = 20.0
    max_queue: int = 2048
    max_chars: int = 20000
    split_sentences: bool = True  # the requests' default
    max_source_len: int = 0  # subwords a piece holds at most (0: the model's training limit)
    max_texts: int = 0  # texts per request at most (0: as many as the queue holds)
    replicas: int = 1  # engine processes (mtkit.serving.replicas)
    confidence: bool = False  # the requests' default: a confidence with each text
    max_file_bytes: int = 20 << 20  # an uploaded document's size at most (/translate_file)
    keep_files_s: float = 3600.0  # how long a translated document waits for its download
    in_process: bool = True  # with one replica: the engine on a thread of the HTTP process, not a process of its own
    keep_spans: bool = True  # numbers, links, addresses, ... kept as written (mtkit.text.spans)
    recase: bool = True  # ALL CAPS and Title Case translated in sentence case, then cased again (mtkit.text.casing)
    max_file_chars: int = 1_000_000  # characters of text in one document (/translate_file; mtkit.documents.inline)
    max_stored_bytes: int = 1 << 30  # translated documents kept for download, in bytes at most (oldest go first)
    public_url: str | None = None  # where clients reach the server (translatedFileUrl); None: a relative URL
    file_processes: int = 1  # processes reading and writing uploaded documents (mtkit.documents.worker)
    file_seconds: float = 10.0  # the CPU seconds a worker spends at most reading and writing one document
    state_dir: str | Path | None = None  # what outlives the server (glossaries, usage): a folder or a URL; None: memory
    tm: str | None = None  # the translation memory corrections go to and texts are found in: a file or a URL
    tm_steer: int = 0  # fuzzy matches of at least this score steer the model (0: off; mtkit.training.adaptation)

    def validate(self) -> None:
        for name in ("max_batch_tokens", "max_client_tokens", "max_queue", "max_chars", "replicas", "max_file_bytes",
                     "max_file_chars", "max_stored_bytes", "file_processes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise MtkitError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.max_texts < 0:
            raise MtkitError(f"--max-texts {self.max_texts}: must be at least 0")
        if self.max_wait_ms < 0:
            raise MtkitError(f"--max-wait-ms {self.max_wait_ms}: must be at least 0")
        if self.file_seconds <= 0:
            raise MtkitError(f"--file-seconds {self.file_seconds:g}: must be more than 0 seconds")
        if self.keep_files_s <= 0:
            raise MtkitError(f"--keep-files {self.keep_files_s:g}: must be more than 0 seconds")
        if self.public_url is not None and not re.fullmatch(r"https?://[^/?#\s]+(/[^?#\s]*)?", self.public_url):
            raise MtkitError(f"--public-url {self.public_url}: must be an http:// or https:// URL (no query)")


@dataclass
class ModelInfo:
    name: str
    path: Path  # the file whose checksum /v1/models reports
    engine: str
    source_language: str | None
    target_language: str | None  # the default target (a multilingual model's: serve --tgt-lang, or none)
    meta: dict[str, Any] = field(default_factory=dict)  # the model file's: languages, training lengths


def aligns(info: ModelInfo) -> bool:
    """Whether requests may ask the model for word alignments: the PyTorch engine, and no target tags or
    language tokens."""
    return info.engine == "pytorch" and not info.meta.get("target_tags") and not info.meta.get(LANGUAGE_TOKENS)


# Languages


class LanguageError(Exception):
    """A request's language that the model does not have: refused as INVALID with this message."""


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

    def covers(self, source: str, target: str) -> bool:
        """Whether the model translates from source into target (a model with language tokens: between
        any two of its languages, by their codes or ISO 639 codes)."""
        if not self.tokens:
            return [source, target] in self.directions()
        try:
            return self._code(source, "source") != self._code(target, "target")
        except LanguageError:
            return False

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
        for asked, side in ((source or self.source, "source"), (target or self.target, "target")):
            if asked is None:
                raise LanguageError(f"{side}: give one of this model's {len(self.tokens)} languages (see /languages)")
            ids.append(tag_id(self.tokenizer, self.tokens[self._code(asked, side)]))
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


@dataclass(eq=False)
class Slot:
    """A model the server serves: what its file said when the server started (its information and
    languages; an error where it could not be read) and its Service while loaded."""

    name: str
    info: ModelInfo | None
    languages: Languages | None
    build: Callable[[Any], Any]  # (the server's Metrics) -> its Service
    error: str | None = None
    state: str = "unloaded"
    service: Any = None  # its Service, while loaded
    in_use: int = 0  # requests holding it (or waiting for it, having started its load)
    last_used: float = 0.0
    loaded_at: float = 0.0  # when its load ended: its turn's start (mtkit.serving.turns)
    path: str | None = None  # its file on the server, which clients never read: errors name the model
    stamp: tuple | None = None  # its file's when last loaded: a new version is swapped in (Fleet._check_files)
    swapping: bool = False

    def __post_init__(self) -> None:
        if self.error is not None:
            self.error, self.state = self.without_path(self.error), "failed"

    def failure(self, err: Exception) -> str:
        """An error of its model's, as its requests and /v1/models name it."""
        return self.without_path(str(err) if isinstance(err, MtkitError) else f"{type(err).__name__}: {err}")

    def without_path(self, message: str) -> str:
        """The message with the model's file (as given, or absolute) named by the model's name."""
        if not self.path:
            return message
        for form in sorted({self.path, str(Path(self.path).absolute())}, key=len, reverse=True):
            message = message.replace(form, f"model {self.name}")
        return message
