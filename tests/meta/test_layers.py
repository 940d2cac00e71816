"""Imports between hacrl's packages run one way, read from the source (lazy imports inside functions count):
a package imports only packages below it in ``LAYERS``. docs/architecture.md shows the same order. Inside a
package, modules import each other without a loop (``KNOWN_LOOPS`` aside); and the asynchronous loop
(trainer/async_loop.py) reads no private attribute of another object."""

from __future__ import annotations

import ast
import subprocess
import sys
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


# The one import against the order, by design: the package's lazy ``hacrl.HACRLTrainer`` (a PEP 562 module
# attribute in __init__.py's ``__getattr__``, so ``import hacrl`` imports nothing); test_import_hacrl_stays_light.
FACADE = {("__init__", "api")}


def test_imports_run_downward_only():
    upward = [f"{where}: hacrl.{src} imports hacrl.{dst}" for src, dst, where in import_edges()
              if _level(dst) > _level(src) and (src, dst) not in FACADE]
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


# ---- inside a package: modules import each other one way ----------------------------------------------------------

def _module_name(path: Path) -> str:
    """``hacrl.trainer.trainer`` for src/hacrl/trainer/trainer.py; a package's ``__init__`` is the package."""
    parts = ["hacrl", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str, modules: set[str]) -> str:
    """The package a module belongs to: its own name for a package's ``__init__``, else its parent."""
    return module if module in modules and (SRC / Path(*module.split(".")[1:]) / "__init__.py").is_file() \
        else module.rpartition(".")[0]


def _imported_modules(tree: ast.AST, modules: set[str]) -> set[tuple[str, int]]:
    """(hacrl module, line) for every import in ``tree``, lazy ones included: ``from hacrl.p import m`` names the
    module ``hacrl.p.m`` where there is one, else the package ``hacrl.p``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add((sub if sub in modules else node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found.update((a.name, node.lineno) for a in node.names)
    return {(m, line) for m, line in found if m in modules}


def module_edges() -> list[tuple[str, str, str]]:
    """(importing module, imported module, file:line) for every import between two modules of one package."""
    paths = sorted(SRC.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    edges = []
    for path in paths:
        src = _module_name(path)
        for dst, line in _imported_modules(ast.parse(path.read_text(encoding="utf-8")), modules):
            if dst != src and _package(src, modules) == _package(dst, modules):
                edges.append((src, dst, f"{path.relative_to(SRC)}:{line}"))
    return edges


def import_loops(edges: list[tuple[str, str, str]]) -> set[frozenset[str]]:
    """The modules that import each other in a loop (directly or through others), each loop as one set."""
    graph: dict[str, set[str]] = {}
    for src, dst, _ in edges:
        graph.setdefault(src, set()).add(dst)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {m: reach(m) for m in graph}
    return {frozenset({m} | {x for x in reached[m] if m in reached.get(x, set())}) for m in graph if m in reached[m]}


# Loops older than this check (issue #42), each through lazy imports or a package's __init__ re-exporting its
# modules: a new loop fails the test, and so does a listed one that is gone (take it off the list).
KNOWN_LOOPS = {
    frozenset({"hacrl.agents.agent", "hacrl.agents.lora"}),  # agent builds LoRA adapters, lora scores with agent
    frozenset({"hacrl.data.benchmarks", "hacrl.data.datasets"}),  # PAPER_TEMPLATE ↔ read_benchmark
    frozenset({"hacrl.data.hub", "hacrl.data.rows"}),  # iter_rows ↔ hub_dataset_rows
}


def test_no_import_loop_between_modules_of_a_package():
    loops = import_loops(module_edges())
    new = [" <-> ".join(sorted(loop)) for loop in loops - KNOWN_LOOPS]
    assert not new, "import loops inside a package:\n" + "\n".join(new)
    gone = [" <-> ".join(sorted(loop)) for loop in KNOWN_LOOPS - loops]
    assert not gone, "listed in KNOWN_LOOPS but no longer a loop (take them off):\n" + "\n".join(gone)


def test_the_module_checker_sees_a_loop_through_a_lazy_import():
    """trainer/trainer.py importing async_loop at the top and async_loop importing the trainer inside a function
    (as they once did) is a loop; the same imports across two packages are not this test's (the layers' are)."""
    modules = {"hacrl.trainer", "hacrl.trainer.trainer", "hacrl.trainer.async_loop", "hacrl.core"}
    top = ast.parse("from hacrl.trainer.async_loop import AsyncLoop\nfrom hacrl import core\n")
    lazy = ast.parse("def f():\n    from hacrl.trainer import trainer\n    from hacrl.trainer.trainer import Trainer\n")
    assert _imported_modules(top, modules) == {("hacrl.trainer.async_loop", 1), ("hacrl.core", 2)}
    assert _imported_modules(lazy, modules) == {("hacrl.trainer.trainer", 2), ("hacrl.trainer.trainer", 3)}
    edges = [("hacrl.trainer.trainer", "hacrl.trainer.async_loop", "trainer.py:1"),
             ("hacrl.trainer.async_loop", "hacrl.trainer.phases", "async_loop.py:1"),
             ("hacrl.trainer.async_loop", "hacrl.trainer.trainer", "async_loop.py:2")]
    assert import_loops(edges) == {frozenset({"hacrl.trainer.trainer", "hacrl.trainer.async_loop"})}
    assert import_loops(edges[:2]) == set()
    three = [("a.x", "a.y", ""), ("a.y", "a.z", ""), ("a.z", "a.x", ""), ("a.z", "a.w", "")]
    assert import_loops(three) == {frozenset({"a.x", "a.y", "a.z"})}


# ---- the asynchronous loop reaches into no other object -------------------------------------------------------------

def private_reads(tree: ast.AST) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` (dunders aside), as ``line: expression``."""
    return sorted(f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id == "self"))


def test_the_async_loop_reads_no_private_attribute_of_another_object():
    found = private_reads(ast.parse((SRC / "trainer" / "async_loop.py").read_text(encoding="utf-8")))
    assert not found, "trainer/async_loop.py reads private attributes of other objects:\n" + "\n".join(found)


def test_the_private_read_checker_sees_one():
    tree = ast.parse("self._mine\nself.t._score(x)\nt._stop_requested\nx.__class__\nself.t.public\n")
    assert private_reads(tree) == ["2: self.t._score", "3: t._stop_requested"]


def test_import_hacrl_stays_light_and_hacrltrainer_comes_on_first_use():
    """``import hacrl`` loads no other hacrl module, nor torch; ``from hacrl import HACRLTrainer`` then works."""
    code = ("import sys, hacrl\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('hacrl.') or m in ('torch', 'transformers'))\n"
            "assert not loaded, loaded\n"
            "from hacrl import HACRLTrainer, TrainResult\n"
            "import hacrl.api\n"
            "assert HACRLTrainer is hacrl.api.HACRLTrainer and TrainResult is hacrl.api.TrainResult\n"
            "try:\n    hacrl.NoSuchThing\nexcept AttributeError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "module 'hacrl' has no attribute 'NoSuchThing'"
