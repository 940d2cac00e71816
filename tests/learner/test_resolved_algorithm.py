"""One place resolves a run's algorithm (``hacrl.learner.algorithms.resolve``: the name with the config's
ingredients): every reader takes the composed algorithm, so a window, a plan or a report never describes the
bare name's loss when the ingredients chose another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import hacrl
from hacrl.config import AlgorithmConfig, ConfigError, load_config
from hacrl.learner.algorithms import ALGORITHMS, PARTNER_WEIGHT_LOSS, derive_for, resolve
from hacrl.learner.window import LearnerWindow
from hacrl.report.compare import run_comparison
from hacrl.report.reading import algorithm_of

SRC = Path(hacrl.__file__).parent
RESOLVER = SRC / "learner" / "algorithms.py"


def _bare_name_lookups(path: Path) -> list[str]:
    """``ALGORITHMS.get(x)`` / ``ALGORITHMS[x]`` with ``x`` not a string literal, as ``file:line``: a run's
    algorithm looked up by its bare name (a fixed name such as the memory probe's ``"gspo"`` passes)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target, args = node.func.value, node.args
        elif isinstance(node, ast.Subscript):
            target, args = node.value, [node.slice]
        else:
            continue
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        literal = bool(args) and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str)
        if name == "ALGORITHMS" and not literal:
            out.append(f"{path.relative_to(SRC.parent)}:{node.lineno}")
    return out


def test_no_module_but_the_resolver_looks_an_algorithm_up_by_its_bare_name():
    found = [hit for path in sorted(SRC.rglob("*.py")) if path != RESOLVER for hit in _bare_name_lookups(path)]
    assert found == [], f"use hacrl.learner.algorithms.resolve(cfg.algorithm) (or report.reading.algorithm_of): {found}"
    assert _bare_name_lookups(RESOLVER)  # the scan sees a lookup where there is one


@pytest.mark.parametrize("name", [*ALGORITHMS.names(), "gspo-x3"])
def test_a_named_algorithm_without_ingredients_resolves_to_the_registrys(name):
    assert resolve(AlgorithmConfig(name=name)) is ALGORITHMS.get(name)
    assert algorithm_of(name) is ALGORITHMS.get(name)


# ---- hacpo-adaptive with a loss that has no cross window: refused ----------------------------------------------

@pytest.mark.parametrize("weight", sorted(set(PARTNER_WEIGHT_LOSS) - {"hacpo"}))
def test_hacpo_adaptive_refuses_a_partner_weight_without_its_window_in_one_line(weight):
    cfg = load_config("tiny-test", overrides=["algorithm.name=hacpo-adaptive", f"algorithm.partner_weight={weight}"])
    with pytest.raises(ValueError, match=rf"^algorithm.partner_weight={weight}: hacpo-adaptive adapts HACPO's cross "
                                         r"window, .* leave partner_weight out or compose from hacpo$") as info:
        resolve(cfg.algorithm)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=f"^algorithm.partner_weight={weight}: hacpo-adaptive"):
        derive_for(cfg)  # a worker built on its own (tests, benchmarks) resolves it too


def test_hacpo_adaptive_keeps_its_window_under_hacpos_own_weight():
    cfg = load_config("tiny-test", overrides=["algorithm.name=hacpo-adaptive", "algorithm.partner_weight=hacpo",
                                              "algorithm.share_prompts=learner_failed"])
    window = LearnerWindow.for_run(cfg, 0)
    assert window is not None and window.bounds() == [pytest.approx(0.8)] * 2  # ℓ_0 = 1 − δ until ratios are seen


@pytest.mark.model  # it builds a Trainer (which stops before loading a model)
def test_the_trainer_refuses_hacpo_adaptive_with_gspos_loss_before_loading_anything(tmp_path):
    from hacrl.trainer.trainer import Trainer

    cfg = load_config("tiny-test", overrides=["algorithm.name=hacpo-adaptive", "algorithm.partner_weight=ratio"])
    with pytest.raises(ConfigError, match="^algorithm.partner_weight=ratio: hacpo-adaptive adapts"):
        Trainer(cfg, tmp_path)
    assert not any(tmp_path.iterdir())


def test_compare_refuses_the_label_before_anything_trains(tmp_path):
    with pytest.raises(ConfigError, match=r"^--algos 'hacpo-adaptive@partner_weight=ratio': "
                                          r"algorithm.partner_weight=ratio: hacpo-adaptive adapts"):
        run_comparison("tiny-test", "hacpo,hacpo-adaptive@partner_weight=ratio", 1, [], tmp_path / "cmp",
                       log=lambda _: None, dry_run=True)
    with pytest.raises(ValueError, match="^algorithm.partner_weight=ratio: hacpo-adaptive adapts"):
        algorithm_of("hacpo-adaptive@partner_weight=ratio")


@pytest.mark.parametrize(("label", "message"), [
    ("naive@trust_cut=0.5", "algorithm.trust_cut=0.5: naive holds no trust to cut"),
    ("trust@trust_cut_to=hacpo", "algorithm.trust_cut_to=hacpo: nothing is ever cut with trust_cut 0"),
])
def test_compare_refuses_a_setting_the_arms_algorithm_cannot_read_before_anything_trains(tmp_path, label, message):
    # the trainer's own check (check_run), run on every arm at the start: before, a dry run passed these and the
    # comparison failed only when it reached that arm, after the arms before it had trained
    with pytest.raises(ConfigError, match=rf"^--algos '{re.escape(label)}': {message}"):
        run_comparison("tiny-test", f"hacpo,{label}", 1, [], tmp_path / "cmp", log=lambda _: None, dry_run=True)
    assert not (tmp_path / "cmp").exists()


# ---- the readers take the composed algorithm -------------------------------------------------------------------

def test_the_adaptive_window_follows_the_composed_loss():
    # algorithm.cross_window=adaptive: hacpo's loss has a window to adapt; with partner_weight=ratio the loss is
    # GSPO's, which reads no cross_lower, so no window is kept (nor logged), as for gspo
    adaptive = ["algorithm.name=hacpo", "algorithm.cross_window=adaptive"]
    assert LearnerWindow.for_run(load_config("tiny-test", overrides=adaptive), 0) is not None
    composed = load_config("tiny-test", overrides=[*adaptive, "algorithm.partner_weight=ratio"])
    assert resolve(composed.algorithm).loss == "gspo"
    assert LearnerWindow.for_run(composed, 0) is None


def test_a_compare_label_resolves_its_ingredients_and_ignores_other_settings():
    a = algorithm_of("hacpo@delta=0.6@partner_weight=ratio@trainer.lr=1e-4")
    assert (a.name, a.partner_weight, a.loss, a.cross_as_own) == ("hacpo", "ratio", "gspo", True)
    cfg = load_config("tiny-test", overrides=["algorithm.delta=0.6", "algorithm.partner_weight=ratio"])
    assert a == resolve(cfg.algorithm)  # as the trainer resolves the run's config
    assert algorithm_of("luffy@task.fewshot=3") is ALGORITHMS.get("luffy")

