"""The ingredients' values are listed once, in the config schema (``AlgorithmConfig``'s Literal types): the
algorithms' ``INGREDIENTS`` and ``compose``'s check read them from there, each implementation registry implements
exactly those, and no module keeps a copy of a whole list by hand. So a new value is its Literal entry plus its
implementation, and the tests below say which one is missing."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Literal, get_args

import pytest
from pydantic import create_model

import hacrl
from hacrl.config import AlgorithmConfig
from hacrl.core.partner import NEGATIVE_FILTERS
from hacrl.learner import algorithms
from hacrl.learner.algorithms import INGREDIENTS, PARTNER_WEIGHT_LOSS, accepted_values, compose
from hacrl.learner.sharing import ADVANTAGES, ANSWER_SELECTIONS, PROMPT_GATES

SRC = Path(hacrl.__file__).parent
# each ingredient's implementation, keyed by value (partner_old is read where the ratio is built: no registry)
IMPLEMENTED = {"share_prompts": PROMPT_GATES.names(), "partner_answers": ANSWER_SELECTIONS.names(),
               "partner_weight": list(PARTNER_WEIGHT_LOSS), "advantage": ADVANTAGES.names(),
               "negatives": NEGATIVE_FILTERS.names()}


def schema_values(key: str) -> tuple[str, ...]:
    (literal,) = [a for a in get_args(AlgorithmConfig.model_fields[key].annotation) if a is not type(None)]
    return get_args(literal)


@pytest.mark.parametrize("key", list(INGREDIENTS))
def test_the_ingredients_values_are_the_schemas(key):
    assert INGREDIENTS[key] == schema_values(key)


@pytest.mark.parametrize("key", sorted(IMPLEMENTED))
def test_every_value_the_config_accepts_is_implemented_and_no_other(key):
    assert sorted(IMPLEMENTED[key]) == sorted(INGREDIENTS[key]), \
        f"algorithm.{key}: the config accepts {INGREDIENTS[key]}, the implementation has {IMPLEMENTED[key]}"


def test_a_value_added_to_the_schema_is_one_compose_accepts(monkeypatch):
    """Adding a value to the Literal is all the listing it needs: ``accepted_values`` (and so ``INGREDIENTS``, and
    ``compose``'s check) reads it from the schema."""
    grown = create_model("Grown", __base__=AlgorithmConfig,
                         negatives=(Literal[(*INGREDIENTS["negatives"], "newest")] | None, None))  # type: ignore[misc]
    monkeypatch.setattr(algorithms, "AlgorithmConfig", grown)
    assert accepted_values("negatives") == (*INGREDIENTS["negatives"], "newest")
    monkeypatch.setitem(INGREDIENTS, "negatives", accepted_values("negatives"))
    partner = algorithms.ALGORITHMS.get("ftis")
    assert compose(partner, negatives="newest").negatives == "newest"
    with pytest.raises(ValueError, match="valid values: keep, drop, veto, newest"):
        compose(partner, negatives="oldest")


def full_copies(tree: ast.AST) -> list[str]:
    """Tuples, lists and sets of strings holding every value of an ingredient, as ``line: ingredient``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            found += [f"{node.lineno}: {key}" for key, values in INGREDIENTS.items()
                      if len(values) > 2 and set(values) <= strings]
    return found


def test_each_ingredients_values_are_listed_once_in_the_source_in_the_schemas_literal():
    found = [f"{path.relative_to(SRC)}:{hit}" for path in sorted(SRC.rglob("*.py"))
             for hit in full_copies(ast.parse(path.read_text(encoding="utf-8")))]
    for key in INGREDIENTS:
        where = [hit for hit in found if hit.endswith(f": {key}")]
        assert len(where) == 1 and where[0].startswith("config/schema.py:"), \
            f"algorithm.{key}'s values listed again (read hacrl.learner.algorithms.INGREDIENTS): {where}"


def test_the_copy_checker_sees_one():
    assert full_copies(ast.parse('x = ("keep", "drop", "veto")\ny = ["drop", "keep"]\n')) == ["1: negatives"]
