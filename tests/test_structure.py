"""The architecture stays visible: the package's subpackages are the stages of the data's path, and
imports run only from a later stage to an earlier one; no module imports itself back through
others (at module level or inside a function); no module outgrows its room, nor any stage."""

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "mtkit"
MAX_LINES = 350
MAX_MODULES = 12
# The stages, earliest first (the README draws this order): a module may import from its own stage
# and the ones before it. Training validates by translating, so it comes after translation.
STAGES = [
    "core",
    "text",
    "documents",
    "data",
    "model",
    "decoding",
    "translation",
    "memory",
    "training",
    "interop",
    "serving",
    "api",
    "cli",
]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The mtkit modules a file imports anywhere in it (`from mtkit import x` counts as mtkit.x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(files)) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def stage_of(module: str) -> int:
    """The rank of a module's stage; mtkit itself (its version) is below every stage, __main__ above."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    return len(STAGES) if parts[1] == "__main__" else STAGES.index(parts[1])


def backward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets if stage_of(b) > stage_of(a))


def test_the_order_check_finds_an_import_against_the_order():
    assert backward_imports({"mtkit.text.a": {"mtkit.core.b", "mtkit"}, "mtkit.core.b": set()}) == []
    assert backward_imports({"mtkit.core.b": {"mtkit.text.a"}, "mtkit.text.a": set()}) == [
        ("mtkit.core.b", "mtkit.text.a")
    ]


def test_every_module_lives_in_a_stage():
    assert {path.name for path in PACKAGE.glob("*.py")} == {"__init__.py", "__main__.py"}
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders == set(STAGES)


def test_imports_run_from_later_stages_to_earlier_ones():
    graph = import_graph()
    assert "mtkit.core.errors" in graph["mtkit.translation.translate"]
    assert backward_imports(graph) == []


def test_a_stage_says_in_one_sentence_what_it_does_and_hands_on_no_names():
    for stage in STAGES[:-1]:  # the command line's package registers its commands when imported
        tree = ast.parse((PACKAGE / stage / "__init__.py").read_text(encoding="utf-8"))
        assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr), f"mtkit.{stage}: a docstring alone"
        docstring = ast.get_docstring(tree)
        assert docstring.endswith(".") and ". " not in docstring and "\n\n" not in docstring, stage


def test_no_stage_holds_more_than_a_dozen_modules():
    counts = {stage: len([p for p in (PACKAGE / stage).glob("*.py") if p.name != "__init__.py"]) for stage in STAGES}
    assert {stage: n for stage, n in counts.items() if n > MAX_MODULES} == {}


HTTP_NAMES = ("fastapi", "starlette", "uvicorn", "request.state", "request.receive", "status_code")


def test_the_serving_engine_knows_nothing_of_http():
    """Requests reach the engine as values (mtkit.serving.calls) and its refusals become statuses at the
    edge (mtkit.api.edge): no engine module names an HTTP library, a request's state or a status code."""
    found = {}
    for path in (PACKAGE / "serving").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        named = [name for name in HTTP_NAMES if name in text]
        if named or re.search(r"\b(Refused|RequestError)\(\s*[1-5]\d\d\b", text):
            found[path.name] = named or ["a status code"]
    assert found == {}


def test_no_module_imports_itself_back():
    graph = import_graph()
    assert "mtkit.translation.alignment" in graph["mtkit.translation.translate"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_module_outgrows_its_room():
    sizes = {module_name(path): len(path.read_text(encoding="utf-8").splitlines()) for path in PACKAGE.rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_LINES} == {}


MAX_BENCH_LINES = 320


def test_no_benchmark_outgrows_its_room():
    sizes = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in (REPO / "bench").glob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_BENCH_LINES} == {}
