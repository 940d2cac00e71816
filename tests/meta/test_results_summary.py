"""docs/results-summary.md is scripts/results_summary.py's output over the committed results/: a number edited
by hand there, or a comparison regenerated without the page, fails here; every committed comparison is on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def script(load_script):
    """A fresh import each test: one test points its PAGE elsewhere."""
    return load_script("scripts/results_summary.py", "results_summary")


def _summary(source: str) -> dict:
    return json.loads((ROOT / source / "summary.json").read_text(encoding="utf-8"))


def _signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def test_the_page_is_the_scripts_output(script):
    assert script.main(["--check"]) == 0, "run: python scripts/results_summary.py"


def test_a_number_changed_by_hand_is_caught(script, tmp_path):
    page = tmp_path / "results-summary.md"
    page.write_text(script.page().replace("0.646 ± 0.015", "0.650 ± 0.014", 1), encoding="utf-8")
    script.PAGE = str(page)  # an absolute path: ROOT / PAGE is the file itself
    assert script.main(["--check"]) == 1


def test_every_committed_comparison_has_its_table(script):
    """Each directory under results/ with a summary.json, the mechanism and trust cells included, has a heading
    and its command on the page."""
    dirs = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "results").rglob("summary.json")
                  if "runs" not in p.relative_to(ROOT).parts)
    assert "results/mechanism/p1-rho1" in dirs and "results/trust/high" in dirs
    assert script.comparisons() == dirs
    page = script.page()
    for d in dirs:
        assert f"`{_summary(d)['command']}`" in page, d
        assert f"[{d}/report.md](../{d}/report.md)" in page, d


def test_every_table_reads_its_numbers_from_summary_json(script):
    """The tiny comparison's weaker agent: the page's cells are summary.json's values, rounded."""
    summary = _summary("results/tiny-model-evidence")
    lines = script.agent_table(summary, "llama-bpe")
    gspo2x = next(line for line in lines if line.startswith("| `gspo2x`"))
    final = summary["results"]["llama-bpe"]["gspo2x"]["final"]
    d = summary["results"]["llama-bpe"]["hacpo"]["vs"]["gspo2x"]["interval"]
    s = summary["results"]["llama-bpe"]["hacpo"]["vs"]["gspo2x"]["seed_interval"]
    assert f"{final['mean']:.3f} ± {final['sd']:.3f}" in gspo2x
    assert f"[{_signed(d['lo'])}, {_signed(d['hi'])}]" in gspo2x
    assert f"[{_signed(s['lo'])}, {_signed(s['hi'])}]" in gspo2x
    partner = summary["results"]["qwen-char"]["hacpo"]["start"]
    below = sum(v < partner for v in final["by_seed"].values())
    assert f"| {below} of {len(final['by_seed'])} |" in gspo2x


def test_a_cell_table_has_both_agents_and_trust_as_reference(script):
    """A trust cell: one table, the weaker agent first, `trust − it` with both intervals from summary.json."""
    summary = _summary("results/trust/p1-rho1")
    lines = script.cell_table(summary)
    weak, strong = sorted(summary["agents"], key=lambda a: summary["results"][a]["trust"]["start"])
    assert lines[0].startswith(f"| algorithm | `{weak}` final | trust − it | seed-level | `{strong}` final |")
    row = next(line for line in lines if line.startswith("| `gspo2x`"))
    for agent in (weak, strong):
        vs = summary["results"][agent]["trust"]["vs"]["gspo2x"]
        iv, si = vs["interval"], vs["seed_interval"]
        assert f"{_signed(iv['mean'])} [{_signed(iv['lo'])}, {_signed(iv['hi'])}]" in row
        assert f"[{_signed(si['lo'])}, {_signed(si['hi'])}]" in row


def test_a_pair_held_the_other_way_round_is_negated(script):
    """hacpo − naive on sharing-methods-tiny is only in summary.json as naive − hacpo: the page shows its
    negation, the bootstrap's bounds swapped."""
    results = _summary("results/sharing-methods-tiny")["results"]["llama-bpe"]
    assert "naive" not in results["hacpo"]["vs"]
    theirs = results["naive"]["vs"]["hacpo"]
    boot, seed = script.paired(results, "hacpo", "naive")
    assert boot == pytest.approx({"mean": -theirs["interval"]["mean"], "lo": -theirs["interval"]["hi"],
                                  "hi": -theirs["interval"]["lo"]})
    assert seed["lo"] == pytest.approx(-theirs["seed_interval"]["hi"])


def test_without_a_seed_level_interval_it_is_computed_from_the_per_seed_finals(script):
    """results/smollm2-state predates seed_interval: the t-interval over its per-seed finals, mean ± t·se."""
    from scipy.stats import t

    results = _summary("results/smollm2-state")["results"]["smollm2"]
    vs = results["hacpo"]["vs"]["gspo"]
    boot, seed = script.paired(results, "hacpo", "gspo")
    assert boot is None
    half = t.ppf(0.975, vs["n"] - 1) * vs["se"]
    assert (seed["mean"], seed["lo"], seed["hi"]) == pytest.approx((vs["mean"], vs["mean"] - half, vs["mean"] + half))
