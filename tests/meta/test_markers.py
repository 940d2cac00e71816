"""The ``model`` marker stays honest: a test that trains or loads a model, starts ranks or Ray, or runs
``hacrl train`` (``eval``, ``compare``) or a repository script in a subprocess carries it, so the fast loop
(``make test-fast``: ``pytest -m "not slow and not gpu and not model"``) never pays for one.

Read from the source. What a test reaches is its own body, the module's functions it names (and those it
imports from a sibling test module), and the fixtures it asks for, by argument, ``usefixtures`` or autouse, from
its module and the conftest.py files above it, each with what they reach in turn. A test is slow when that holds
one of ``SLOW``'s names, or a ``subprocess`` call together with a ``train``/``eval``/``compare`` argument or a
``.py`` file. It must then carry the mark itself, on its class, or on its module (``pytestmark``).

Not seen here, so marked by reading: ``hacrl.cli.main(["train", ...])`` in-process (a bad flag stops it before
any model is loaded, so the call alone does not tell) and a bench or example script's functions called as a
module (``soak.run``, ``async_pace.main``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# name (a variable, an attribute or an imported name) -> what it does that costs seconds or more
SLOW = {
    "Trainer": "builds the Trainer (its agents load their models)",
    "train_async": "trains",
    "AgentWorker": "builds an agent worker (it loads its model)",
    "LocalBackend": "builds a backend (its workers load their models)",
    "RayBackend": "starts Ray actors",
    "load_agent": "loads a model",
    "from_pretrained": "loads a model",
    "build_model": "builds a model",
    "warm_start": "trains a model",
    "finetune_lora": "trains a model",
    "convert_gguf": "converts a model",
    "spawn": "spawns ranks",
    "init_process_group": "starts ranks",
    "ray": "uses Ray",
}
SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}
RUNS = {"train", "eval", "compare"}  # hacrl subcommands that load models


def _names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[-1])
    return out


def _strings(node: ast.AST) -> set[str]:
    """The string constants in ``node``, docstrings left out."""
    docs = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Expr)}
    return {n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs}


def _runs_subprocess(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in SUBPROCESS \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "subprocess":
            return True
    return False


def _is_model_mark(node: ast.AST) -> bool:
    """``pytest.mark.model``, alone or in a list of marks."""
    return any(isinstance(n, ast.Attribute) and n.attr == "model" and isinstance(n.value, ast.Attribute)
               and n.value.attr == "mark" for n in ast.walk(node))


def _usefixtures(decorators: list[ast.expr]) -> set[str]:
    out = set()
    for d in decorators:
        for n in ast.walk(d):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "usefixtures":
                out |= {a.value for a in n.args if isinstance(a, ast.Constant)}
    return out


def _fixture(fn: ast.FunctionDef) -> tuple[bool, bool]:
    """(is a fixture, is autouse)."""
    for d in fn.decorator_list:
        text = ast.unparse(d)
        if text.startswith(("pytest.fixture", "fixture")):
            return True, "autouse=True" in text
    return False, False


@dataclass
class Module:
    path: Path
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # top-level functions, fixtures too
    fixtures: set[str] = field(default_factory=set)
    autouse: set[str] = field(default_factory=set)
    constants: dict[str, ast.AST] = field(default_factory=dict)  # top-level NAME = ... values
    marked: bool = False  # pytestmark holds pytest.mark.model
    module_fixtures: set[str] = field(default_factory=set)  # pytestmark's usefixtures

    @classmethod
    def read(cls, path: Path) -> Module:
        tree = ast.parse(path.read_text(), str(path))
        m = cls(path, tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                m.functions[node.name] = node
                is_fixture, autouse = _fixture(node)
                if is_fixture:
                    m.fixtures.add(node.name)
                    if autouse:
                        m.autouse.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        m.constants[target.id] = node.value
                        if target.id == "pytestmark":
                            m.marked = _is_model_mark(node.value)
                            m.module_fixtures = _usefixtures([node.value])
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and (path.parent / f"{node.module}.py").is_file() and node.module.startswith("test_"):
                sibling = cls.read(path.parent / f"{node.module}.py")  # helpers from a sibling test module
                for alias in node.names:
                    if alias.name in sibling.functions:
                        m.functions.setdefault(alias.asname or alias.name, sibling.functions[alias.name])
        return m


def _conftests(path: Path, root: Path) -> list[Module]:
    """The conftest.py files under ``root`` that apply to ``path``, nearest first."""
    out, folder = [], path.parent
    while folder == root or root in folder.parents:
        if (folder / "conftest.py").is_file():
            out.append(Module.read(folder / "conftest.py"))
        folder = folder.parent
    return out


def slow_reasons(node: ast.AST, fixtures: set[str], module: Module, conftests: list[Module]) -> set[str]:
    """What ``node`` (a test, with the fixtures it asks for) reaches that makes it slow."""
    scopes = [module, *conftests]
    seen: set[int] = set()
    names: set[str] = set()
    strings: set[str] = set()
    subprocess = False
    todo: list[tuple[ast.AST, Module]] = [(node, module)]
    for name in fixtures:
        todo += [(s.functions[name], s) for s in scopes if name in s.fixtures][:1]
    while todo:
        current, scope = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found = _names(current)
        names |= found
        strings |= _strings(current)
        subprocess = subprocess or _runs_subprocess(current)
        asked = set()
        if isinstance(current, ast.FunctionDef):
            asked = {a.arg for a in current.args.args}
        for name in found | asked:
            if name in scope.functions and (name in found or name in scope.fixtures):
                todo.append((scope.functions[name], scope))
            elif name in scope.constants and name != "pytestmark":
                strings |= _strings(scope.constants[name])
                names |= _names(scope.constants[name])
            if name in asked:  # a fixture of a conftest.py above
                todo += [(s.functions[name], s) for s in conftests if name in s.fixtures][:1]
    reasons = {f"{name}: {SLOW[name]}" for name in names if name in SLOW}
    if subprocess and (strings & RUNS or any(s.endswith(".py") for s in strings)):
        reasons.add("subprocess: runs hacrl train/eval/compare or a script")
    return reasons


def unmarked_slow_tests(path: Path, root: Path = TESTS) -> list[str]:
    """``test (reasons)`` for every test of ``path`` (under ``root``) that reaches something slow without the
    ``model`` mark."""
    module = Module.read(path)
    if module.marked:
        return []
    conftests = _conftests(path, root)
    autouse = module.autouse | {name for c in conftests for name in c.autouse}
    out = []

    def check(fn: ast.FunctionDef, owner: str, inherited: set[str], marked: bool) -> None:
        if not fn.name.startswith("test") or marked or any(_is_model_mark(d) for d in fn.decorator_list):
            return
        fixtures = {a.arg for a in fn.args.args} | _usefixtures(fn.decorator_list) | inherited
        reasons = slow_reasons(fn, fixtures, module, conftests)
        if reasons:
            out.append(f"{path.relative_to(root)}::{owner}{fn.name} ({'; '.join(sorted(reasons))})")

    base = autouse | module.module_fixtures
    for node in module.tree.body:
        if isinstance(node, ast.FunctionDef):
            check(node, "", base, False)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            marked = any(_is_model_mark(d) for d in node.decorator_list) or any(
                isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in s.targets)
                and _is_model_mark(s.value) for s in node.body)
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    check(item, f"{node.name}::", base | _usefixtures(node.decorator_list), marked)
    return out


def test_every_test_that_trains_loads_a_model_or_starts_processes_is_marked_model():
    found = [line for path in sorted(TESTS.rglob("test_*.py")) for line in unmarked_slow_tests(path)]
    assert not found, ("mark these @pytest.mark.model (or the module: pytestmark = pytest.mark.model), or make "
                       "them fast:\n" + "\n".join(found))


# ---- the reader itself, on small modules ------------------------------------------------------------------

def _write(folder: Path, text: str, conftest: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if conftest:
        (folder / "conftest.py").write_text(conftest)
    path = folder / "test_x.py"
    path.write_text(text)
    return path


def test_the_reader_follows_helpers_fixtures_and_marks(tmp_path):
    path = _write(tmp_path / "sub", """
import subprocess, sys
import pytest
from hacrl.agents.agent import load_agent

ARGS = ["train", "--preset", "tiny-test"]

def helper():
    return load_agent("a", 0, "p")

@pytest.fixture
def agent():
    return helper()

def test_pure():
    assert 1 + 1 == 2

def test_helper():
    helper()

def test_fixture(agent):
    pass

def test_conftest_fixture(trained):
    pass

def test_cli_subprocess():
    subprocess.run([sys.executable, "-m", "hacrl.cli", *ARGS])

def test_cli_listing():
    subprocess.run([sys.executable, "-m", "hacrl.cli", "presets"])

@pytest.mark.model
def test_marked():
    helper()

@pytest.mark.usefixtures("trained")
class TestRuns:
    def test_in_class(self):
        pass
""", conftest="""
import pytest
from hacrl.trainer.trainer import Trainer

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    Trainer(None, tmp_path_factory.mktemp("r")).train()
""")
    found = [line.split("::", 1)[1].split(" (")[0] for line in unmarked_slow_tests(path, tmp_path)]
    assert found == ["test_helper", "test_fixture", "test_conftest_fixture", "test_cli_subprocess",
                     "TestRuns::test_in_class"]
    path.write_text("import pytest\npytestmark = [pytest.mark.slow, pytest.mark.model]\n" + path.read_text())
    assert unmarked_slow_tests(path, tmp_path) == []
