"""The import rules of the package, read from the source with `ast` (nothing imported)
and checked against the picture of the floors in docs/architecture.md, which this test
reads: no import climbs from a lower row to a higher one, every module is in the picture
and every name in the picture is a module, and no two modules import each other, even
through others (a cycle would make a lower floor depend on a higher one)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / "orchestrator"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BESIDE = "beside"


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
PACKAGE_ROOT = "orchestrator"
"""`orchestrator/__init__.py`: the package's name and version, on no floor."""


@dataclass(frozen=True)
class Row:
    """One row of the picture: a level, `height` 0 the lowest; the beside row has none."""

    floor: str
    height: int | None
    entries: tuple[str, ...]


def read_picture(text: str) -> list[Row]:
    """The rows of the ```floors block, top row first; a row without a floor label
    belongs to the floor above it."""
    block = re.search(r"^```floors\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    if block is None:
        raise AssertionError(f"{ARCHITECTURE}: no ```floors block")
    rows: list[tuple[str, tuple[str, ...]]] = []
    floor = ""
    for number, line in enumerate(block.group(1).splitlines(), 1):
        if not line.strip():
            continue
        label, bar, modules = line.partition("|")
        if not bar or not modules.split():
            raise AssertionError(
                f"{ARCHITECTURE}: floors line {number}: expected 'FLOOR | modules'"
            )
        floor = label.strip() or floor
        rows.append((floor, tuple(modules.split())))
    climbing = [row for row in rows if row[0] != BESIDE]
    return [
        Row(
            floor,
            None if floor == BESIDE else len(climbing) - 1 - climbing.index((floor, entries)),
            entries,
        )
        for floor, entries in rows
    ]


def entry_covers(entry: str, module: str) -> int:
    """How specifically `entry` names `module` (its length), 0 when it does not."""
    dotted = "orchestrator." + entry.rstrip("/").replace("/", ".")
    if module == dotted or (entry.endswith("/") and module.startswith(dotted + ".")):
        return len(dotted) + (0 if entry.endswith("/") else 1)
    return 0


def row_of(module: str, rows: list[Row]) -> Row | None:
    """The row of the most specific entry naming `module`."""
    scored = [(entry_covers(e, module), row) for row in rows for e in row.entries]
    best = max(scored, key=lambda pair: pair[0], default=(0, None))
    return best[1] if best[0] else None


ROWS = read_picture(ARCHITECTURE.read_text())


def climbs(module: str, imported: str, rows: list[Row]) -> str | None:
    """Why importing `imported` from `module` breaks the picture, else None."""
    here, there = row_of(module, rows), row_of(imported, rows)
    if here is None or there is None or here.height is None:
        return None  # off the picture (another test names it) or beside: unchecked
    if there.height is None:
        top = max(row.height for row in rows if row.height is not None)
        return None if here.height == top else f"imports {imported} ({BESIDE} the floors)"
    if there.height > here.height:
        upper = ", a row above" if there.floor == here.floor else ""
        return f"imports {imported} (floor {there.floor}{upper}) from floor {here.floor}"
    return None


def test_no_import_climbs_from_a_lower_floor_to_a_higher_one() -> None:
    climbing = sorted(
        f"{module} {why}"
        for module, imported in GRAPH.items()
        for name in sorted(imported)
        if (why := climbs(module, name, ROWS))
    )
    assert climbing == []


def test_every_module_is_on_a_floor() -> None:
    assert sorted(m for m in GRAPH if m != PACKAGE_ROOT and row_of(m, ROWS) is None) == []


def test_every_name_in_the_picture_is_a_module() -> None:
    """A picture that names what is not there has drifted from the code."""
    named = [e for row in ROWS for e in row.entries]
    assert [e for e in named if not any(entry_covers(e, m) for m in GRAPH)] == []
    assert len(named) == len(set(named)), "a name on two rows"


ORCH_BELIEFS = (
    "orchestrator.drafters.profiles",
    "orchestrator.drafters.kinds",
    "orchestrator.drafters.keytable",
    "orchestrator.serving",
)
"""What orch believes about drafters and servers: its profiles, key tables and capability
table."""


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


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


def test_the_graph_and_the_picture_are_read() -> None:
    """The rules above would pass on an empty graph or an empty picture: show they see
    real imports and real floors."""
    assert "orchestrator.container.shell" in GRAPH["orchestrator.container.lock"]
    assert "orchestrator.transport.base" in GRAPH["orchestrator.container.shell"]
    rows = {name: row_of(f"orchestrator.{name}", ROWS) for name in ("cli", "errors", "lab")}
    assert [row.height if row else "none" for row in rows.values()] == [len(ROWS) - 2, 0, None]


TWO = "2 up | a\n1 down | b\n"
SPLIT = "2 up | a\n     | b\n"
INIT_ABOVE = "2 up | p\n1 down | p/\n"
WITH_LAB = TWO + "beside | c\n"


@pytest.mark.parametrize(
    ("picture", "module", "imported", "why"),
    [
        (TWO, "a", "b", None),
        (TWO, "b", "a", "imports orchestrator.a (floor 2 up) from floor 1 down"),
        (SPLIT, "b", "a", "imports orchestrator.a (floor 2 up, a row above) from floor 2 up"),
        ("1 one | a  b\n", "a", "b", None),
        (
            INIT_ABOVE,
            "p.q",
            "p",
            "imports orchestrator.p (floor 2 up) from floor 1 down",
        ),
        (WITH_LAB, "b", "c", "imports orchestrator.c (beside the floors)"),
        (WITH_LAB, "a", "c", None),
        (WITH_LAB, "c", "a", None),
    ],
)
def test_how_the_picture_is_read(picture: str, module: str, imported: str, why: str | None) -> None:
    rows = read_picture(f"```floors\n{picture}```\n")
    assert climbs(f"orchestrator.{module}", f"orchestrator.{imported}", rows) == why


TESTS = ROOT / "tests"
TEST_IMPORT = re.compile(r"\s*(from|import)\s+(test_\w*|conftest)\b")


def test_no_test_module_imports_another() -> None:
    """Shared builders live in helpers under tests/ (and shared fixtures in conftests): a
    test module that imports another runs that module's tests' imports and fixtures too,
    and ties the two together by name."""
    importing = sorted(
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in TESTS.rglob("test_*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if TEST_IMPORT.match(line)
    )
    assert importing == []
