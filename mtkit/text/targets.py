"""Which language a model translates into: the one its training data named, or, for a model that
serves several, the one a tag token at the start of the source chooses (`--tgt-lang`): <2de> in a
dataset of `preprocess --lang-pairs`, >>deu<< in a multilingual MarianMT model.

A model file's meta says which: "tgt_lang" for a bilingual model, "target_tags" ({language: tag
token}) for one that chooses its target by a tag, as multilingual OPUS-MT models do with `>>fra<<`.
A multilingual model needs --tgt-lang (the error lists its languages); a bilingual one takes it only
where it names the model's own target. A tag's language may also be given by its ISO 639-1 code
(fr for >>fra<<) where exactly one of the model's tags has that code.

NLLB and M2M100 name both languages by tokens: meta "language_tokens" ({code: token}). The source
starts with its language's token, and the target's token is given as the first after the decoder's
start (mtkit.interop.m2m100). Such a model needs --src-lang and --tgt-lang: its own codes (deu_Latn,
de), or an ISO 639-1 or 639-3 code that exactly one of its codes has (de and deu for deu_Latn).
"""

from __future__ import annotations

import re

from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import Tokenizer

MARIAN_TAG = re.compile(r">>(\w+)<<")
LANGUAGE_TOKENS = "language_tokens"
TARGET_TAG_PREFIX = "2"  # <2de> (train-tokenizer --tag 2de) starts a multilingual dataset's sources into German


def marian_target_tags(tokens: list[str]) -> dict[str, str]:
    """{language: token} of a MarianMT vocabulary's >>xxx<< tokens."""
    return {match.group(1): token for token in tokens if (match := MARIAN_TAG.fullmatch(token))}


def _iso639_1(code: str) -> str | None:
    """The two-letter code of a three-letter one (fra -> fr; zho_Hans -> zh), where pycountry knows one."""
    try:
        import pycountry
    except ImportError:
        return None
    language = pycountry.languages.get(alpha_3=code.split("_")[0].lower())
    return getattr(language, "alpha_2", None) if language else None


def _iso639_names(code: str) -> set[str]:
    """The ISO 639 codes a model's language code answers to: its own first part (deu for deu_Latn),
    and that part's two- or three-letter twin (de and deu), where pycountry knows one."""
    base = code.split("_")[0].lower()
    names = {base}
    try:
        import pycountry
    except ImportError:
        return names
    language = pycountry.languages.get(**{"alpha_3" if len(base) == 3 else "alpha_2": base})
    names.update(getattr(language, key, None) for key in ("alpha_2", "alpha_3") if language)
    return names - {None}


def model_language(codes: list[str], asked: str, option: str) -> str:
    """The one code of `codes` that `asked` names: itself, or its ISO 639-1/3 code (_iso639_names)."""
    if asked in codes:
        return asked
    matches = [code for code in codes if asked.lower() in _iso639_names(code)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise MtkitError(f"{option} {asked}: several of this model's languages have that code ({', '.join(matches)})")
    shown = ", ".join(codes[:12]) + (f" and {len(codes) - 12} more" if len(codes) > 12 else "")
    raise MtkitError(f"{option} {asked}: not one of this model's {len(codes)} languages ({shown})")


def carried_languages(meta: dict) -> dict:
    """What a model fine-tuned from this one keeps of its meta: its language tokens and family."""
    return {key: meta[key] for key in (LANGUAGE_TOKENS, "family", "architecture") if key in meta}


def language_leads(meta: dict, tokenizer: Tokenizer, src_lang: str, tgt_lang: str) -> tuple[tuple[int, ...], ...]:
    """The ids that start every source and every target of a dataset of this pair, for training a
    model with language tokens on it (none for another model)."""
    ids = language_token_ids(meta, tokenizer, src_lang, tgt_lang)
    return ((), ()) if ids is None else ((ids[0],), (ids[1],))


def framing(
    meta: dict, tokenizer: Tokenizer, src_lang: str | None, tgt_lang: str | None
) -> tuple[int | None, list[int]]:
    """The id that starts every source (a target's tag, or the source language's token; None: none) and
    the ids given as every translation's start (the target language's token; none for other models)."""
    languages = language_token_ids(meta, tokenizer, src_lang, tgt_lang)
    if languages is None:
        return source_tag_id(meta, tokenizer, tgt_lang), []
    return languages[0], [languages[1]]


def language_token_ids(
    meta: dict, tokenizer: Tokenizer, src_lang: str | None, tgt_lang: str | None
) -> tuple[int, int] | None:
    """For a model with language tokens: the ids of the source's and the target's (by default, those of
    the pair it was fine-tuned on); None for another model."""
    tokens = meta.get(LANGUAGE_TOKENS)
    if not tokens:
        return None
    codes = list(tokens)
    ids = []
    src_lang, tgt_lang = src_lang or meta.get("src_lang"), tgt_lang or meta.get("tgt_lang")  # a fine-tuned model's pair
    for asked, option in ((src_lang, "--src-lang"), (tgt_lang, "--tgt-lang")):
        if asked is None:
            example = "deu_Latn" if "deu_Latn" in tokens else codes[0]
            raise MtkitError(f"this model translates between {len(codes)} languages: give {option} (e.g. {example})")
        ids.append(tag_id(tokenizer, tokens[model_language(codes, asked, option)]))
    return ids[0], ids[1]


def target_tag(meta: dict, tgt_lang: str | None) -> str | None:
    """The tag token to put before every source for --tgt-lang (None: the model needs none)."""
    tags = meta.get("target_tags") or {}
    if not tags:
        own = meta.get("tgt_lang")
        if tgt_lang is not None and tgt_lang != own:
            into = f"into {own} only" if own else "into one language, which its file does not name"
            raise MtkitError(f"--tgt-lang {tgt_lang}: this model translates {into}")
        return None
    languages = ", ".join(sorted(tags))
    if tgt_lang is None:
        raise MtkitError(f"this model translates into several languages: choose one with --tgt-lang ({languages})")
    if tgt_lang in tags:
        return tags[tgt_lang]
    matches = [lang for lang in tags if _iso639_1(lang) == tgt_lang]
    if len(matches) == 1:
        return tags[matches[0]]
    if matches:
        raise MtkitError(
            f"--tgt-lang {tgt_lang}: several of this model's languages have that code ({', '.join(matches)})"
        )
    raise MtkitError(f"--tgt-lang {tgt_lang}: this model translates into {languages}")


def source_tag_id(meta: dict, tokenizer: Tokenizer, tgt_lang: str | None) -> int | None:
    """The id to put before every source for --tgt-lang (target_tag's, in the source vocabulary), or None."""
    tag = target_tag(meta, tgt_lang)
    return None if tag is None else tag_id(tokenizer, tag)


def tag_id(tokenizer: Tokenizer, tag: str) -> int:
    """The source vocabulary's id of a tag token."""
    found = tokenizer.entry_id(tag)
    if found is None:
        raise MtkitError(f"the source vocabulary has no {tag}, which the model file names as a target's tag")
    return found


def checked_directions(directions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    if not directions:
        raise MtkitError("--lang-pairs: give at least one, e.g. en-de,en-fr")
    for s, t in directions:
        if s == t:
            raise MtkitError(f"--lang-pairs {s}-{t}: the source and target language are the same")
    if len(set(directions)) != len(directions):
        raise MtkitError("--lang-pairs: a language pair is given twice")
    return list(directions)


def target_tag_ids(tokenizer: Tokenizer, targets: list[str]) -> dict[str, int]:
    """Each target language's tag id (<2de> for de); a language without one is refused, naming those it has."""
    tags = {}
    for lang in dict.fromkeys(targets):
        found = tokenizer.tag_id(f"{TARGET_TAG_PREFIX}{lang}")
        if found is None:
            has = [
                name.removeprefix(TARGET_TAG_PREFIX)
                for name in tokenizer.tag_names()
                if name.startswith(TARGET_TAG_PREFIX)
            ]
            raise MtkitError(
                f"--lang-pairs: the tokenizer has no tag for target language {lang} (it has {', '.join(has) or 'none'}; "
                f"train it with mtkit train-tokenizer --tag {TARGET_TAG_PREFIX}{lang})"
            )
        tags[lang] = found
    return tags
