"""A server's translation memories in its answers (serve --tm): the texts a key's memory holds whole
answered from it, and with serve --tm-steer, the texts with fuzzy matches translated steered by them;
the rest by the model, each text saying where it came from."""

import asyncio
from dataclasses import replace

from mtkit.memory.owners import OwnedMemories
from mtkit.memory.store import TranslationMemory
from mtkit.serving.calls import Asked, Translated
from mtkit.serving.engine import Options


async def translated(memories: OwnedMemories | None, route, asked: Asked, owner: str | None,
                     memory: TranslationMemory | None = None, threshold: int | None = None) -> Translated:  # fmt: skip
    """The request's answer through the route: markup as the route translates it; plain text with the
    server's memories (remembered)."""
    if asked.format != "text":
        return await route.translate(asked)
    return await remembered(memories, route, asked, owner, memory, threshold)


async def remembered(memories: OwnedMemories | None, route, asked: Asked, owner: str | None,
                     memory: TranslationMemory | None = None, threshold: int | None = None) -> Translated:  # fmt: skip
    """route.run's answer, with each text's origin ("tm 100", "tm 83 + mt" or "mt") where the server has
    memories, the texts the owner's memory holds whole answered from it (with n-best lists or alignments
    asked for, as a list of one translation, its alignment empty: the memory has none); memory: the one
    the request names (DeepL's translation_memory_id), in place of the owner's default one. Where the
    route steers (serve --tm-steer), a text with fuzzy matches of at least `threshold` (default: the
    server's) is translated steered by them, one at a time, off the event loop."""
    texts, options = asked.texts, asked.options
    languages = (asked.source or route.info.source_language, asked.target or route.info.target_language)
    usable = bool(memories) and all(languages)  # (None: the model does not say)
    if usable:  # the request's bounds before the memory's work
        route.check_chars(texts)
    stored = await asyncio.to_thread(memories.stored, owner, texts, *languages, memory) if usable else {}
    steered = (
        await _steered(memories, route, owner, texts, stored, languages, memory, threshold, options) if usable else {}
    )
    if options.nbest > 1 or options.alignment:
        alignment = {"alignment": ""} if options.alignment else {}
        stored = {i: [{"text": text, "score": 0.0, **alignment}] for i, text in stored.items()}
    rest = [text for i, text in enumerate(texts) if i not in stored and i not in steered]
    if (stored or steered) and not rest:  # the memory answers all
        machine = Translated([], [])
    else:
        machine = await route.run(replace(asked, texts=rest, checked=asked.checked and not usable))
    answers, scores = iter(machine.texts), iter(machine.confidences or [])
    out = [
        (stored[i], 1.0, "tm 100") if i in stored
        else (steered[i][0], None, steered[i][1]) if i in steered
        else (next(answers), next(scores, None), "mt")
        for i in range(len(texts))
    ]  # fmt: skip
    return Translated(
        [a for a, _, _ in out],
        [s for _, s, _ in out] if options.confidence else None,
        [o for _, _, o in out] if memories else None,
    )


async def _steered(memories: OwnedMemories, route, owner, texts, stored, languages, memory, threshold,
                   options: Options) -> dict[int, tuple[str, str]]:  # fmt: skip
    """The texts the route's Steering translates (by index): (translation, origin "tm SCORE + mt")."""
    steering = getattr(route, "steering", None)
    if steering is None or options.nbest > 1 or options.alignment:
        return {}
    wanted = {i: text for i, text in enumerate(texts) if i not in stored}
    limit = threshold if threshold is not None else route.cfg.tm_steer
    found = await asyncio.to_thread(memories.fuzzy, owner, wanted, *languages, limit, memory)
    out = {}
    for i, matches in found.items():
        pairs = [(match.source, match.target) for match in matches]
        out[i] = await asyncio.to_thread(steering, texts[i], pairs), f"tm {matches[0].score} + mt"
    return out
