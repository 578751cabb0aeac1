"""DeepL's API v2 on the translation service, so that an app with a "DeepL" slot whose server URL can
be set (DeepL's client libraries take `server_url`) works with an mtkit server unchanged:
/v2/translate (text, HTML and XML), /v2/languages, /v2/usage, /v2/glossaries and
/v2/glossary-language-pairs, /v2/document. A key comes as DeepL's clients send it
(`Authorization: DeepL-Auth-Key KEY`, or the older `auth_key` field) and is one of serve
--api-keys', with its requests per minute and its character quota; errors are {"message": ...} with
DeepL's status codes (400, 403 a key, 404, 413, 429, 456 the quota). Fields come form-encoded (repeated
`text`) or as JSON, as DeepL takes them. DeepL's v3 routes: mtkit.api.deepl_v3."""

import asyncio
import functools
import re
import threading
from typing import Any

from mtkit.api.deepl_memories import add_memory_routes, request_memory
from mtkit.api.deepl_v3 import add_v3_routes
from mtkit.api.documents import DocumentJobs
from mtkit.api.edge import RequestError, call_of, owner_of
from mtkit.api.files import document_formats, file_response, translate_upload
from mtkit.api.glossaries import GlossaryStore, parse_entries
from mtkit.api.libretranslate import LANGUAGE_NAMES, libretranslate_fields
from mtkit.api.memory import translated
from mtkit.core.errors import MtkitError
from mtkit.serving.calls import Asked, Call
from mtkit.serving.service import Service
from mtkit.serving.terms import TermsError

UNLIMITED = 1_000_000_000_000  # the character_limit DeepL reports for an account without one
FORMALITIES = {"default", "prefer_more", "prefer_less"}  # those that a language without formality accepts
VARIANTS = {"en": ["EN-GB", "EN-US"], "pt": ["PT-BR", "PT-PT"], "zh": ["ZH", "ZH-HANS"]}  # targets DeepL lists
VARIANT_NAMES = {"EN-GB": "English (British)", "EN-US": "English (American)", "PT-BR": "Portuguese (Brazilian)",
                 "PT-PT": "Portuguese (European)", "ZH-HANS": "Chinese (simplified)"}  # fmt: skip
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z]{2,4})?")
STATUS_WAIT_S = 1.0  # a document's status request waits this long for it to finish


def auth_key(request, fields: dict[str, Any]) -> str | None:
    """The key of `Authorization: DeepL-Auth-Key KEY`, or of the auth_key field."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme == "DeepL-Auth-Key" and key.strip():
        return key.strip()
    value = fields.get("auth_key")
    return value if isinstance(value, str) and value else None


async def fields_of(request) -> dict[str, Any]:
    """The query's fields and the body's (form-encoded or JSON; DeepL's clients send a GET's fields in its body)."""
    fields: dict[str, Any] = dict(request.query_params)
    if await request.body():
        fields.update(await libretranslate_fields(request))
    return fields


def model_language(fields: dict[str, Any], name: str, required: bool = False) -> str | None:
    """A DeepL language field ("EN-GB", "de") as the model's code ("en", "de"); 400 where it is no language code."""
    value = fields.get(name)
    value = value[0] if isinstance(value, list) and value else value
    if not value:
        if required:
            raise RequestError(400, f"Parameter '{name}' not specified.")
        return None
    if not isinstance(value, str) or not LANGUAGE_CODE.fullmatch(value):
        raise RequestError(400, f"Value for '{name}' not supported.")
    return value.split("-")[0].lower()


def deepl_code(lang: str | None) -> str:
    return (lang or "").split("_")[0].split("-")[0].upper()


def texts_of(fields: dict[str, Any]) -> list[str]:
    texts = fields.get("text")
    texts = [texts] if isinstance(texts, str) else texts
    if not texts or not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise RequestError(400, "Parameter 'text' not specified.")
    return texts


def tag_list(value: Any) -> frozenset[str]:
    """DeepL's tag lists: a comma-separated string, or a list of them."""
    parts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return frozenset(tag.strip().lower() for part in parts for tag in str(part).split(",") if tag.strip())


def check_options(fields: dict[str, Any], target: str) -> tuple[bool, str | None]:
    """Whether to split sentences, and the tag handling (None, xml or html); 400 for what DeepL refuses."""
    formality = fields.get("formality", "default")
    if not isinstance(formality, str):
        raise RequestError(400, "Value for 'formality' not supported.")
    if formality not in FORMALITIES:
        if formality in ("more", "less"):
            raise RequestError(400, f"'formality' is not supported for given 'target_lang' ({deepl_code(target)}).")
        raise RequestError(400, f"Value for 'formality' not supported: {formality}.")
    split = str(fields.get("split_sentences", "1"))
    if split not in ("0", "1", "nonewlines"):
        raise RequestError(400, f"Value for 'split_sentences' not supported: {split}.")
    tags = fields.get("tag_handling") or None
    if tags not in (None, "xml", "html"):
        raise RequestError(400, f"Value for 'tag_handling' not supported: {tags}.")
    return split != "0", tags


def target_languages(languages) -> list[dict[str, Any]]:
    out = []
    for lang in languages.targets():
        for code in VARIANTS.get(deepl_code(lang).lower(), [deepl_code(lang)]):
            name = VARIANT_NAMES.get(code, LANGUAGE_NAMES.get(code.lower(), code))
            out.append({"language": code, "name": name, "supports_formality": False})
    return out


def source_languages(languages) -> list[dict[str, Any]]:
    codes = dict.fromkeys(deepl_code(lang) for lang in languages.sources() if lang)
    return [{"language": code, "name": LANGUAGE_NAMES.get(code.lower(), code)} for code in codes]


def add_deepl_routes(app, fleet, admit, gate, jobs: DocumentJobs, glossaries: GlossaryStore, workers):
    """DeepL's routes on a FastAPI app, on the server's models (mtkit.serving.fleet); admit(request, key)
    checks a key and its limits and gives its ApiKey."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    built: dict[tuple[str, str], Any] = {}  # each stored glossary as a request's glossary, made once per model
    building = threading.Lock()

    def authorized(request, fields: dict[str, Any]):
        """The request's key (None without --api-keys); 403 naming DeepL's ways of giving one."""
        try:
            return admit(request, auth_key(request, fields))
        except RequestError as err:
            if err.status == 403:
                raise RequestError(403, "a valid API key is needed: Authorization: DeepL-Auth-Key KEY") from None
            raise

    def pairs() -> set[tuple[str, str]]:
        return {(deepl_code(s).lower(), deepl_code(t).lower()) for s, t in fleet.languages.directions() if s and t}

    def glossary_of(service: Service, fields: dict[str, Any], owner: str | None, source: str | None, target: str):
        """The request's stored glossary, built for the service's model (reading a large one from the store
        and building its terms take a while: called off the event loop)."""
        glossary_id = fields.get("glossary_id")
        if not glossary_id:
            return None
        stored = glossaries.get(owner, str(glossary_id))
        if stored is None:
            raise RequestError(404, "Glossary not found")
        entries = stored.entries_for(source, target) if source is not None else None
        if entries is None:
            raise RequestError(400, "the glossary has no dictionary from source_lang into target_lang")
        made = (stored.glossary_id, stored.revision, source, target, service.info.name)  # in the model's own subwords
        with building:  # requests that name it at once build it once
            if made not in built:
                built[made] = service.terms.stored(entries)
            return built[made]

    def forget(glossary_id: str) -> None:
        """Drop what was built of a glossary that changed or went."""
        for made in [made for made in list(built) if made[0] == glossary_id]:  # list(): a copy, though threads add
            built.pop(made, None)

    def detected(service: Service, source: str | None, text: str) -> str:
        if source or service.info.source_language:
            return deepl_code(source or service.info.source_language)
        try:
            from mtkit.text.langid import identify

            return deepl_code(identify(text)[0])
        except (ImportError, MtkitError):
            return ""

    @app.post("/v2/translate")
    async def translate(request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        texts, target = texts_of(fields), model_language(fields, "target_lang", required=True)
        split, tags = check_options(fields, target)
        async with fleet.route(model_language(fields, "source_lang"), target, texts, owner_of(request, key)) as (
            service,
            source,
            target,
        ):
            service.framing(source, target)
            glossary = await asyncio.to_thread(glossary_of, service, fields, key and key.name, source, target)
            memory, threshold = await asyncio.to_thread(request_memory, fleet.memory, key and key.name, fields)
            asked = Asked(call=call_of(request), texts=texts, options=service.defaults(), source=source,
                          target=target, format=tags or "text", split=split, glossary=glossary,
                          kept=tag_list(fields.get("ignore_tags")) if tags else frozenset())  # fmt: skip
            with gate.charged(key, sum(map(len, texts)), status=456):
                outs = (await translated(fleet.memory, service, asked, key and key.name, memory, threshold)).texts
        return {"translations": [{"detected_source_language": detected(service, source, text), "text": out,
                                  "billed_characters": len(text)} for text, out in zip(texts, outs)]}  # fmt: skip

    @app.api_route("/v2/languages", methods=["GET", "POST"])
    async def languages(request: Request):
        fields = await fields_of(request)
        authorized(request, fields)
        kind = fields.get("type", "source")
        if kind not in ("source", "target"):
            raise RequestError(400, f"Value for 'type' not supported: {kind}.")
        return target_languages(fleet.languages) if kind == "target" else source_languages(fleet.languages)

    @app.api_route("/v2/usage", methods=["GET", "POST"])
    async def usage(request: Request):
        key = authorized(request, await fields_of(request))
        limit = key.characters if key is not None and key.characters else UNLIMITED
        return {"character_count": gate.usage.of(key and key.name), "character_limit": limit}

    @app.get("/v2/glossary-language-pairs")
    async def glossary_pairs(request: Request):
        authorized(request, await fields_of(request))
        return {"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in sorted(pairs())]}

    @app.post("/v2/glossaries")
    async def create_glossary(request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        source, target = model_language(fields, "source_lang", True), model_language(fields, "target_lang", True)
        name = fields.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 1000:
            raise RequestError(
                400, "Parameter 'name' not specified." if not name else "Value for 'name' not supported."
            )
        if (source, target) not in pairs():
            raise RequestError(400, f"Unsupported glossary source and target language pair: {source}, {target}.")
        text, entries_format = str(fields.get("entries", "")), str(fields.get("entries_format", "tsv"))
        try:
            entries = await asyncio.to_thread(parse_entries, text, entries_format)
            stored = await asyncio.to_thread(glossaries.create, key and key.name, name, source, target, entries)
        except TermsError as err:
            raise RequestError(400, str(err)) from None
        return JSONResponse(stored.info(), status_code=201)

    @app.get("/v2/glossaries")
    async def list_glossaries(request: Request):
        key = authorized(request, await fields_of(request))
        owned = await asyncio.to_thread(glossaries.owned, key and key.name)  # v2 lists those of one language pair
        return {"glossaries": [stored.info() for stored in owned if not stored.more]}

    async def found_glossary(key, glossary_id: str):
        stored = await asyncio.to_thread(glossaries.get, key and key.name, glossary_id)
        if stored is None:
            raise RequestError(404, "Glossary not found")
        return stored

    @app.get("/v2/glossaries/{glossary_id}")
    async def get_glossary(glossary_id: str, request: Request):
        key = authorized(request, await fields_of(request))
        return (await found_glossary(key, glossary_id)).info()

    @app.get("/v2/glossaries/{glossary_id}/entries")
    async def glossary_entries(glossary_id: str, request: Request):
        key = authorized(request, await fields_of(request))
        stored = await found_glossary(key, glossary_id)
        lines = "".join(f"{source}\t{target}\n" for source, target in stored.entries)
        return Response(lines, media_type="text/tab-separated-values; charset=utf-8")

    @app.delete("/v2/glossaries/{glossary_id}")
    async def delete_glossary(glossary_id: str, request: Request):
        key = authorized(request, await fields_of(request))
        if not await asyncio.to_thread(glossaries.delete, key and key.name, glossary_id):
            raise RequestError(404, "Glossary not found")
        forget(glossary_id)
        return Response(status_code=204)

    @app.post("/v2/document")
    async def upload_document(request: Request):
        from mtkit.api.files import safe_name

        form = await request.form()
        fields = {name: value for name, value in form.items() if isinstance(value, str)}
        key = authorized(request, fields)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise RequestError(400, "Parameter 'file' not specified.")
        target, source = model_language(fields, "target_lang", True), model_language(fields, "source_lang")
        check_options(fields, target)
        async with fleet.route(source, target, (), owner_of(request, key)) as (service, source, target):
            service.framing(source, target)
            glossary = await asyncio.to_thread(glossary_of, service, fields, key and key.name, source, target)
        name = safe_name(fields.get("filename") or upload.filename or "")
        formats = document_formats()
        if formats is None:
            raise RequestError(501, "translating files needs the documents extra on the server")
        try:
            fmt = formats.document_format(name)
            if fields.get("output_format") and formats.document_format(f"x.{fields['output_format']}") != fmt:
                raise MtkitError(f"output_format {fields['output_format']}: a .{fmt} file translates into a .{fmt}")
        except MtkitError as err:
            raise RequestError(400, str(err)) from None
        gate.charge(key, 1, count=False)  # a key whose quota is used up: 456 now
        taken = await jobs.uploads.acquire(upload.size or fleet.cfg.max_file_bytes)  # held until the job ends
        try:
            data = await upload.read()
        except BaseException:
            await jobs.uploads.release(taken)
            raise

        async def work() -> tuple[bytes, int]:
            call = Call(owner=owner_of(request, key))  # a background job: gone() never (its client is not waiting)
            try:
                async with fleet.route(source, target, (), call.owner) as (service, _, _):
                    translated, characters = await translate_upload(service, call, data, name, target, workers,
                                                                    glossary, source=source,
                                                                    charged=functools.partial(gate.charged, key, status=456))  # fmt: skip
                return translated, characters
            finally:
                await jobs.uploads.release(taken)

        job_id, job_key = jobs.start(key and key.name, name, work, owner_of(request, key))
        return {"document_id": job_id, "document_key": job_key}

    @app.post("/v2/document/{document_id}")
    async def document_status(document_id: str, request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        job = jobs.find(document_id, fields.get("document_key"), key and key.name)
        await jobs.settled(job, STATUS_WAIT_S)
        answer: dict[str, Any] = {"document_id": document_id, "status": job.status}
        if job.status in ("queued", "translating"):
            answer["seconds_remaining"] = 1
        if job.status == "error":
            answer["error_message"] = job.error
        if job.status == "done":
            answer["billed_characters"] = job.characters
        return answer

    @app.post("/v2/document/{document_id}/result")
    async def document_result(document_id: str, request: Request):
        fields = await fields_of(request)
        key = authorized(request, fields)
        job = jobs.find(document_id, fields.get("document_key"), key and key.name)
        if job.status != "done":
            raise RequestError(503, "Document not ready" if job.status != "error" else job.error or "error")
        return file_response(*jobs.take(document_id, job))

    add_v3_routes(app, fleet, authorized, fields_of, pairs, glossaries, forget)
    add_memory_routes(app, fleet.memory, authorized, fields_of, fleet.cfg.max_file_bytes)
