"""bench/e4_partner.py, E4's partner pre-flight: its variants are the recipes docs/results/mechanism.md §12.8 names, the one
chosen is the shipped unfaithful copy (same cache hash), and a wrong variant is a one-line error. No model is made."""

from __future__ import annotations

import pytest

from hacrl.agents import gguf


@pytest.fixture(scope="module")
def pre(load_script):
    return load_script("bench/e4_partner.py", "bench_e4_partner")


def _hash(recipe: dict) -> str:
    gguf.SFT_RECIPES["probe"] = recipe
    try:
        return gguf.sft_cache_name("probe").rsplit("-", 1)[1]
    finally:
        del gguf.SFT_RECIPES["probe"]


def test_variants_are_the_recipes_the_study_names(pre):
    v = pre.VARIANTS
    steps = {k: r["examples"] * r["epochs"] // r["batch_size"] for k, r in v.items()}
    assert steps == {"unf-8": 8, "unf-e4": 32, "unf-x256": 32, "unf-x256e4": 128, "faithful-x256": 32}
    assert all(r["equation"] == "unfaithful" for k, r in v.items() if k.startswith("unf-"))
    assert "equation" not in v["faithful-x256"]
    # the chosen variant is the shipped copy: the same recipe, so the same cache directory
    assert v["unf-x256e4"] == gguf.SFT_RECIPES[gguf.SMOLLM2_UNFAITHFUL]
    assert gguf.sft_cache_name(gguf.SMOLLM2_UNFAITHFUL).endswith(_hash(v["unf-x256e4"]))
    # and the 8-step variant is the faithful recipe on unfaithful answers, nothing else changed
    assert {k: x for k, x in v["unf-8"].items() if k != "equation"} == gguf.SFT_RECIPE


def test_unknown_variant_is_one_line(pre, capsys):
    with pytest.raises(SystemExit):
        pre.main(["nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("unknown variant 'nope'; known: unf-8, unf-e4, unf-x256, unf-x256e4, faithful-x256")
