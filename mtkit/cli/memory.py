"""The `mtkit tm` commands: a translation memory imported, exported and searched."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import TmNameOption
from mtkit.core import console
from mtkit.core.database import is_url, without_password
from mtkit.core.errors import MtkitError

tm_app = typer.Typer(help="Translation memories: import, export and look up stored translations.", no_args_is_help=True)
app.add_typer(tm_app, name="tm")

MemoryOption = Annotated[
    str, typer.Option("--tm", help="The memory: a SQLite file (created where missing) or a postgresql:// URL.")
]
NameOption = Annotated[str, typer.Option("--name", help="Which memory of the file.")]
SrcLangOption = Annotated[str | None, typer.Option("--src-lang", help="The source language (e.g. en).")]
TgtLangOption = Annotated[str | None, typer.Option("--tgt-lang", help="The target language (e.g. de).")]


@tm_app.command("import")
@handle_errors
def import_units(
    file: Annotated[Path | None, typer.Argument(help="A TMX file, tab-separated pairs or a PO catalogue.")] = None,
    memory: MemoryOption = "tm.db",
    name: NameOption = "default",
    src: Annotated[Path | None, typer.Option("--src", help="Source sentences, aligned with --ref.")] = None,
    ref: Annotated[Path | None, typer.Option("--ref", help="Their translations, line by line.")] = None,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
) -> None:
    """Add units to a memory: from TMX (every language of each unit), TSV or PO with --src-lang and
    --tgt-lang, or two aligned files (--src A --ref B). A unit whose source sentence the memory holds
    already is updated, so importing a file again adds nothing.

    Example: [bold]mtkit tm import corrections.tmx --tm tm.db[/bold]
    """
    from mtkit.memory.sources import aligned_units, units_of
    from mtkit.memory.store import TranslationMemory

    if (file is None) == (src is None and ref is None) or (src is None) != (ref is None):
        raise MtkitError("give a FILE, or --src and --ref")
    if file is None and not (src_lang and tgt_lang):
        raise MtkitError("--src and --ref: give --src-lang and --tgt-lang too")
    if file is not None:
        source_lang, units = units_of(file, src_lang, tgt_lang)
    else:
        source_lang, units = src_lang, aligned_units(src, ref, src_lang, tgt_lang)
    store = TranslationMemory(memory, name)
    with console.progress("importing", unit="units") as bar:
        counts = store.add(_counted(units, bar), source_lang)
    console.info(
        f"{without_password(memory)} ({name}): {counts.added:,} units added, {counts.updated:,} updated, {counts.skipped:,} skipped"
        f" (no text in two languages); {len(store):,} in all"
    )


@tm_app.command("export")
@handle_errors
def export_units(
    output: Annotated[Path, typer.Option("--output", "-o", help="The TMX file to write.")],
    memory: MemoryOption = "tm.db",
    name: NameOption = "default",
    src_lang: Annotated[str, typer.Option("--src-lang", help="The header's source language.")] = "*all*",
) -> None:
    """Write a memory as TMX 1.4, every language of each unit, for CAT tools to open.

    Example: [bold]mtkit tm export --tm tm.db -o memory.tmx[/bold]
    """
    from mtkit.core.textio import atomic_path, check_output_file
    from mtkit.memory.store import TranslationMemory
    from mtkit.memory.tmx import write_tmx

    check_output_file(output)
    store = TranslationMemory(_existing(memory), name)
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        written = write_tmx(store.units(), handle, src_lang)
    console.info(f"wrote {written:,} units to {output}")


@tm_app.command("lookup")
@handle_errors
def lookup(
    text: Annotated[str | None, typer.Argument(help="A sentence (default: one per line on stdin).")] = None,
    memory: MemoryOption = "tm.db",
    name: NameOption = "default",
    src_lang: Annotated[str, typer.Option("--src-lang", help="The source language.")] = "en",
    tgt_lang: Annotated[str, typer.Option("--tgt-lang", help="The target language.")] = "de",
    threshold: Annotated[int, typer.Option(help="The least match, in percent.", min=1, max=100)] = 75,
    limit: Annotated[int, typer.Option(help="The most matches a sentence.", min=1)] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a sentence.")] = False,
) -> None:
    """Find a memory's matches for sentences: SCORE<TAB>SOURCE<TAB>TARGET lines, best first (a blank
    line after each sentence's), or with --json one object a sentence.

    Example: [bold]mtkit tm lookup --tm tm.db "Where is the station?"[/bold]
    """
    from mtkit.cli.options import input_lines
    from mtkit.memory.store import TranslationMemory

    store = TranslationMemory(_existing(memory), name)
    for sentence in [text] if text is not None else input_lines(None):
        matches = store.lookup(sentence, src_lang, tgt_lang, threshold, limit)
        if as_json:
            found = [{"score": m.score, "source": m.source, "target": m.target} for m in matches]
            print(json.dumps({"text": sentence, "matches": found}, ensure_ascii=False), flush=True)
        else:
            sys.stdout.write("".join(f"{m.score}\t{m.source}\t{m.target}\n" for m in matches) + "\n")
            sys.stdout.flush()


@app.command("adapt")
@handle_errors
def adapt_command(
    model: Annotated[Path, typer.Option("--model", "-m", help="The model to adapt (model file or run directory).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The adapted model file to write.")],
    memory: Annotated[
        str | None,
        typer.Option("--tm", help="A memory (SQLite file or postgresql:// URL): its units are the corrections."),
    ] = None,
    name: TmNameOption = "default",
    src: Annotated[
        Path | None, typer.Option("--src", help="Corrections: source sentences, aligned with --ref.")
    ] = None,
    ref: Annotated[Path | None, typer.Option("--ref", help="Corrections: their translations, line by line.")] = None,
    minutes: Annotated[float, typer.Option(help="The whole run's budget, data preparation included.")] = 10.0,
    replay_share: Annotated[
        float, typer.Option(help="The part of each epoch taken from the model's original data (0: none).")
    ] = 0.25,
    replay_src: Annotated[
        Path | None, typer.Option(help="Original sources to replay (default: the model's data-bin's training pairs).")
    ] = None,
    replay_ref: Annotated[Path | None, typer.Option(help="Their translations, aligned with --replay-src.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="A training setting: train.key=value (repeatable).")
    ] = None,
) -> None:
    """Fine-tune a model on corrections (a memory's units, or two aligned files) within a time budget, with
    a share of its original data replayed so that it keeps what it knew; writes a new model file that
    records what it learned from. A server given the same path (serve -m) loads the new file when it changes.

    Example: [bold]mtkit adapt -m model.pt --tm tm.db -o adapted.pt --minutes 10[/bold]
    """
    from mtkit.core.textio import check_output_file
    from mtkit.model.files import load_model_file
    from mtkit.training.adaptation import adapt, model_languages

    if (memory is None) == (src is None and ref is None) or (src is None) != (ref is None):
        raise MtkitError("give the corrections: --tm FILE, or --src and --ref")
    if (replay_src is None) != (replay_ref is None):
        raise MtkitError("give --replay-src and --replay-ref together")
    check_output_file(output)
    model_file = load_model_file(model)
    src_lang, tgt_lang = model_languages(model_file)
    if memory is not None:
        corrections, origin = (
            _memory_pairs(_existing(memory), name, src_lang, tgt_lang),
            f"memory {name} of {without_password(memory)}",
        )
    else:
        corrections, origin = _aligned_pairs(src, ref), f"{src} + {ref}"
    replay = _aligned_pairs(replay_src, replay_ref) if replay_src and replay_ref else None
    done = adapt(model_file, model, corrections, output, minutes, replay, replay_share, overrides or [], origin)
    console.info(
        f"wrote {output}: {done.steps:,} updates in {done.seconds / 60:.1f} minutes on {done.corrections:,} corrections"
        + (f" and {done.replay_share:.0%} replay from {done.replay_pool:,} original pairs" if done.replay_pool else "")
    )


def _memory_pairs(memory: str, name: str, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    from mtkit.memory.store import TranslationMemory

    store = TranslationMemory(memory, name)
    return [(s, t) for unit in store.units() if (s := unit.text_in(src_lang)) and (t := unit.text_in(tgt_lang))]


def _aligned_pairs(src: Path, ref: Path) -> list[tuple[str, str]]:
    from mtkit.memory.sources import aligned_units

    return [(unit.variants[0].text, unit.variants[1].text) for unit in aligned_units(src, ref, "src", "tgt")]


def _counted(units, bar):
    for unit in units:
        yield unit
        bar.advance()


def _existing(memory: str) -> str:
    if not is_url(memory) and not Path(memory).is_file():
        raise MtkitError(f"--tm {memory}: no such file")
    return memory
