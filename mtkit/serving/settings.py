"""What a server starts with: its settings (ServeConfig) and the served model's information (ModelInfo)."""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtkit.core.errors import MtkitError


@dataclass
class ServeConfig:
    max_batch_tokens: int = 4096
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
    max_file_chars: int = 1_000_000  # characters of text in one document (/translate_file; mtkit.documents.limits)
    max_stored_bytes: int = 1 << 30  # translated documents kept for download, in bytes at most (oldest go first)
    public_url: str | None = None  # where clients reach the server (translatedFileUrl); None: a relative URL
    file_processes: int = 1  # processes reading and writing uploaded documents (mtkit.documents.worker)

    def validate(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_chars", "replicas", "max_file_bytes", "max_file_chars",
                     "max_stored_bytes", "file_processes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise MtkitError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.max_texts < 0:
            raise MtkitError(f"--max-texts {self.max_texts}: must be at least 0")
        if self.max_wait_ms < 0:
            raise MtkitError(f"--max-wait-ms {self.max_wait_ms}: must be at least 0")
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
