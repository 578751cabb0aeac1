"""LibreTranslate's API on the translation service: /translate's fields and answer, /languages and
/detect, as LibreTranslate's clients send and read them."""

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

from mtkit.api.edge import RequestError, call_of, key_name, owner_of
from mtkit.api.memory import translated
from mtkit.core.errors import MtkitError
from mtkit.serving.calls import Asked
from mtkit.serving.service import Service
from mtkit.serving.settings import Languages


def texts_of(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


async def libretranslate(fleet, request, body) -> dict[str, Any]:
    """LibreTranslate's /translate: q (one text or a list) in, translatedText (and alternatives) out;
    `body` is the validated request; fleet: the server's models (mtkit.serving.fleet)."""
    given = None if body.source == "auto" else body.source
    async with fleet.route(given, body.target, texts_of(body.q), owner_of(request)) as (service, source, target):
        return await _translated(service, request, body, source, target, fleet.memory)


async def _translated(
    service: Service, request, body, source: str | None, target: str | None, memory
) -> dict[str, Any]:
    service.check_source(source)
    service.framing(source, target)  # an unknown language: 400 before anything else
    if body.format not in ("text", "html"):
        raise RequestError(400, f"format {body.format}: must be text or html")
    if body.format == "html" and body.alternatives:
        raise RequestError(400, "format html: one translation per text (no alternatives)")
    if body.alternatives < 0:
        raise RequestError(400, f"alternatives {body.alternatives}: must be at least 0")
    default = service.defaults()
    beam = max(default.beam, body.alternatives + 1)
    if body.alternatives:
        options = service.options(beam, body.alternatives + 1, None, False)
    else:
        options = default
    asked = Asked(call=call_of(request), texts=texts_of(body.q), options=options, source=source, target=target,
                  format=body.format)  # fmt: skip
    got = await translated(memory, service, asked, key_name(request))
    results, scores = got.texts, got.confidences
    if body.alternatives:
        best = [[h["text"] for h in hyps] or [""] for hyps in results]
        texts, alternatives = [b[0] for b in best], [b[1:] for b in best]
    else:
        texts, alternatives = results, None
    answer: dict[str, Any] = {"translatedText": texts[0] if isinstance(body.q, str) else texts}
    if alternatives is not None:
        answer["alternatives"] = alternatives[0] if isinstance(body.q, str) else alternatives
    if scores is not None:  # serve --confidence
        answer["confidence"] = scores[0] if isinstance(body.q, str) else scores
    if body.source == "auto":  # (several models: the request was routed by its texts' language together)
        detected = detect_languages(texts_of(body.q))
        answer["detectedLanguage"] = detected[0] if isinstance(body.q, str) else detected
    return answer


def detect_languages(texts: Sequence[str]) -> list[dict[str, Any]]:
    """LibreTranslate's detection of each text: {"confidence" (percent), "language"}."""
    from mtkit.text.langid import identify, require_langid

    try:
        require_langid("/detect")
    except MtkitError as err:
        raise RequestError(501, str(err)) from None
    guesses = [identify(text) for text in texts]
    return [{"confidence": round(100 * probability, 1), "language": lang} for lang, probability in guesses]


LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "et": "Estonian", "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nl": "Dutch", "pl": "Polish",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian",
    "zh": "Chinese",
}  # fmt: skip


def libretranslate_languages(languages: Languages) -> list[dict[str, Any]]:
    """LibreTranslate's /languages: each source language with every target it translates into (a
    multilingual model's directions), then each target not also a source (which translates into
    nothing here); nothing where the model does not name its source."""
    directions, targets = languages.directions(), languages.targets()
    into: dict[str, list[str]] = {}
    for source, target in directions:
        if source and target in targets:
            into.setdefault(source, []).append(target)
    for target in targets:
        if into and target not in into:
            into[target] = []

    def entry(code: str) -> dict[str, Any]:
        return {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": into[code]}

    return [entry(code) for code in into]


async def libretranslate_fields(request) -> dict[str, Any]:
    """LibreTranslate clients send JSON or an HTML form (application/x-www-form-urlencoded)."""
    body = await request.body()
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
        return {key: values[0] if len(values) == 1 else values for key, values in fields.items()}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # a 5,000-digit number, 100,000 brackets deep
        raise RequestError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise RequestError(400, "the body must be a JSON object")
    return data


def frontend_settings(fleet, keys_required: bool) -> dict[str, Any]:
    """LibreTranslate's /frontend/settings: its clients read the limits, the default languages and
    the file types /translate_file takes (none where the documents extra is not installed; PDF where
    PyMuPDF is; not CSV, whose column a LibreTranslate client cannot name)."""
    from mtkit.api.files import document_formats

    formats = document_formats()
    info = fleet.slots[0].info
    source = (info.source_language if not fleet.several else None) or "auto"
    target = info.target_language or next(iter(fleet.languages.targets()), "")
    return {
        "charLimit": fleet.cfg.max_chars,
        "frontendTimeout": 500,
        "apiKeys": keys_required,
        "keyRequired": keys_required,
        "suggestions": fleet.memory is not None,  # serve --tm: /suggest keeps corrections
        "filesTranslation": formats is not None,
        "supportedFilesFormat": [f".{ext}" for ext in formats.uploadable()] if formats else [],
        "language": {
            "source": {"code": source, "name": LANGUAGE_NAMES.get(source, source)},
            "target": {"code": target, "name": LANGUAGE_NAMES.get(target, target)},
        },
    }
