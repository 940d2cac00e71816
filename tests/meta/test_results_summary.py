"""docs/results-summary.md is scripts/results_summary.py's output over the committed results/: a number edited
by hand there, or a comparison regenerated without the page, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def script(load_script):
    """A fresh import each test: one test points its PAGE elsewhere."""
    return load_script("scripts/results_summary.py", "results_summary")


def test_the_page_is_the_scripts_output(script):
    assert script.main(["--check"]) == 0, "run: python scripts/results_summary.py"


def test_a_number_changed_by_hand_is_caught(script, tmp_path):
    page = tmp_path / "results-summary.md"
    page.write_text(script.page().replace("0.646 ± 0.015", "0.650 ± 0.014", 1), encoding="utf-8")
    script.PAGE = str(page)  # an absolute path: ROOT / PAGE is the file itself
    assert script.main(["--check"]) == 1


def test_every_table_reads_its_numbers_from_summary_json(script):
    """The tiny comparison's weaker agent: the page's cells are summary.json's values, rounded."""
    import json

    summary = json.loads((ROOT / "results/tiny-model-evidence/summary.json").read_text(encoding="utf-8"))
    lines = script.agent_table(summary, "llama-bpe")
    gspo2x = next(line for line in lines if line.startswith("| `gspo2x`"))
    final = summary["results"]["llama-bpe"]["gspo2x"]["final"]
    d = summary["results"]["llama-bpe"]["hacpo"]["vs"]["gspo2x"]["interval"]
    assert f"{final['mean']:.3f} ± {final['sd']:.3f}" in gspo2x
    assert f"[{d['lo']:+.3f}, {d['hi']:+.3f}]".replace("-", "−") in gspo2x
    partner = summary["results"]["qwen-char"]["hacpo"]["start"]
    below = sum(v < partner for v in final["by_seed"].values())
    assert f"| {below} of {len(final['by_seed'])} |" in gspo2x
