"""The `mtkit` Typer application and the one place where expected failures become a red line and exit 1."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from typing import Annotated, NoReturn

import typer
from rich.markup import escape

from mtkit import __version__
from mtkit.core import console
from mtkit.core.errors import MtkitError

app = typer.Typer(
    name="mtkit",
    help="Transformer neural machine translation: tokenize, preprocess, train, average, translate, evaluate.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def run_without_finalizing() -> NoReturn:
    """Run the command, flush what it printed, and end the process with its exit code without
    finalizing the interpreter. DDP keeps references to the process group that outlive
    destroy_process_group (torch 2.13: ten per wrapper, still held after the wrapper is collected),
    so gloo's threads are alive while the interpreter finalizes; one that takes the GIL there aborts
    the process ("terminate called without an active exception", SIGABRT) after a run that finished
    well, and torchrun reports the job failed. Every file a run writes is complete by then:
    checkpoints are renamed into place, metrics.jsonl is flushed and closed."""
    try:
        app()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else int(done.code is not None)
    except BaseException:  # a bug: its traceback, as Python would print it
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def handle_errors(command: Callable) -> Callable:
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except MtkitError as err:
            _fail(str(err))
        except RuntimeError as err:  # a collective that failed because another rank of torchrun's job is gone
            from mtkit.core.distributed import lost_peer

            if (message := lost_peer(err)) is None:
                raise
            _fail(message)
        except KeyboardInterrupt:
            console.console.print("[red]interrupted[/red]")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # e.g. `mtkit translate ... | head`: the reader has all it wants
            # What is still buffered for stdout goes nowhere: Python's flush at exit would fail on the
            # closed pipe again and exit 120 (the recipe of Python's documentation on SIGPIPE).
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None

    wrapper.__doc__ = one_line_paragraphs(command.__doc__)
    return wrapper


def _fail(message: str) -> NoReturn:
    """One red line on stderr, and exit code 1 (the message as it is: `pip install 'mtkit[serve]'` is no markup)."""
    console.console.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True, highlight=False)
    raise typer.Exit(1) from None


def one_line_paragraphs(doc: str | None) -> str | None:
    """The docstring with each paragraph on one line. Rich help keeps a docstring's line breaks, so a
    paragraph wrapped in the source would wrap again, raggedly, at the terminal's width."""
    if not doc:
        return doc
    return "\n\n".join(" ".join(paragraph.splitlines()) for paragraph in inspect.cleandoc(doc).split("\n\n"))


def _version(value: bool) -> None:
    if value:
        print(f"mtkit {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool | None, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """Transformer neural machine translation from the command line."""
