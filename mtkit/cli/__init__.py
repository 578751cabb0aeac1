"""The `mtkit` command line: thin adapters that parse options, call a stage, print a summary.

One module per group of commands; expected failures raise MtkitError, which `handle_errors`
(in mtkit.cli.app) turns into one red line and exit code 1.
"""

from mtkit.cli import data, training, translation, documents, evaluation, scoring, serving, memory, inspection  # noqa: F401, I001 - registers the commands, in --help order
from mtkit.cli.app import app, launched_by_torchrun, run_without_finalizing


def main() -> None:
    if launched_by_torchrun():
        run_without_finalizing()
    app()
