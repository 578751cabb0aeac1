"""Which tests depend on what `precision: auto` chooses on this machine.

With MTKIT_AUTO_PRECISION_LOG set, every resolution of `auto` (in the test's process or a child it
starts) appends the test or fixture that asked (mtkit.core.device.record_auto_choice);
`--only-precision-dependent=LOG` then runs only those tests and the tests that use those fixtures.
`make test` runs them a second time with MTKIT_NO_BF16=1 on a CPU with bf16 instructions, so that a
test that holds only where `auto` is bf16 (a number recorded without naming its precision) fails
there too, not first on a user's CPU without bf16.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from mtkit.core.device import AUTO_PRECISION_CONTEXT


def pytest_addoption(parser):
    parser.addoption(
        "--only-precision-dependent",
        metavar="LOG",
        help="run only the tests (and the users of the fixtures) that resolved precision auto in the run "
        "that wrote LOG (MTKIT_AUTO_PRECISION_LOG); give it with '=', before the conftest is read",
    )


def pytest_configure(config):
    # Registered for the whole session, not as a conftest's hooks: those see only what happens under
    # their folder, and a session-scoped fixture is set up at the root.
    config.pluginmanager.register(PrecisionDependence(), "mtkit-precision-dependence")


class PrecisionDependence:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        with asking_for_precision(f"test {item.nodeid}"):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        with asking_for_precision(f"fixture {fixturedef.argname}"):
            yield

    def pytest_collection_modifyitems(self, config, items):
        log = config.getoption("--only-precision-dependent")
        if log is None:
            return
        askers = precision_askers(Path(log))
        tests = {asker.removeprefix("test ") for asker in askers if asker.startswith("test ")}
        fixtures = {asker.removeprefix("fixture ") for asker in askers if asker.startswith("fixture ")}
        kept = [item for item in items if item.nodeid in tests or fixtures & set(item.fixturenames)]
        kept_ids = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
        items[:] = kept


@contextlib.contextmanager
def asking_for_precision(context: str):
    """Name the asker in the environment, which the processes a test starts inherit."""
    previous = os.environ.get(AUTO_PRECISION_CONTEXT)
    os.environ[AUTO_PRECISION_CONTEXT] = context
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(AUTO_PRECISION_CONTEXT, None)
        else:
            os.environ[AUTO_PRECISION_CONTEXT] = previous


def precision_askers(log: Path) -> set[str]:
    """Who resolved `auto` in the run that wrote `log`. An empty log, or a resolution outside any test,
    is an error: the recording itself would be broken."""
    if not log.is_file():
        raise pytest.UsageError(f"--only-precision-dependent: {log} does not exist")
    askers = {json.loads(line)["context"] for line in log.read_text(encoding="utf-8").splitlines()}
    if not askers:
        raise pytest.UsageError(f"{log}: no test resolved precision auto")
    if "" in askers:
        raise pytest.UsageError(f"{log}: precision auto was resolved outside any test")
    return askers
