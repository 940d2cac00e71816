"""Imports between hacrl's packages run one way, read from the source (lazy imports inside functions count):
a package imports only packages below it in ``LAYERS``. docs/architecture.md shows the same order."""

from __future__ import annotations

import ast
from pathlib import Path

import hacrl

SRC = Path(hacrl.__file__).parent

# low to high; a unit may import units on its own row or any row above it
LAYERS: list[set[str]] = [
    {"errors", "registry", "types", "failpoints", "presets", "__init__"},
    {"config"},
    {"run"},
    {"core"},
    {"pool"},
    {"rewards"},
    {"data"},
    {"agents"},
    {"rollout"},
    {"learner"},
    {"backends"},
    {"trainer"},
    {"report"},
    {"cli", "__main__"},
    {"api"},
]


def _unit(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_units(tree: ast.AST) -> set[tuple[str, int]]:
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "hacrl" else [f"hacrl.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "hacrl" and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


def import_edges() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, file:line) for every import of one hacrl unit by another."""
    edges = []
    for path in sorted(SRC.rglob("*.py")):
        unit = _unit(path)
        for target, line in _imported_units(ast.parse(path.read_text(encoding="utf-8"))):
            if target != unit:
                edges.append((unit, target, f"{path.relative_to(SRC)}:{line}"))
    return edges


def _level(unit: str) -> int:
    for i, row in enumerate(LAYERS):
        if unit in row:
            return i
    raise AssertionError(f"hacrl.{unit} is in no layer of tests/meta/test_layers.py: place it there")


def test_every_unit_has_a_layer():
    units = {_unit(p) for p in SRC.rglob("*.py")}
    for unit in units:
        _level(unit)


def test_imports_run_downward_only():
    upward = [f"{where}: hacrl.{src} imports hacrl.{dst}" for src, dst, where in import_edges()
              if _level(dst) > _level(src)]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_import_loop_between_units():
    graph: dict[str, set[str]] = {}
    for src, dst, _ in import_edges():
        graph.setdefault(src, set()).add(dst)
    seen: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert seen.get(nxt) != 1, "import loop: " + " -> ".join([*path, node, nxt])
            if nxt not in seen:
                visit(nxt, [*path, node])
        seen[node] = 2

    for unit in sorted(graph):
        if unit not in seen:
            visit(unit, [])


def test_checker_sees_a_loop(tmp_path):
    """The walker finds lazy imports and ``from hacrl import x`` forms (so the tests above can fail)."""
    tree = ast.parse("def f():\n    from hacrl.trainer.trainer import Trainer\nfrom hacrl import core\n")
    assert {u for u, _ in _imported_units(tree)} == {"trainer", "core"}
