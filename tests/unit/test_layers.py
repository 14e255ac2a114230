"""The import rules of the package, read from the source with `ast` (nothing imported):
the wire (transport/) knows nothing of orch above it, the container wing knows only the
wire and the few modules below it, and no two modules import each other, even through
others (a cycle would make a lower floor depend on a higher one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent.parent / "orchestrator"
BASE = {
    "orchestrator.errors",
    "orchestrator.deadline",
    "orchestrator.layout",
    "orchestrator.durations",
}
ALLOWED = {
    "orchestrator.transport": (
        "orchestrator.transport",
        "orchestrator.errors",
        "orchestrator.deadline",
    ),
    "orchestrator.container": (
        "orchestrator.container",
        "orchestrator.transport",
        *sorted(BASE),
    ),
    "orchestrator.errors": (),
    "orchestrator.deadline": (),
    "orchestrator.layout": (),
    "orchestrator.durations": ("orchestrator.errors",),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The orchestrator modules `path` imports, anywhere in it but under TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for guard in ast.walk(tree)
        if isinstance(guard, ast.If) and ast.unparse(guard.test).endswith("TYPE_CHECKING")
        for node in ast.walk(guard)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("orchestrator.") and _exists(name)}


def _exists(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (
        PACKAGE / relative / "__init__.py"
    ).is_file()


GRAPH = {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("floor", sorted(ALLOWED))
def test_a_lower_floor_imports_nothing_above_it(floor: str) -> None:
    wrong = {
        module: sorted(name for name in imported if not _within(name, ALLOWED[floor]))
        for module, imported in GRAPH.items()
        if _within(module, (floor,))
    }
    assert {module: names for module, names in wrong.items() if names} == {}


ORCH_BELIEFS = (
    "orchestrator.drafters.profiles",
    "orchestrator.drafters.kinds",
    "orchestrator.drafters.keytable",
    "orchestrator.serving",
)
"""What orch believes about drafters and servers: its profiles, key tables and capability
table."""


def test_the_lab_takes_no_truth_from_orchs_own_tables() -> None:
    """The lab's models and stand-in come from its own copies of the published files and
    its own reading of vLLM, so a wrong row in orch's tables meets the lab as a
    disagreement (a refused start, a failed gate), not as a lab that agrees with it."""
    taken = {
        module: sorted(name for name in imported if _within(name, ORCH_BELIEFS))
        for module, imported in GRAPH.items()
        if _within(module, ("orchestrator.lab",))
    }
    assert {module: names for module, names in taken.items() if names} == {}


def test_no_import_cycles() -> None:
    """Depth-first search; the first cycle found is named."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(" -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        for name in sorted(GRAPH.get(module, ())):
            if name != module and not module.startswith(name + "."):
                visit(name, [*path, module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])


def test_the_graph_is_read() -> None:
    """The rules above would pass on an empty graph: show they see real imports."""
    assert "orchestrator.container.shell" in GRAPH["orchestrator.container.lock"]
    assert "orchestrator.transport.base" in GRAPH["orchestrator.container.shell"]
