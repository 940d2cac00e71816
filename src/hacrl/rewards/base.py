"""The reward registry and the resolver for reward specs.

A reward function has the signature ``(completion: str, sample: dict) -> float | None`` (:data:`RewardFn`;
what ``sample`` holds and what to return: the contract in :mod:`hacrl.rewards`). ``sample`` holds at least
``answer`` (the ground-truth string). ``None`` means "unscorable, skip this answer"; it is not the same as
a wrong answer (0.0).

A *spec* names a reward: a registry name (``"exact"``, ``"numeric"``, ``"math"``), or a user function
given as ``"package.module:function"`` or ``"path/to/file.py:function"``. Specs are plain strings, so
they travel to worker processes (see :mod:`hacrl.rewards.scorer`), which resolve them again there.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import numbers
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hacrl.registry import Registry

#: ``fn(completion, sample) -> float | None``: an answer's text and its problem's ``Problem.as_sample()``
#: in, a score or None ("unscorable") out; the contract in :mod:`hacrl.rewards`.
RewardFn = Callable[[str, dict[str, Any]], "float | None"]

REWARDS: Registry[RewardFn] = Registry("reward")

_FILE_MODULE_PREFIX = "_hacrl_reward_file_"
_FILE_OF_MODULE: dict[str, str] = {}  # synthetic module name -> absolute path of the file it came from

_SPEC_HELP = "give a registry name, 'package.module:function' or 'path/to/file.py:function'"

#: ``python:<name>`` specs: functions handed to this process's Python API (``hacrl.train``) that have no
#: importable spec (a lambda, a closure, a function of a notebook); the scorer ships them to its workers by
#: pickling them with cloudpickle (see :mod:`hacrl.rewards.scorer`)
PYTHON_PREFIX = "python:"
_PYTHON_FNS: dict[str, RewardFn] = {}


def register_python(fn: Callable[..., Any]) -> str:
    """A ``python:<name>`` spec that resolves to ``fn`` in this process (and, pickled, in its reward workers).

    >>> spec = register_python(lambda c, s: 1.0)
    >>> spec.startswith("python:<lambda>-"), get_reward(spec)("x", {}), register_python(lambda c, s: 1.0) == spec
    (True, 1.0, True)
    """
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    spec = f"{PYTHON_PREFIX}{name}-{_fingerprint(fn)}"
    _PYTHON_FNS[spec] = fn
    return spec


def _fingerprint(fn: Callable[..., Any]) -> str:
    """A short hash of a function's code, constants, defaults and closure values: the same function gives
    the same ``python:`` name in another process (so a run resumes with it), another closure another."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return f"{id(fn):x}"
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(repr(cell.cell_contents))
        except ValueError:  # an empty cell
            cells.append("<empty>")
    parts = [code.co_code.hex(), repr(code.co_consts), repr(getattr(fn, "__defaults__", None)), *cells]
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()[:10]


def get_reward(spec: str) -> RewardFn:
    """Resolve a reward spec to a callable; a ValueError names the spec and the fix.

    >>> get_reward("exact")("42", {"answer": "42"})
    1.0
    >>> get_reward("hacrl.rewards.basic:numeric")("so 1,234.", {"answer": "#### 1234"})
    1.0
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"reward spec must be a non-empty string, got {spec!r}; {_SPEC_HELP}")
    spec = spec.strip()
    if spec in REWARDS:
        return REWARDS.get(spec)
    if spec.startswith(PYTHON_PREFIX):
        if spec not in _PYTHON_FNS:
            raise ValueError(f"reward {spec!r} was a Python function handed to hacrl.train in another process; "
                             f"{_SPEC_HELP} (a function defined in a module or file keeps one)")
        return _PYTHON_FNS[spec]
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"unknown reward {spec!r}; registered: {', '.join(REWARDS.names())}; "
                         f"or {_SPEC_HELP}")
    module = _load_file(spec, target) if _looks_like_path(target) else _import_module(spec, target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            where = getattr(module, "__file__", None) or target
            raise ValueError(f"reward {spec!r}: {where} has no attribute {attr!r}; callables there: "
                             f"{', '.join(public) or '(none)'}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"reward {spec!r}: {attr!r} is a {type(obj).__name__}, not callable; point the "
                         f"spec at a function (completion: str, sample: dict) -> float | None")
    return obj


def spec_of(fn: RewardFn) -> str | None:
    """A spec string that resolves back to ``fn`` in a fresh process, or None if there is none.

    Registry entries give their name; module-level functions give ``module:qualname``; functions loaded
    from a file spec (or defined in a script run as ``__main__``) give ``path.py:qualname``. Lambdas,
    closures and bound methods of local objects have no spec.

    >>> spec_of(get_reward("exact"))
    'exact'
    >>> spec_of(lambda c, s: 1.0) is None
    True
    """
    for name in REWARDS:
        if REWARDS.get(name) is fn:
            return name
    for name, known in _PYTHON_FNS.items():
        if known is fn:
            return name
    module_name, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module_name or not qualname or "<" in qualname:
        return None
    if module_name in _FILE_OF_MODULE:
        spec = f"{_FILE_OF_MODULE[module_name]}:{qualname}"
    elif module_name == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if not main_file:
            return None
        spec = f"{os.path.abspath(main_file)}:{qualname}"
    else:
        spec = f"{module_name}:{qualname}"
    try:
        same = module_name == "__main__" or get_reward(spec) is fn
    except ValueError:
        return None
    return spec if same else None


def _looks_like_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _import_module(spec: str, name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"reward {spec!r}: cannot import module {name!r} ({exc}); put it on PYTHONPATH "
                         f"(or install it), or give the file instead: 'path/to/file.py:function'") from exc
    except Exception as exc:
        raise ValueError(f"reward {spec!r}: importing module {name!r} failed with "
                         f"{type(exc).__name__}: {exc}; fix the module") from exc


def _load_file(spec: str, target: str) -> Any:
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"reward {spec!r}: file {str(path)!r} not found; give an existing .py file as "
                         f"'path/to/file.py:function' (relative paths are from {os.getcwd()!r})")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"{_FILE_MODULE_PREFIX}{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"reward {spec!r}: {str(path)!r} cannot be loaded as a Python module; "
                         f"give a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before exec, so the module's own functions pickle by reference
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ValueError(f"reward {spec!r}: executing {str(path)!r} failed with "
                         f"{type(exc).__name__}: {exc}; fix the file") from exc
    _FILE_OF_MODULE[name] = str(path)
    return module


def check_value(value: Any) -> tuple[str, float | None, str | None]:
    """Classify a reward's return value as (kind, reward or None, message or None).

    >>> check_value(1), check_value(None)[0], check_value(float("nan"))[0], check_value("1")[0]
    (('ok', 1.0, None), 'none', 'nan', 'error')
    """
    if value is None:
        return "none", None, "returned None"
    if not isinstance(value, numbers.Real):
        return "error", None, f"returned {type(value).__name__}, expected a float or None"
    try:
        reward = float(value)
    except (OverflowError, ValueError) as exc:
        return "error", None, f"returned {type(value).__name__} that is not a float: {exc}"
    if not math.isfinite(reward):
        return "nan", None, f"returned {reward}"
    return "ok", reward, None
