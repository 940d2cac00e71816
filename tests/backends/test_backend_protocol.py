"""The driver calls the agents' workers through typed methods (``hacrl.backends.base.Backend``), never by a worker
method's name in a string: every backend in the registry has every method of the protocol with its signature, the
registry and the config's ``backend.name`` list the same names, and no module outside the backends' own code names
a worker method in a string (so "go to definition" follows a step across the call)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import get_args

import pytest

import hacrl
from hacrl.backends.base import Backend
from hacrl.backends.registry import BACKENDS
from hacrl.config.schema import BackendConfig

SRC = Path(hacrl.__file__).parent
# where a worker method's name may be a string: the worker itself and the backends that dispatch to it
IMPLEMENTATIONS = {SRC / "backends" / "worker.py", SRC / "backends" / "local.py", SRC / "backends" / "ray_actors.py"}
# the worker class's public methods, read from its source (no import: building a worker loads a model, and the
# marker check in tests/meta/test_markers.py reads a test naming the class as one that builds it)
WORKER_METHODS = {item.name for node in ast.parse((SRC / "backends" / "worker.py").read_text()).body
                  if isinstance(node, ast.ClassDef) and node.name == "AgentWorker"
                  for item in node.body if isinstance(item, ast.FunctionDef) and not item.name.startswith("_")}
PROTOCOL_METHODS = [name for name, value in vars(Backend).items()
                    if inspect.isfunction(value) and not name.startswith("_")]


def test_the_protocol_names_the_calls_the_driver_makes():
    assert PROTOCOL_METHODS == ["info", "rollout", "update", "generate_answers", "save", "submit_rollout",
                                "submit_update", "submit_generate_answers", "wait_any", "close"]
    # each call is a worker method of the same name (submit_x runs x on one agent)
    assert {m.removeprefix("submit_") for m in PROTOCOL_METHODS} - {"wait_any"} <= WORKER_METHODS


@pytest.mark.parametrize("name", BACKENDS.names())
def test_every_registered_backend_has_every_method_of_the_protocol_with_its_signature(name):
    cls = BACKENDS.get(name)
    assert cls.name == name
    for method in [*PROTOCOL_METHODS, "__init__"]:
        want = inspect.signature(getattr(Backend, method))
        got = inspect.signature(getattr(cls, method))
        assert [(p.name, p.kind) for p in got.parameters.values()] == \
            [(p.name, p.kind) for p in want.parameters.values()], f"{name}.{method}{got} vs Backend.{method}{want}"


def test_the_registry_and_the_config_list_the_same_backends():
    assert sorted(BACKENDS.names()) == sorted(get_args(BackendConfig.model_fields["name"].annotation))


def string_named_worker_calls(tree: ast.AST) -> list[str]:
    """Calls that name a worker method in a string, as ``line: expression``: ``getattr(x, "update")``,
    ``x.call("update", ...)`` or ``x.submit(k, "rollout", ...)``, and any call on a ``backend`` with such a string."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        named = [a.value for a in node.args if isinstance(a, ast.Constant) and a.value in WORKER_METHODS]
        func = node.func
        on_backend = isinstance(func, ast.Attribute) and "backend" in ast.unparse(func.value)
        dispatch = isinstance(func, ast.Attribute) and func.attr in {"call", "submit"} or \
            isinstance(func, ast.Name) and func.id == "getattr"
        if named and (on_backend or dispatch):
            found.append((node.lineno, f"{node.lineno}: {ast.unparse(node)}"))
    return [hit for _, hit in sorted(found)]


def test_no_worker_call_is_named_by_a_string_outside_the_backends():
    found = [f"{path.relative_to(SRC)}:{hit}" for path in sorted(SRC.rglob("*.py")) if path not in IMPLEMENTATIONS
             for hit in string_named_worker_calls(ast.parse(path.read_text(encoding="utf-8")))]
    assert not found, "worker calls named by a string (use the Backend's typed methods):\n" + "\n".join(found)


def test_the_string_call_checker_sees_each_form():
    tree = ast.parse('self.backend.call("update", [(r,)] * 2)\nbackend.submit(k, "rollout", p)\n'
                     'getattr(w, "generate_answers")(p)\nself.backend.run("save", x)\n'
                     'self.backend.update(r)\ntimed(t, "rollout")\ngetattr(e, "sleep", None)\n')
    assert [hit.split(":")[0] for hit in string_named_worker_calls(tree)] == ["1", "2", "3", "4"]
