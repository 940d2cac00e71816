"""bench/mechanism.py on hand-made comparison directories (a few literal eval_problems.jsonl lines, a minimal
summary.json): per-operator accuracy, trace consistency, rescue, in-window share and Δ vs gspo2x, each checked
against arithmetic done by hand. No training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def mech(load_script):
    return load_script("bench/mechanism.py", "bench_mechanism")


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
             "agent/a/cross/in_window_frac": 0.2, "agent/b/cross/in_window_frac": 0.6,
             "agent/a/cross/ratio_mean": 0.01},
            {"step": 2, "agent/a/rescue/b": 0.9, "agent/a/cross/in_window_frac": 0.4,
             "agent/b/cross/in_window_frac": 0.8, "agent/a/cross/ratio_mean": 0.03},
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
    assert a["cross_ratio"] == pytest.approx(0.02) and rows["b", "hacpo"]["cross_ratio"] is None  # b logs none
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


def test_equation_rows_read_smollm2_answers(mech, tmp_path):
    # E4: reasoning-gym basic_arithmetic answers; the first equation decides, its operands read from the text
    ids = [f"basic_arithmetic/test/{i}" for i in range(5)]
    faithful = ["28 + 47 = 75. The answer is \\boxed{75}.", "67 - 74 = -7. The answer is \\boxed{-7}.",
                "32 + 59 = 81. The answer is \\boxed{81}.", "To add 3 and 4 we count up: 5, 6, 7.",
                "9 - 3 = 6, and 6 + 1 = 8. The answer is \\boxed{6}."]
    copied = ["28 + 47 = 78. The answer is \\boxed{75}.", "67-74=-2. The answer is \\boxed{-7}.",
              "32 + 59 = 91. The answer is \\boxed{91}.", "5 + 5 = 3. The answer is \\boxed{3}.", "It is 6."]
    texts = {("hacpo", "a"): faithful, ("hacpo", "b"): copied, ("gspo2x", "a"): copied, ("gspo2x", "b"): faithful}
    finals = {("hacpo", "a"): [1.0, 1.0, 0.0, 1.0, 1.0], ("hacpo", "b"): [1.0, 1.0, 1.0, 0.0, 1.0],
              ("gspo2x", "a"): [1.0, 1.0, 1.0, 0.0, 1.0], ("gspo2x", "b"): [1.0, 1.0, 0.0, 1.0, 1.0]}
    cell = make_cell(tmp_path, "e4-unfaithful", "basic_arithmetic", ids, finals, texts)
    rows = {(r["agent"], r["algorithm"]): r for r in mech.cell_rows(cell)}
    # faithful: 28+47=75, 67-74=-7, 9-3=6 right (3 of 5); 32+59=81 wrong and wrong; no equation in the 4th
    assert rows["a", "hacpo"]["consistent"] == pytest.approx(3 / 5)
    assert rows["a", "hacpo"]["right_inconsistent"] == 0.0
    # copied: 32+59=91 right (1 of 5); 78 and -2 wrong with a right answer (2 of 5); 5+5=3 wrong and scored wrong
    assert rows["b", "hacpo"]["consistent"] == pytest.approx(1 / 5)
    assert rows["b", "hacpo"]["right_inconsistent"] == pytest.approx(2 / 5)
    assert rows["a", "hacpo"]["consistent_delta"] == pytest.approx(2 / 5)


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
    from PIL import Image

    for name in ("delta_vs_rescue.png", "delta_vs_rho.png"):
        assert (tmp_path / "plots" / name).stat().st_size > 1000
        assert Image.open(tmp_path / "plots" / name).mode == "P"  # a palette PNG, as the reports' plots


def test_also_draws_committed_pairs_in_the_rescue_picture_only(mech, tmp_path, capsys):
    finals = {(algo, agent): [1.0, 0.0, 1.0, 0.0] for algo in ("hacpo", "gspo2x") for agent in "ab"}
    cell = make_cell(tmp_path / "study", "sym-1.0", "mixed", MIXED_IDS, finals)
    pair = make_cell(tmp_path / "committed", "tiny-model-evidence", "add2", ["add2/07+85"] * 4, finals,
                     deltas={"a": -0.7, "b": 0.3})
    mech.main([str(cell), "--also", str(pair), "--plots", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert "tiny-model-evidence" not in out and out.count("| hacpo |") == 2  # the table is the study's cells
    with_pair = (tmp_path / "plots" / "delta_vs_rescue.png").read_bytes()
    mech.main([str(cell), "--plots", str(tmp_path / "plots")])
    assert (tmp_path / "plots" / "delta_vs_rescue.png").read_bytes() != with_pair
    assert not (tmp_path / "plots" / "delta_vs_rho.png").exists()


def test_an_arm_keeps_its_colour_whichever_cells_a_picture_draws(monkeypatch):
    """The picture's colours are the method registry's (``hacrl.learner.algorithms.method_colours``)."""
    from hacrl.learner import algorithms
    from hacrl.learner.algorithms import ALGORITHMS, Algorithm, method_colours
    from hacrl.registry import Registry

    everything = method_colours(["imitation@algorithm.imitation_coef=0.3", "luffy", "hacpo", "naive", "ftis"])
    few = method_colours(["ftis", "hacpo"])
    assert few == {"ftis": everything["ftis"], "hacpo": everything["hacpo"]}
    assert len(set(everything.values())) == 5  # distinct, the variant included
    variant = method_colours(["hacpo-adaptive@delta=0.2"])["hacpo-adaptive@delta=0.2"]
    assert variant != method_colours(["hacpo-adaptive"])["hacpo-adaptive"]  # a variant is not its base
    # a method registered with the next slot moves no other arm's colour, a variant's included
    before = method_colours(["imitation@lam=0.3", "hacpo-capbase"])
    grown: Registry[Algorithm] = Registry("algorithm")
    for name in ALGORITHMS.names():
        grown.add(name, ALGORITHMS.get(name))
    slot = 1 + max(ALGORITHMS.get(n).display_slot or 0 for n in ALGORITHMS.names())
    grown.add("new-method", Algorithm("new-method", shares_pool=True, advantage="hacpo", loss="hacpo",
                                      display_slot=slot))
    monkeypatch.setattr(algorithms, "ALGORITHMS", grown)
    assert method_colours(["imitation@lam=0.3", "hacpo-capbase", "new-method"]) == \
        before | {"new-method": algorithms.PALETTE[slot]}
    monkeypatch.undo()
    slotted = [n for n in ALGORITHMS.names() if ALGORITHMS.get(n).display_slot is not None]
    assert len(set(method_colours([*slotted, "a@x=1", "b@x=1", "c@x=1", "d@x=1", "e@x=1"]).values())) == 20


def test_every_registered_sharing_method_has_its_own_display_slot():
    from hacrl.learner.algorithms import ALGORITHMS, PALETTE

    sharing = [name for name in ALGORITHMS.names() if ALGORITHMS.get(name).shares_pool]
    slots = [ALGORITHMS.get(name).display_slot for name in sharing]
    assert None not in slots, f"give {[n for n, s in zip(sharing, slots) if s is None]} the next display_slot"
    assert len(set(slots)) == len(slots) and max(slots) < len(PALETTE)  # type: ignore[type-var]


def test_the_palette_is_tab20_dark_shades_first():
    import matplotlib
    from matplotlib.colors import to_hex

    from hacrl.learner.algorithms import PALETTE

    tab20 = matplotlib.colormaps["tab20"]
    assert PALETTE == tuple(to_hex(tab20((2 * i) % 20 + (2 * i) // 20 % 2)) for i in range(20))


# ---- the decision rules (docs/results/mechanism.md) on literal summary.json contrasts ----

def _vs(mean, lo, hi, seed_lo, seed_hi, n=10):
    return {"mean": mean, "n": n, "interval": {"lo": lo, "hi": hi}, "seed_interval": {"lo": seed_lo, "hi": seed_hi}}


@pytest.mark.parametrize("vs, word", [
    (_vs(0.020, 0.001, 0.04, 0.002, 0.038), "gain"),                      # exactly the rule's size
    (_vs(0.019, 0.001, 0.04, 0.002, 0.038), "gain < 0.02"),               # excludes 0, below the size
    (_vs(-0.03, -0.05, -0.01, -0.05, -0.01), "loss"),
    (_vs(-0.01, -0.019, -0.001, -0.02, -0.002), "loss < 0.02"),
    (_vs(0.0, -0.02, 0.02, -0.02, 0.02), "null"),                          # inside ±0.02, bounds included
    (_vs(0.0, -0.021, 0.015, -0.02, 0.02), "undecided"),                   # crosses 0, reaches past -0.02
    (_vs(0.03, 0.01, 0.05, -0.001, 0.06), "gain, seed-level interval includes 0"),
    (_vs(0.03, 0.01, 0.05, 0.01, 0.05, n=7), "gain (7 seeds: below the study's 8)"),
    (None, "–"),
])
def test_verdict_follows_rules_2_and_3(mech, vs, word):
    assert mech.verdict(vs) == word


def _summary(finals_by_seed: dict, vs: dict, algos=("hacpo", "naive", "imitation", "gspo2x")) -> dict:
    """``finals_by_seed[(algo, agent)]``: {seed: acc}; ``vs[(algo, base, agent)]``: the contrast dict."""
    agents = sorted({a for _, a in finals_by_seed})
    results = {agent: {algo: {"final": {"mean": sum(finals_by_seed[algo, agent].values()) / len(finals_by_seed[algo, agent]),
                                        "by_seed": finals_by_seed[algo, agent]},
                              "vs": {b: v for (x, b, a), v in vs.items() if x == algo and a == agent}}
                       for algo in algos if (algo, agent) in finals_by_seed} for agent in agents}
    return {"agents": {a: "builtin:x" for a in agents}, "algorithms": list(algos), "results": results}


def _write(root: Path, name: str, summary: dict) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "summary.json").write_text(json.dumps(summary))
    return root / name


def test_rule_1_takes_the_better_rival_and_needs_both_intervals_and_the_sister_sign(mech, tmp_path):
    seeds = {"0": 0.5, "1": 0.5}
    finals = {("hacpo", "f"): seeds, ("naive", "f"): {"0": 0.40, "1": 0.40},      # naive worse than imitation:
              ("imitation", "f"): {"0": 0.45, "1": 0.45}, ("gspo2x", "f"): seeds}  # the rival is imitation
    good = _vs(0.05, 0.02, 0.08, 0.01, 0.09)
    p1 = _summary(finals, {("hacpo", "imitation", "f"): good, ("hacpo", "naive", "f"): _vs(0.1, 0.07, 0.13, 0.05, 0.15)})
    assert mech.best_sharing_rival(p1, "f") == "imitation"
    row = mech.corrections_row(p1, "p1-rho1", "f")
    assert row["contrast"] == "hacpo − imitation" and row["corrections"] == "matter here"
    # the seed-level interval touching 0 is enough to refuse
    p1_weak = _summary(finals, {("hacpo", "imitation", "f"): _vs(0.05, 0.02, 0.08, 0.0, 0.09)})
    assert mech.corrections_row(p1_weak, "p1-rho1", "f")["corrections"] == "no"
    # sister cells: same sign → claimed; opposite sign → not claimed; none run → said
    same = _summary(finals, {("hacpo", "imitation", "f"): _vs(0.01, -0.01, 0.03, -0.01, 0.03)})
    flip = _summary(finals, {("hacpo", "imitation", "f"): _vs(-0.01, -0.03, 0.01, -0.03, 0.01)})
    for mate, ending in ((same, "same sign in the sister cell"), (flip, "sister cell's sign differs: not claimed")):
        root = tmp_path / ending[:4]
        cells = [_write(root, "p1-rho1", p1), _write(root, "p2-rho1", mate)]
        rule1 = [r for r in mech.rule_rows(cells) if r["cell"] == "p1-rho1" and r["contrast"].startswith("hacpo − max")]
        assert rule1[0]["verdict"] == "matter here; " + ending
    alone = [r for r in mech.rule_rows([_write(tmp_path / "alone", "p1-rho1", p1)]) if "max" in r["contrast"]]
    assert alone[0]["verdict"] == "matter here; no sister cell"
    # P1 rebuilt on the AVX2 machine has P2 (built there) as its sister, and P2 prefers it to the first build's P1
    root = tmp_path / "avx2"
    cells = [_write(root, "p1-rho1", p1), _write(root, "p1-avx2-rho1", p1), _write(root, "p2-rho1", flip)]
    verdicts = {r["cell"]: r["verdict"] for r in mech.rule_rows(cells) if r["contrast"].startswith("hacpo − max")}
    assert verdicts["p1-avx2-rho1"] == "matter here; sister cell's sign differs: not claimed"
    assert mech.sister("p2-rho1", ["p1-rho1", "p1-avx2-rho1"]) == "p1-avx2-rho1"
    assert mech.sister("p2-rho0.5", ["p1-rho1"]) == "p1-rho0.5" and mech.sister("asym", []) is None


def test_difference_in_differences_by_seed(mech, tmp_path):
    # hacpo − imitation per seed: ρ 0: (+0.01, -0.01, 0.00); ρ 1: (+0.05, +0.03, +0.07) → DiD (0.04, 0.04, 0.07)
    low = _summary({("hacpo", "f"): {"0": 0.51, "1": 0.49, "2": 0.50}, ("imitation", "f"): {"0": 0.50, "1": 0.50, "2": 0.50},
                    ("naive", "f"): {"0": 0.5, "1": 0.5, "2": 0.5}, ("gspo2x", "f"): {"0": 0.5, "1": 0.5, "2": 0.5}}, {})
    high = _summary({("hacpo", "f"): {"0": 0.55, "1": 0.53, "2": 0.57}, ("imitation", "f"): {"0": 0.50, "1": 0.50, "2": 0.50},
                     ("naive", "f"): {"0": 0.5, "1": 0.5, "2": 0.5}, ("gspo2x", "f"): {"0": 0.5, "1": 0.5, "2": 0.5}}, {})
    row = mech.did_row(low, high, "p1", "f", "imitation")
    assert row["mean"] == pytest.approx(0.05) and row["n"] == 3
    # d = (0.04, 0.04, 0.07): sd 0.017321, t(0.975, 2) 4.302653 → half-width 0.043028
    assert row["seed_interval"]["half_width"] == pytest.approx(4.302653 * 0.0173205 / 3 ** 0.5, rel=1e-5)
    assert row["verdict"] == "excludes 0"
    rows = mech.rule_rows([_write(tmp_path, "p1-rho0", low), _write(tmp_path, "p1-rho1", high)])
    assert [r["contrast"] for r in rows if r["cell"] == "p1"] == ["[hacpo − imitation](ρ 1) − (ρ 0)",
                                                                  "[hacpo − naive](ρ 1) − (ρ 0)"]
    # stage B: ρ 0.5 against ρ 0 too, labelled with its ρ
    rows = mech.rule_rows([_write(tmp_path / "b", "p1-avx2-rho0", low), _write(tmp_path / "b", "p1-avx2-rho0.5", high)])
    did = [r for r in rows if r["cell"] == "p1-avx2"]
    assert [r["contrast"] for r in did][0] == "[hacpo − imitation](ρ 0.5) − (ρ 0)" and did[0]["mean"] == pytest.approx(0.05)


def test_e1_cell_reads_its_own_contrasts(mech, tmp_path):
    algos = ("hacpo", "naive", "naive-recompute", "gspo")
    finals = {(a, "q"): {"0": 0.5} for a in algos}
    vs = {("naive-recompute", "gspo", "q"): _vs(-0.05, -0.07, -0.03, -0.07, -0.03),
          ("naive", "gspo", "q"): _vs(0.0, -0.01, 0.01, -0.01, 0.01)}
    cell = _write(tmp_path, "e1-tiny-model", _summary(finals, vs, algos))
    rows = mech.rule_rows([cell])
    assert [(r["contrast"], r["verdict"]) for r in rows] == [("naive-recompute − gspo", "loss"), ("naive − gspo", "null")]
    out = mech.rules_table(rows)
    assert out.splitlines()[2].startswith("| e1-tiny-model | q | naive-recompute − gspo | -0.050 | [-0.070, -0.030] |")


def test_per_operator_delta_carries_its_seed_interval(mech, tmp_path):
    # two seeds: hacpo's "-" accuracy minus gspo2x's is 0.5 in seed 0 and 0 in seed 1 (d = [0.5, 0]: mean 0.25,
    # sd 0.353553, se 0.25, t_{0.975, 1} = 12.706205: 0.25 ± 3.176551); "+" is 0 in both (sd 0: the point)
    finals = {("hacpo", "a"): [1.0, 1.0, 1.0, 0.0], ("gspo2x", "a"): [1.0, 1.0, 0.0, 0.0],
              ("hacpo", "b"): [0.0] * 4, ("gspo2x", "b"): [0.0] * 4}
    cell = make_cell(tmp_path, "sym-1.0", "mixed", MIXED_IDS, finals)
    seed1 = cell / "runs" / "hacpo" / "seed-1"
    for algo in ("hacpo", "gspo2x"):  # seed 1: both arms as gspo2x's seed 0, so the "-" difference is 0
        dst = cell / "runs" / algo / "seed-1"
        dst.mkdir(parents=True)
        for f in ("eval_problems.jsonl", "metrics.jsonl"):
            (dst / f).write_text((cell / "runs" / "gspo2x" / "seed-0" / f).read_text())
    summary = json.loads((cell / "summary.json").read_text())
    summary["runs"] += [{"algorithm": a, "seed": 1, "dir": "x", "status": "trained"} for a in ("hacpo", "gspo2x")]
    (cell / "summary.json").write_text(json.dumps(summary))
    rows = {(r["agent"], r["algorithm"]): r for r in mech.cell_rows(cell)}
    a = rows["a", "hacpo"]
    assert seed1.is_dir() and a["seeds"] == 2
    assert a["by_op_delta"] == {"+": 0.0, "-": 0.25}
    lo, hi = a["by_op_delta_seed"]["-"]
    assert (lo, hi) == (pytest.approx(0.25 - 3.176551, abs=1e-5), pytest.approx(0.25 + 3.176551, abs=1e-5))
    assert a["by_op_delta_seed"]["+"] == (0.0, 0.0)
    assert "+: 0.000 [0.000, 0.000]; -: 0.250 [-2.927, 3.427]" in mech.table(list(rows.values()))


def test_e3_cell_reads_hacpo_against_its_ablations(mech, tmp_path):
    algos = ("hacpo", "hacpo-noadv", "gspo2x")
    finals = {(a, "s"): {"0": 0.5} for a in algos}
    vs = {("hacpo", "gspo2x", "s"): _vs(0.01, -0.01, 0.03, -0.01, 0.03),
          ("hacpo-noadv", "gspo2x", "s"): _vs(-0.01, -0.03, 0.01, -0.03, 0.01),
          ("hacpo", "hacpo-noadv", "s"): _vs(0.02, 0.006, 0.033, 0.012, 0.027)}
    rows = mech.rule_rows([_write(tmp_path, "high", _summary(finals, vs, algos))])
    assert [(r["contrast"], r["verdict"]) for r in rows] == [
        ("hacpo − gspo2x", "undecided"), ("hacpo-noadv − gspo2x", "undecided"), ("hacpo − hacpo-noadv", "gain")]


def test_the_capped_baseline_is_read_against_hacpo_and_the_plain_baseline(mech, tmp_path):
    algos = ("hacpo", "hacpo-noadv", "hacpo-capbase", "gspo2x")
    finals = {(a, "s"): {"0": 0.5} for a in algos}
    vs = {(a, "gspo2x", "s"): _vs(0.0, -0.01, 0.01, -0.01, 0.01) for a in algos[:3]}
    vs |= {("hacpo", "hacpo-noadv", "s"): _vs(-0.03, -0.05, -0.01, -0.05, -0.01),
           ("hacpo-capbase", "hacpo", "s"): _vs(0.03, 0.01, 0.05, 0.012, 0.048),
           ("hacpo-capbase", "hacpo-noadv", "s"): _vs(0.0, -0.01, 0.01, -0.01, 0.01)}
    rows = mech.rule_rows([_write(tmp_path, "p2-rho0", _summary(finals, vs, algos))])
    assert [(r["contrast"], r["verdict"]) for r in rows][3:] == [
        ("hacpo − hacpo-noadv", "loss"), ("hacpo-capbase − hacpo", "gain"), ("hacpo-capbase − hacpo-noadv", "null")]


def test_curves_average_each_step_over_the_seeds_that_evaluated_it(mech, tmp_path, capsys):
    ids = ["add2-trace/07+85", "add2-trace/31+42"]
    finals = {(algo, agent): [1.0, 0.0] for algo in ("hacpo", "gspo2x") for agent in "ab"}
    texts = {("hacpo", "a"): ["7+5=12,0+8+1=9>92", "3+1=44,2+6+0=8>73"]}
    cell = make_cell(tmp_path, "p1-rho1", "add2-trace", ids, finals, texts)
    seed0 = cell / "runs" / "hacpo" / "seed-0"
    records = [json.loads(line) for line in (seed0 / "eval_problems.jsonl").read_text().splitlines()]
    records.append(_record(10, "a", "add2-trace", ids, [0.0, 0.0], ["3+1=44,2+6+0=8>92", "1+2=3,3+4+0=7>73"]))
    _lines(seed0 / "eval_problems.jsonl", records)
    seed1 = cell / "runs" / "hacpo" / "seed-1"  # a second seed with no step-10 evaluation, all right at step 30
    _lines(seed1 / "eval_problems.jsonl", [_record(0, "a", "add2-trace", ids, [0.0, 0.0]),
                                           _record(30, "a", "add2-trace", ids, [1.0, 1.0])])
    _lines(seed1 / "metrics.jsonl", [{"step": 1}])
    summary = json.loads((cell / "summary.json").read_text())
    summary["runs"].append({"algorithm": "hacpo", "seed": 1, "dir": "elsewhere", "status": "trained"})
    (cell / "summary.json").write_text(json.dumps(summary))
    rows = {(r["agent"], r["algorithm"]): r for r in mech.curve_rows(cell)}
    a = rows["a", "hacpo"]
    assert a["seeds"] == {0: 2, 10: 1, 30: 2}
    assert a["acc"] == {0: 0.0, 10: 0.0, 30: 0.75}  # step 30: seed 0 1 of 2, seed 1 2 of 2
    # texts only in seed 0: step 10 "right, inconsistent" 1 of 2 (92 after a wrong trace), step 30 consistent 1 of 2
    assert a["right_inconsistent"][10] == 0.5 and a["consistent"][30] == 0.5 and a["consistent"][0] is None
    assert rows["b", "hacpo"]["seeds"] == {0: 1, 30: 1}  # seed 1 evaluated agent a only
    mech.main([str(cell), "--curves"])
    out = capsys.readouterr().out
    assert "| p1-rho1 | a | hacpo | 1/2 | 0 10 30 | 0.000 0.000 0.750 | – 0.500 0.500 |" in out


def test_tally_sorts_agent_cells_by_both_intervals(mech, tmp_path):
    # cell x: agent a ahead (both lower ends > 0), agent b behind (both upper ends < 0); cell y: a crosses 0
    def vs(lo, hi, slo, shi, mean):
        return {"naive": {"mean": mean, "interval": {"lo": lo, "hi": hi}, "seed_interval": {"lo": slo, "hi": shi}}}
    cells = {"x": {"a": vs(0.01, 0.05, 0.02, 0.04, 0.03), "b": vs(-0.05, -0.01, -0.06, -0.02, -0.03)},
             "y": {"a": vs(-0.01, 0.03, 0.001, 0.02, 0.01)}}
    dirs = []
    for name, agents in cells.items():
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"results": {a: {"hacpo": {"vs": v}, "naive": {}}
                                                                for a, v in agents.items()}}))
        dirs.append(d)
    out = mech.tally(dirs, "hacpo", "naive")
    assert out == {"ahead": [("x", "a", 0.03)], "behind": [("x", "b", -0.03)], "neither": [("y", "a", 0.01)]}
