"""docs/results-tallies.md is scripts/results_tallies.py's output over the committed results/: a number edited by
hand there, or a cell's comparison regenerated without the page, fails here. The script reads the cells it lists,
never a glob, so a cell whose runs are still coming in cannot change the page under the tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def script(load_script):
    """A fresh import each test: one test points its PAGE elsewhere."""
    return load_script("scripts/results_tallies.py", "results_tallies")


@pytest.fixture(scope="module")
def made() -> str:
    """The page as the script makes it now, made once for the module (reading trust's runs takes seconds)."""
    spec = importlib.util.spec_from_file_location("results_tallies_once", ROOT / "scripts/results_tallies.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.page()


def test_the_page_is_the_scripts_output(made):
    assert (ROOT / "docs/results-tallies.md").read_text(encoding="utf-8") == made, \
        "run: python scripts/results_tallies.py"


def test_check_fails_on_a_number_changed_by_hand(script, made, tmp_path, monkeypatch):
    page = tmp_path / "results-tallies.md"
    row = next(line for line in made.splitlines() if line.startswith("| `trust` |"))  # trust's shortfall tally
    cells = row.split(" | ")
    cells[2] = f"{float(cells[2]) + 0.001:.3f}"  # its mean shortfall, moved by 0.001
    page.write_text(made.replace(row, " | ".join(cells), 1), encoding="utf-8")
    monkeypatch.setattr(script, "page", lambda: made)
    script.PAGE = str(page)  # an absolute path: ROOT / PAGE is the file itself
    assert script.main(["--check"]) == 1
    page.write_text(made, encoding="utf-8")
    assert script.main(["--check"]) == 0


def test_every_listed_cell_is_a_finished_comparison(script):
    """Each cell the page reads has its summary.json, and the trust cells hold trust and every fixed arm."""
    for study, cells in (("mechanism", script.MECHANISM_CELLS), ("trust", script.TRUST_CELLS)):
        for cell in cells:
            assert (ROOT / "results" / study / cell / "summary.json").is_file(), f"results/{study}/{cell}"
    trust = script._load("bench/trust_study.py", "bench_trust_study")
    for cell in script.TRUST_CELLS:
        algorithms = trust.read_summary(ROOT / "results" / "trust" / cell)["algorithms"]
        assert {"trust", *trust.FIXED} <= set(algorithms), cell
        assert script.TRUST_VARIANT in algorithms or cell not in script.VARIANT_CELLS, cell
    assert set(script.VARIANT_CELLS) <= set(script.TRUST_CELLS)


def test_the_tally_counts_are_the_bench_scripts(script, made):
    """The page's count line is bench/mechanism.py's tally over the listed cells, in words."""
    mech = script._load("bench/mechanism.py", "bench_mechanism")
    counts = mech.tally([ROOT / "results" / "mechanism" / c for c in script.MECHANISM_CELLS], "hacpo", "naive")
    n = sum(map(len, counts.values()))
    assert (f"hacpo − naive over {n} agent-cells: ahead for {len(counts['ahead'])} of {n}, behind for "
            f"{len(counts['behind'])} of {n}") in made
