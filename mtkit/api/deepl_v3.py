"""DeepL's current routes beside its v2 ones (mtkit.api.deepl), as DeepL's clients and
Weblate's DeepL backend call them: /v3/languages (the languages of a resource: translate_text,
translate_document, glossary; write is answered with no language, since mtkit does not rewrite text)
and the multilingual glossaries of /v3/glossaries (several language pairs in one glossary, each a
"dictionary"), whose ids are taken as `glossary_id` by /v2/translate and /v2/document like v2's.
Errors are DeepL's {"message": ...}. The glossary store is read and written off the event loop (a
glossary of 27,000 entries takes a quarter of a second to read, and PostgreSQL answers over the network)."""

import asyncio
import functools
from typing import Any

from mtkit.api.edge import RequestError
from mtkit.api.glossaries import GlossaryStore, StoredGlossary, parse_entries
from mtkit.api.libretranslate import LANGUAGE_NAMES
from mtkit.serving.terms import TermsError

RESOURCES = ("translate_text", "translate_document", "glossary", "write")
FEATURES = {"translate_text": ("tag_handling", "glossary"), "translate_document": ("glossary",), "glossary": ()}


def v3_languages(languages, resource: str, glossary_pairs: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The languages of a resource, each usable as a source, a target or both, with the features mtkit
    gives it (no formality: a model has none)."""
    if resource == "write":
        return []
    if resource == "glossary":
        sources, targets = {s for s, _ in glossary_pairs}, {t for _, t in glossary_pairs}
    else:
        sources = {_code(lang) for lang in languages.sources() if lang}
        targets = {_code(lang) for lang in languages.targets() if lang}
    features = {feature: {} for feature in FEATURES[resource]}
    return [
        {"lang": lang, "name": LANGUAGE_NAMES.get(lang, lang), "usable_as_source": lang in sources,
         "usable_as_target": lang in targets, "features": features}
        for lang in sorted(sources | targets)
    ]  # fmt: skip


def _code(lang: str) -> str:
    return lang.split("_")[0].split("-")[0].lower()


def dictionaries_of(value: Any, pairs: set[tuple[str, str]]) -> list[tuple[str, str, list]]:
    """DeepL's `dictionaries` (each source_lang, target_lang, entries, entries_format) as (source, target,
    entries); 400 naming what is wrong."""
    if not isinstance(value, list) or not value or not all(isinstance(d, dict) for d in value):
        raise RequestError(400, "Parameter 'dictionaries' not specified.")
    return [dictionary_of(d, pairs) for d in value]


def dictionary_of(fields: dict[str, Any], pairs: set[tuple[str, str]]) -> tuple[str, str, list]:
    source, target = (_language(fields, name) for name in ("source_lang", "target_lang"))
    if (source, target) not in pairs:
        raise RequestError(400, f"Unsupported glossary source and target language pair: {source}, {target}.")
    try:
        return source, target, parse_entries(str(fields.get("entries", "")), str(fields.get("entries_format", "tsv")))
    except TermsError as err:
        raise RequestError(400, str(err)) from None


def _language(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not value:
        raise RequestError(400, f"Parameter '{name}' not specified.")
    if not value.replace("-", "").isalpha() or len(value) > 8:
        raise RequestError(400, f"Value for '{name}' not supported.")
    return _code(value)


def _name(value: Any, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 1000:
        raise RequestError(400, "Parameter 'name' not specified." if not value else "Value for 'name' not supported.")
    return value


def add_v3_routes(app, fleet, authorized, fields_of, pairs, glossaries: GlossaryStore, forget):
    """DeepL's v3 routes on a FastAPI app: authorized(request, fields) gives the request's key (None
    without keys); pairs() the glossary language pairs; forget(glossary_id) drops what was built of a
    glossary that changed."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    def owner(key) -> str | None:
        return key and key.name

    async def found(key, glossary_id: str) -> StoredGlossary:
        stored = await asyncio.to_thread(glossaries.get, owner(key), glossary_id)
        if stored is None:
            raise RequestError(404, "Glossary not found")
        return stored

    def changed(stored: StoredGlossary | None) -> StoredGlossary:
        if stored is None:
            raise RequestError(404, "Glossary not found")
        forget(stored.glossary_id)
        return stored

    @app.get("/v3/languages")
    async def languages(request: Request):
        fields = await fields_of(request)
        authorized(request, fields)
        resource = fields.get("resource") or fields.get("product")
        if not resource:
            raise RequestError(400, "Parameter 'resource' not specified.")
        if resource not in RESOURCES:
            raise RequestError(400, f"Value for 'resource' not supported: {resource}.")
        return v3_languages(fleet.languages, resource, pairs())

    @app.post("/v3/glossaries")
    async def create(request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        name = _name(fields.get("name"), True)
        dictionaries = await asyncio.to_thread(dictionaries_of, fields.get("dictionaries"), pairs())
        try:
            stored = await asyncio.to_thread(glossaries.create_multilingual, owner(key), name, dictionaries)
        except TermsError as err:
            raise RequestError(400, str(err)) from None
        return JSONResponse(stored.v3_info(), status_code=201)

    @app.get("/v3/glossaries")
    async def listed(request: Request):
        key = authorized(request, await fields_of(request))
        return {"glossaries": [stored.v3_info() for stored in await asyncio.to_thread(glossaries.owned, owner(key))]}

    @app.get("/v3/glossaries/{glossary_id}")
    async def info(glossary_id: str, request: Request):
        key = authorized(request, await fields_of(request))
        return (await found(key, glossary_id)).v3_info()

    @app.get("/v3/glossaries/{glossary_id}/entries")
    async def entries(glossary_id: str, request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        stored = await found(key, glossary_id)
        source, target = _language(fields, "source_lang"), _language(fields, "target_lang")
        pair = stored.entries_for(source, target)
        if pair is None:
            raise RequestError(404, f"Glossary dictionary not found: {source}, {target}.")
        tsv = "".join(f"{s}\t{t}\n" for s, t in pair)
        return {"dictionaries": [{"source_lang": source, "target_lang": target, "entries": tsv,
                                  "entries_format": "tsv"}]}  # fmt: skip

    @app.patch("/v3/glossaries/{glossary_id}")
    async def patch(glossary_id: str, request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        await found(key, glossary_id)
        name = _name(fields.get("name"), False)
        more = []
        if "dictionaries" in fields:
            more = await asyncio.to_thread(dictionaries_of, fields["dictionaries"], pairs())
        if name is None and not more:
            raise RequestError(400, "Parameter 'name' or 'dictionaries' not specified.")
        try:
            stored = await asyncio.to_thread(glossaries.change, owner(key), glossary_id, name, more, merge=True)
        except TermsError as err:
            raise RequestError(400, str(err)) from None
        return changed(stored).v3_info()

    @app.put("/v3/glossaries/{glossary_id}/dictionaries")
    async def replace(glossary_id: str, request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        await found(key, glossary_id)
        source, target, pair = await asyncio.to_thread(dictionary_of, fields, pairs())
        try:
            replace_pair = functools.partial(glossaries.change, dictionaries=[(source, target, pair)], merge=False)
            changed(await asyncio.to_thread(replace_pair, owner(key), glossary_id))
        except TermsError as err:
            raise RequestError(400, str(err)) from None
        return {"source_lang": source, "target_lang": target, "entry_count": len(pair)}

    @app.delete("/v3/glossaries/{glossary_id}/dictionaries")
    async def drop(glossary_id: str, request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        pair = (_language(fields, "source_lang"), _language(fields, "target_lang"))
        if (await found(key, glossary_id)).entries_for(*pair) is None:
            raise RequestError(404, f"Glossary dictionary not found: {pair[0]}, {pair[1]}.")
        try:
            changed(await asyncio.to_thread(glossaries.change, owner(key), glossary_id, drop=pair))
        except TermsError as err:
            raise RequestError(400, str(err)) from None
        return Response(status_code=204)

    @app.delete("/v3/glossaries/{glossary_id}")
    async def delete(glossary_id: str, request: Request):
        key = authorized(request, await fields_of(request))
        if not await asyncio.to_thread(glossaries.delete, owner(key), glossary_id):
            raise RequestError(404, "Glossary not found")
        forget(glossary_id)
        return Response(status_code=204)
