"""bench/mechanism.py on hand-made comparison directories (a few literal eval_problems.jsonl lines, a minimal
summary.json): per-operator accuracy, trace consistency, rescue, in-window share and Δ vs gspo2x, each checked
against arithmetic done by hand. No training."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mech():
    spec = importlib.util.spec_from_file_location("bench_mechanism", ROOT / "bench" / "mechanism.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _lines(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _record(step, agent, task, ids, reward, texts=()):
    return {"step": step, "agent": agent, "task": task, "ids": ids, "reward": reward, "unscorable": [],
            "finished": [True] * len(ids), "tokens": [3] * len(ids), "texts": list(texts)}


def make_cell(root: Path, name: str, task: str, ids: list[str], finals: dict, texts: dict | None = None,
              deltas: dict | None = None) -> Path:
    """A comparison directory: arms hacpo and gspo2x, seed 0, agents a and b. ``finals[(algo, agent)]``: the
    rewards at step 30 (step 0: all zero); ``texts[(algo, agent)]``: the kept texts at step 30."""
    cell = root / name
    runs = []
    for algo in ("hacpo", "gspo2x"):
        run = cell / "runs" / algo / "seed-0"
        recs = []
        for agent in ("a", "b"):
            recs.append(_record(0, agent, task, ids, [0.0] * len(ids)))
            recs.append(_record(30, agent, task, ids, finals[algo, agent], (texts or {}).get((algo, agent), ())))
        # an eval benchmark's record and a longer-budget one are not the task's: left out
        recs.append({**_record(30, "a", task, ids, [1.0] * len(ids)), "budget": 128})
        _lines(run / "eval_problems.jsonl", recs)
        _lines(run / "metrics.jsonl", [
            {"step": 0, "eval/a/greedy_acc": 0.0},
            {"step": 1, "agent/a/rescue/b": 0.25 if algo == "hacpo" else 0.05, "agent/b/rescue/a": 0.5,
             "agent/a/cross/in_window_frac": 0.2, "agent/b/cross/in_window_frac": 0.6},
            {"step": 2, "agent/a/rescue/b": 0.9, "agent/a/cross/in_window_frac": 0.4,
             "agent/b/cross/in_window_frac": 0.8},
        ])
        runs.append({"algorithm": algo, "seed": 0, "dir": f"elsewhere/{algo}/seed-0", "status": "trained"})
    deltas = deltas or {"a": 0.05, "b": -0.02}
    summary = {"agents": {"a": "builtin:x", "b": "builtin:y"}, "algorithms": ["hacpo", "gspo2x"], "runs": runs,
               "results": {agent: {"hacpo": {"vs": {"gspo2x": {"mean": d, "interval": {"lo": d - 0.03,
                                                                                          "hi": d + 0.03}}}},
                                   "gspo2x": {"vs": {}}} for agent, d in deltas.items()}}
    (cell / "summary.json").write_text(json.dumps(summary))
    return cell


MIXED_IDS = ["mixed/10+02", "mixed/33+44", "mixed/85-07", "mixed/07-85"]


def test_parse_key_and_accuracy_by_operator(mech):
    assert mech.parse_key("mixed/07-85") == (7, "-", 85)
    assert mech.parse_key("add2/07+85") == (7, "+", 85)
    assert mech.parse_key("gsm8k/0012") is None
    # "+": 1 of 2 right, "-": 2 of 2
    assert mech.accuracy_by_operator({"ids": MIXED_IDS, "reward": [1.0, 0.0, 1.0, 1.0]}) == {"+": 0.5, "-": 1.0}


def test_per_operator_rows(mech, tmp_path):
    finals = {("hacpo", "a"): [1.0, 0.0, 1.0, 1.0], ("hacpo", "b"): [0.0, 0.0, 1.0, 0.0],
              ("gspo2x", "a"): [1.0, 1.0, 0.0, 0.0], ("gspo2x", "b"): [0.0, 0.0, 0.0, 0.0]}
    cell = make_cell(tmp_path, "sym-1.0", "mixed", MIXED_IDS, finals)
    rows = {(r["agent"], r["algorithm"]): r for r in mech.cell_rows(cell)}
    a = rows["a", "hacpo"]
    assert a["seeds"] == 1 and a["start"] == 0.0
    assert a["acc"] == 0.75  # 3 of 4
    assert a["by_op"] == {"+": 0.5, "-": 1.0}
    assert a["by_op_delta"] == {"+": -0.5, "-": 1.0}  # gspo2x: "+" 2/2, "-" 0/2
    assert rows["b", "hacpo"]["by_op"] == {"+": 0.0, "-": 0.5}
    assert rows["b", "hacpo"]["by_op_delta"] == {"+": 0.0, "-": 0.5}
    assert "by_op_delta" not in rows["a", "gspo2x"] and "delta" not in rows["a", "gspo2x"]
    # rescue: step 1's value only; in window: mean over steps 1 and 2
    assert a["rescue"] == 0.25 and rows["b", "hacpo"]["rescue"] == 0.5
    assert rows["a", "gspo2x"]["rescue"] == 0.05  # gspo2x's own 2G answers at step 1
    assert a["pair_rescue"] == rows["a", "gspo2x"]["pair_rescue"] == 0.25  # hacpo's: gspo2x shares no answers
    assert a["in_window"] == pytest.approx(0.3) and rows["b", "hacpo"]["in_window"] == pytest.approx(0.7)
    # Δ vs gspo2x and its interval come from summary.json
    assert (a["delta"], a["delta_lo"], a["delta_hi"]) == (0.05, pytest.approx(0.02), pytest.approx(0.08))
    assert "consistent" not in a  # not a traced task
    assert "| sym-1.0 | a | hacpo | 1 |" in mech.table(list(rows.values()))


def test_trace_consistency_rows(mech, tmp_path):
    ids = ["add2-trace/07+85", "add2-trace/31+42", "add2-trace/99+99", "add2-trace/50+50"]
    good = ["7+5=12,0+8+1=9>92", "1+2=3,3+4+0=7>73", "9+9=18,9+9+1=19>198"]  # texts kept for the first 3
    garbage = ["3+1=44,2+6+0=8>92", "1+2=3,3+4+0=7>73", "9+9=18,9+9+1=19>197"]
    texts = {("hacpo", "a"): good, ("hacpo", "b"): garbage, ("gspo2x", "a"): garbage, ("gspo2x", "b"): good}
    finals = {("hacpo", "a"): [1.0, 1.0, 1.0, 0.0], ("hacpo", "b"): [1.0, 1.0, 0.0, 0.0],
              ("gspo2x", "a"): [1.0, 1.0, 0.0, 0.0], ("gspo2x", "b"): [1.0, 1.0, 1.0, 0.0]}
    cell = make_cell(tmp_path, "p1-rho1", "add2-trace", ids, finals, texts)
    rows = {(r["agent"], r["algorithm"]): r for r in mech.cell_rows(cell)}
    # good: 3 of 3 consistent; garbage: only the second (1 of 3); its first has the right sum after ">" (92)
    # but a wrong trace, its third a wrong sum
    assert rows["a", "hacpo"]["consistent"] == 1.0 and rows["a", "hacpo"]["right_inconsistent"] == 0.0
    assert rows["b", "hacpo"]["consistent"] == pytest.approx(1 / 3)
    assert rows["b", "hacpo"]["right_inconsistent"] == pytest.approx(1 / 3)
    assert rows["a", "hacpo"]["consistent_delta"] == pytest.approx(2 / 3)
    assert rows["b", "hacpo"]["consistent_delta"] == pytest.approx(-2 / 3)
    assert rows["a", "hacpo"]["acc"] == 0.75 and rows["a", "hacpo"]["by_op"] is None
    assert mech.rho_of("p1-rho1") == ("p1", 1.0)


def test_cli_writes_table_json_and_both_pictures(mech, tmp_path, capsys):
    finals = {(algo, agent): [1.0, 0.0, 1.0, 0.0] for algo in ("hacpo", "gspo2x") for agent in "ab"}
    cells = [make_cell(tmp_path, "sym-1.0", "mixed", MIXED_IDS, finals)]
    ids = ["add2-trace/07+85", "add2-trace/31+42", "add2-trace/99+99", "add2-trace/50+50"]
    for rho in (0, 1):
        cells.append(make_cell(tmp_path, f"p1-rho{rho}", "add2-trace", ids, finals,
                               deltas={"a": 0.01 * rho, "b": -0.01}))
    mech.main([*map(str, cells), "--plots", str(tmp_path / "plots"), "--json", str(tmp_path / "rows.json")])
    out = capsys.readouterr().out
    assert out.count("| hacpo |") == 6 and "delta_vs_rho.png" in out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 12 and {r["cell"] for r in rows} == {"sym-1.0", "p1-rho0", "p1-rho1"}
    for name in ("delta_vs_rescue.png", "delta_vs_rho.png"):
        assert (tmp_path / "plots" / name).stat().st_size > 1000
