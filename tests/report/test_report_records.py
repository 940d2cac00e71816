"""The compare report built from constructed run directories (no training): per-problem records read back,
paired intervals and their marks in the summary, the answer table first in report.md, the automatic reading
claiming only what an interval supports, learning curves against steps and answers generated, runs with and
without records mixed, and the committed SmolLM2 comparison (no records) reported as before."""

from __future__ import annotations

import json
import logging
import math
import struct
from pathlib import Path

import pytest

from hacrl.config import load_config
from hacrl.report.compare import _jsonable
from hacrl.report.plots import write_plots
from hacrl.report.render import render_report
from hacrl.report.runs import (
    PROBLEM_RECORDS,
    RunOutcome,
    _final_accuracies,
    read_problem_records,
    read_record,
)
from hacrl.report.stats import paired_bootstrap
from hacrl.report.summary import summarize

REPO = Path(__file__).resolve().parents[2]
IDS = [f"add2/test/{i}" for i in range(4)]
ZERO = [0.0] * 4
# (algo, agent) → step → rewards of IDS, the same in both seeds unless a seed is given
GREEDY = {
    ("hacpo", "qwen-char"): {0: ZERO, 1: {0: [1, 1, 0, 0], 1: [1, 0, 0, 0]}, 2: [1, 1, 1, 1]},
    ("gspo", "qwen-char"): {0: ZERO, 1: ZERO, 2: ZERO},
    ("gspo2x", "qwen-char"): {0: ZERO, 1: ZERO, 2: ZERO},
    ("hacpo", "llama-bpe"): {0: ZERO, 1: ZERO, 2: [1, 0, 0, 0]},
    ("gspo", "llama-bpe"): {0: ZERO, 1: ZERO, 2: ZERO},
    ("gspo2x", "llama-bpe"): {0: ZERO, 1: ZERO, 2: ZERO},
}
# qwen-char also sampled k = 4 answers per problem at steps 0 and 2: hacpo 2 of 4 right on every problem at
# the end, the baselines 1 of 4
SAMPLED = {"hacpo": [1, 1, 0, 0], "gspo": [1, 0, 0, 0], "gspo2x": [1, 0, 0, 0]}


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _make_run(run_dir: Path, algo: str, seed: int, records: bool = True) -> None:
    run_dir.mkdir(parents=True)
    evals, problems = [], []
    for step in (0, 1, 2):
        for agent in ("qwen-char", "llama-bpe"):
            rewards = GREEDY[algo, agent][step]
            rewards = [float(v) for v in (rewards[seed] if isinstance(rewards, dict) else rewards)]
            ev = {"step": step, "task": "add2", "agent": agent, "n": 4, "greedy_acc": sum(rewards) / 4}
            rec = {"step": step, "agent": agent, "task": "add2", "ids": IDS, "reward": rewards, "unscorable": [],
                   "finished": [True] * 4, "tokens": [3] * 4, "texts": ["5"]}
            if agent == "qwen-char" and step != 1:
                k4 = SAMPLED[algo] if step == 2 else [0, 0, 0, 0]
                ev.update(k=4, sampled_avg=sum(k4) / 4, sampled_pass=float(any(k4)))
                rec.update(sampled=[[float(x) for x in k4]] * 4, sampled_finished=[[True] * 4] * 4)
            evals.append(ev)
            problems.append(rec)
            problems.append({**rec, "task": None, "benchmark": "gsm8k", "reward": [0.0] * 4})  # not the task's
    _write(run_dir / "eval.jsonl", evals)
    _write(run_dir / "metrics.jsonl", [{"step": s, "agent/qwen-char/optimizer_steps": 2,
                                        "agent/llama-bpe/optimizer_steps": 2} for s in (1, 2)])
    if records:
        _write(run_dir / PROBLEM_RECORDS, problems)


def _summary(root: Path, algos=("hacpo", "gspo", "gspo2x"), without_records=(), baselines=None):
    cfg = load_config("tiny-test", None, ["trainer.eval_every=1"])
    outcomes = []
    for seed in (0, 1):
        for algo in algos:
            run_dir = root / "runs" / algo / f"seed-{seed}"
            if not run_dir.exists():
                _make_run(run_dir, algo, seed, records=(algo, seed) not in without_records)
            outcomes.append(RunOutcome(algo, seed, run_dir, "reused", 1.0, {}))
    meta = {"command": "hacrl compare --preset tiny-test --algos " + ",".join(algos), "preset": "tiny-test",
            "config_path": None, "overrides": [], "algorithms": list(algos), "seeds": [0, 1], "wall_s": 0.0,
            "created": "2027-01-01 00:00:00", **({"baselines": baselines} if baselines else {})}
    return summarize(cfg, meta, outcomes)


def test_problem_records_are_read_back_per_step_and_agent(tmp_path, caplog):
    _make_run(tmp_path / "run", "hacpo", 1)
    recs = read_problem_records(tmp_path / "run")
    assert set(recs) == {(s, a) for s in (0, 1, 2) for a in ("qwen-char", "llama-bpe")}  # no gsm8k record
    assert recs[1, "qwen-char"]["greedy"] == dict(zip(IDS, [1.0, 0.0, 0.0, 0.0], strict=True))
    assert recs[2, "qwen-char"]["sampled"] == dict.fromkeys(IDS, 0.5)  # each problem's mean of its 4 samples
    assert "sampled" not in recs[2, "llama-bpe"]
    with (tmp_path / "run" / PROBLEM_RECORDS).open("a") as f:
        f.write(json.dumps({"step": 3, "agent": "qwen-char", "ids": ["a", "b"], "reward": [1.0]}) + "\n")
        f.write('{"step": 4, "agent": "qwen-char", "ids": ["a"')  # cut short by a kill
    with caplog.at_level(logging.WARNING, logger="hacrl.report.runs"):
        assert set(read_problem_records(tmp_path / "run")) == set(recs)
    assert "differ in length; record skipped" in caplog.text
    assert read_problem_records(tmp_path / "missing") == {}


def test_intervals_marks_and_the_reading(tmp_path):
    s = _summary(tmp_path)
    qwen, llama = s["results"]["qwen-char"], s["results"]["llama-bpe"]
    # qwen-char: hacpo 1 − gspo 0 on every (seed, problem): a one-point interval at +1
    iv = qwen["hacpo"]["vs"]["gspo"]["interval"]
    assert (iv["mean"], iv["lo"], iv["hi"], iv["includes_zero"]) == (1.0, 1.0, 1.0, False)
    assert (iv["pairs"], iv["pairs_by_seed"], iv["problems"], iv["unpaired"]) == (8, [4, 4], 4, 0)
    assert qwen["hacpo"]["vs"]["gspo"]["interval_note"] is None
    # gspo2x − gspo: identical records, [0, 0]
    same = qwen["gspo2x"]["vs"]["gspo"]["interval"]
    assert (same["lo"], same["hi"], same["includes_zero"]) == (0.0, 0.0, True)
    # llama-bpe: d = [1, 0, 0, 0] in both seeds, so resampling seeds changes nothing; a resample of the 4
    # problems holds k ~ Binomial(4, ¼) copies of the first: CDF .316, .738, .949, .996 → [0, ¾] (exact:
    # 2² · 4⁴ = 1024 resamples ≤ B), share ≤ 0 = (¾)⁴ = 81/256
    iv = llama["hacpo"]["vs"]["gspo"]["interval"]
    assert (iv["mean"], iv["lo"], iv["hi"], iv["includes_zero"], iv["exact"]) == (0.25, 0.0, 0.75, True, True)
    assert iv["share_le0"] == pytest.approx(81 / 256)
    # ... while the t-test over seeds sees Δ = +0.25 in both seeds (sd 0, p = 0)
    assert (llama["hacpo"]["vs"]["gspo"]["mean"], llama["hacpo"]["vs"]["gspo"]["p"]) == (0.25, 0.0)
    # avg@4 of qwen-char: each problem 0.5 − 0.25
    sv = qwen["hacpo"]["sampled"]["vs"]["gspo"]["interval"]
    assert (sv["mean"], sv["lo"], sv["hi"], sv["pairs"]) == (0.25, 0.25, 0.25, 8)
    assert s["interval_method"]["n_boot"] == 10_000 and s["interval_method"]["rng_seed"] == 0

    rows = [(r["agent"], r["algorithm"], r["baseline"], r["measure"], r["delta"], r["mark"]) for r in s["answer"]]
    assert rows == [  # every algorithm against every baseline, the two baselines once (gspo2x vs gspo)
        ("qwen-char", "hacpo", "gspo", "greedy", 1.0, "gain"), ("qwen-char", "hacpo", "gspo", "avg@4", 0.25, "gain"),
        ("qwen-char", "hacpo", "gspo2x", "greedy", 1.0, "gain"),
        ("qwen-char", "hacpo", "gspo2x", "avg@4", 0.25, "gain"),
        ("qwen-char", "gspo2x", "gspo", "greedy", 0.0, "≈"), ("qwen-char", "gspo2x", "gspo", "avg@4", 0.0, "≈"),
        ("llama-bpe", "hacpo", "gspo", "greedy", 0.25, "≈"), ("llama-bpe", "hacpo", "gspo2x", "greedy", 0.25, "≈"),
        ("llama-bpe", "gspo2x", "gspo", "greedy", 0.0, "≈")]

    reading = s["reading"][-1]
    assert "paired by seed and problem over 2 seeds" in reading
    # beside each bootstrap interval the seed-level t-interval: d = [+0.25, +0.25] over 2 seeds, sd 0 → a point
    assert ("+0.250 vs gspo (95% interval [+0.000, +0.750], includes 0; seed t-interval [+0.250, +0.250]; "
            "t-test p = 0)") in reading
    si = llama["hacpo"]["vs"]["gspo"]["seed_interval"]
    assert (si["lo"], si["hi"], si["df"], si["includes_zero"]) == (0.25, 0.25, 1, False)
    # 2 seeds: both intervals exclude 0 on qwen-char, but that is indicative only, never a claimed gain
    assert ("Indicative only (fewer than 3 seeds, so not claimed; both intervals exclude 0): hacpo vs gspo on "
            "qwen-char (+1.000), hacpo vs gspo2x on qwen-char (+1.000).") in reading
    assert "Gains" not in reading and "Losses" not in reading
    # llama-bpe: the intervals disagree, and the reading says which one excludes 0
    assert ("The intervals disagree, so not claimed: the t-interval over seeds excludes 0 but the bootstrap over "
            "seeds and problems does not for hacpo vs gspo on llama-bpe (+0.250), hacpo vs gspo2x on llama-bpe "
            "(+0.250).") in reading
    assert "Significant at 5%" not in reading
    assert [r["claim"] for r in s["answer"]] == ["gain"] * 4 + ["≈"] * 2 + ["seeds only"] * 2 + ["≈"]
    assert all(r["indicative"] for r in s["answer"])
    assert s["reading"][-2] == ("Missing baseline: imitation (the same shared answers, the partners' verified "
                                "ones imitated), so a gain cannot be told apart from imitating the partners.")
    json.dumps(_jsonable(s), allow_nan=False)  # summary.json carries it all


def test_a_loss_is_stated_only_when_its_interval_excludes_zero(tmp_path):
    s = _summary(tmp_path, algos=("hacpo", "gspo"), baselines=["hacpo"])  # gspo paired against hacpo
    assert [(r["agent"], r["algorithm"], r["measure"], r["delta"], r["lo"], r["hi"], r["mark"]) for r in s["answer"]] == [
        ("qwen-char", "gspo", "greedy", -1.0, -1.0, -1.0, "loss"),
        ("qwen-char", "gspo", "avg@4", -0.25, -0.25, -0.25, "loss"),
        ("llama-bpe", "gspo", "greedy", -0.25, -0.75, 0.0, "≈")]
    reading = s["reading"][-1]
    assert ("Indicative only (fewer than 3 seeds, so not claimed; both intervals exclude 0): gspo vs hacpo on "
            "qwen-char (-1.000).") in reading
    assert "Gains" not in reading and "Losses" not in reading
    assert ("the t-interval over seeds excludes 0 but the bootstrap over seeds and problems does not for gspo vs "
            "hacpo on llama-bpe (-0.250).") in reading


def test_the_report_opens_with_the_answer(tmp_path):
    s = _summary(tmp_path)
    text = render_report(s)
    assert text.startswith("# hacrl comparison\n\n```\nhacrl compare --preset tiny-test --algos hacpo,gspo,gspo2x"
                           "\n```\n\n## Answer\n")
    assert text.index("## Answer") < text.index("## Command and configuration") < text.index("## Held-out")
    answer = text.split("## Answer")[1].split("## Command and configuration")[0]
    for line in (("| agent | algorithm | vs | measure | Δ | 95% interval (seeds × problems) | 95% t-interval "
                  "(seeds) | reading | t-test p (seeds) | pairs (seeds × problems) |"),
                 ("| qwen-char | hacpo | gspo | greedy | +1.000 | [+1.000, +1.000] | [+1.000, +1.000] | gain, "
                  "indicative only (2 seeds) | 0 | 8 (2 × 4) |"),
                 ("| qwen-char | hacpo | gspo | avg@4 | +0.250 | [+0.250, +0.250] | [+0.250, +0.250] | gain, "
                  "indicative only (2 seeds) | 0 | 8 (2 × 4) |"),
                 ("| llama-bpe | hacpo | gspo | greedy | +0.250 | [+0.000, +0.750] | [+0.250, +0.250] | not "
                  "claimed: only the t-interval excludes 0, indicative only (2 seeds) | 0 | 8 (2 × 4) |"),
                 ("| llama-bpe | gspo2x | gspo | greedy | +0.000 | [+0.000, +0.000] | [+0.000, +0.000] | ≈ both "
                  "intervals include 0, indicative only (2 seeds) | 1 |")):
        assert line in answer, line
    assert "| gspo | gspo2x |" not in answer
    # the details keep the t-test and gain the interval
    assert "| **gain** |" not in answer  # never bold with fewer than 3 seeds
    assert "- Missing baseline: imitation (the same shared answers" in answer
    assert "docs/compare.md" in answer and "*The interval*" not in text  # the method text lives in the docs
    assert text.index("## Answer") < text.index("## Reading") < text.index("## Command and configuration")
    assert "## Pace" not in text  # lock-step runs: the pace table is left out
    assert ("| algorithm | start | final (mean ± sd) | Δ vs gspo (± se) | p vs gspo | t-interval vs gspo | 95% "
            "interval vs gspo | Δ vs gspo2x (± se) | p vs gspo2x | t-interval vs gspo2x | 95% interval vs gspo2x | "
            "rollouts / run |") in text
    llama = text.split("### llama-bpe")[1]
    assert "| hacpo | 0.000 | 0.250 ± 0.000 | +0.250 ± 0.000 | 0 | [+0.250, +0.250] | [+0.000, +0.750] ≈ |" in llama
    assert "| 95% interval vs gspo |" in text.split("### qwen-char")[1].split("### llama-bpe")[0].split(
        "Sampled at")[1]


def test_learning_curves_against_steps_and_answers(tmp_path):
    s = _summary(tmp_path)
    hacpo, gspo2x = s["results"]["qwen-char"]["hacpo"]["curve"], s["results"]["qwen-char"]["gspo2x"]["curve"]
    # answers by step s: s × batch 4 × G 4 × the rollout multiplier (1 for hacpo, 2 for gspo2x)
    assert (hacpo["steps"], hacpo["answers"], hacpo["answers_per_step"]) == ([0, 1, 2], [0, 16, 32], 16)
    assert (gspo2x["answers"], gspo2x["answers_per_step"]) == ([0, 32, 64], 32)
    # step 1: seeds at 2/4 and 1/4: mean 0.375, sd |0.5 − 0.25| / √2, min 0.25, max 0.5
    assert hacpo["mean"] == pytest.approx([0.0, 0.375, 1.0])
    assert hacpo["sd"][1] == pytest.approx(0.25 / math.sqrt(2))
    assert (hacpo["min"], hacpo["max"], hacpo["n"]) == ([0.0, 0.25, 1.0], [0.0, 0.5, 1.0], [2, 2, 2])
    s["plots"] = [str(p.relative_to(tmp_path)) for p in write_plots(s, tmp_path / "plots")]
    assert "plots/curve-qwen-char.png" in s["plots"] and "plots/curve-llama-bpe.png" in s["plots"]
    assert not list((tmp_path / "plots").glob("accuracy-*"))
    head = (tmp_path / "plots" / "curve-qwen-char.png").read_bytes()[:24]
    assert head.startswith(b"\x89PNG\r\n\x1a\n") and struct.unpack(">II", head[16:24]) == (1000, 400)  # 2 panels
    text = render_report(s)
    assert "![qwen-char learning curves](plots/curve-qwen-char.png)" in text
    assert "against the answers qwen-char generated in training (right" in text
    assert text.index("## Answer") < text.index("## Plots") < text.index("## Reading") < text.index("## Held-out")


def test_runs_with_and_without_records_degrade_to_a_note(tmp_path):
    s = _summary(tmp_path, without_records={("hacpo", 1)})
    st = s["results"]["qwen-char"]["hacpo"]["vs"]["gspo"]
    assert st["interval"] is None and st["mean"] == 1.0  # the t-test over seeds is still there
    assert st["interval_note"] == "no interval: hacpo seed 1 has no per-problem records at step 2"
    assert s["results"]["qwen-char"]["gspo2x"]["vs"]["gspo"]["interval"]["hi"] == 0.0  # the others keep theirs
    assert s["results"]["qwen-char"]["hacpo"]["sampled"]["vs"]["gspo"]["interval"] is None
    text = render_report(s)
    assert ("| qwen-char | hacpo | gspo | greedy | +1.000 | — | [+1.000, +1.000] | no interval, indicative only "
            "(2 seeds) | 0 | — |") in text
    assert ("- hacpo vs gspo (qwen-char, greedy), hacpo vs gspo (qwen-char, avg@4), hacpo vs gspo2x (qwen-char, "
            "greedy), hacpo vs gspo2x (qwen-char, avg@4), hacpo vs gspo (llama-bpe, greedy), hacpo vs gspo2x "
            "(llama-bpe, greedy): no interval: hacpo seed 1 has no per-problem records at step 2") in text
    reading = s["reading"][-1]
    assert "Gains" not in reading and "Significant" not in reading and "includes 0" not in reading
    assert reading.startswith("Final accuracy against gspo and gspo2x, paired by seed over 2 seeds. hacpo: "
                              "qwen-char +1.000 vs gspo (p = 0)")
    assert ("No interval (some runs have no per-problem records), so not claimed either way: hacpo vs gspo on "
            "qwen-char (+1.000)") in reading
    none = _summary(tmp_path / "none", without_records={(a, s) for a in ("hacpo", "gspo", "gspo2x") for s in (0, 1)})
    assert none["results"]["qwen-char"]["hacpo"]["vs"]["gspo"]["interval_note"] == (
        "no interval: these runs have no per-problem records (eval_problems.jsonl)")
    assert "No interval over seeds × problems: these runs have no per-problem records" in render_report(none)


def test_pairing_by_problem_id_in_the_summary(tmp_path):
    s = _summary(tmp_path, algos=("hacpo", "gspo"))
    path = tmp_path / "runs" / "gspo" / "seed-0" / PROBLEM_RECORDS
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:  # gspo seed 0: the problems in another order, the last one missing
        if r["step"] == 2 and r["agent"] == "llama-bpe" and "benchmark" not in r:
            r["ids"], r["reward"] = r["ids"][:3][::-1], r["reward"][:3][::-1]
    _write(path, records)
    s = _summary(tmp_path, algos=("hacpo", "gspo"))
    iv = s["results"]["llama-bpe"]["hacpo"]["vs"]["gspo"]["interval"]
    assert (iv["pairs"], iv["pairs_by_seed"], iv["unpaired"]) == (7, [3, 4], 1)
    hacpo = dict(zip(IDS, [1.0, 0.0, 0.0, 0.0], strict=True))
    assert iv == paired_bootstrap([hacpo, hacpo], [dict.fromkeys(IDS[:3], 0.0), dict.fromkeys(IDS, 0.0)])
    assert "| llama-bpe | hacpo | gspo | greedy | +0.286 |" in render_report(s)  # 2 of 7 pairs won


def test_the_committed_comparison_without_records_reports_as_before():
    root = REPO / "results" / "smollm2-state"
    if not (root / "summary.json").is_file():
        pytest.skip("results/smollm2-state is not in this checkout")
    committed = json.loads((root / "summary.json").read_text())
    assert not list(root.rglob(PROBLEM_RECORDS))  # made before per-problem records
    # the config the runs were made with (the preset has moved on since: 300 held-out problems, a fixed set)
    cfg = load_config(None, REPO / committed["runs"][0]["dir"] / "config.yaml")
    meta = {k: committed[k] for k in ("command", "preset", "config_path", "overrides", "algorithms", "seeds",
                                      "wall_s", "created")}
    outcomes = [RunOutcome(r["algorithm"], r["seed"], REPO / r["dir"], r["status"],
                           read_record(REPO / r["dir"]).get("wall_s"),
                           _final_accuracies(REPO / r["dir"], committed["steps"])) for r in committed["runs"]]
    s = json.loads(json.dumps(_jsonable(summarize(cfg, meta, outcomes))))

    def same(old, new, path):  # every number and word the old summary held, unchanged
        if isinstance(old, dict):
            for k, v in old.items():
                same(v, new[k], f"{path}.{k}")
        elif isinstance(old, list):
            assert len(old) == len(new), path
            for i, (x, y) in enumerate(zip(old, new, strict=True)):
                same(x, y, f"{path}[{i}]")
        elif isinstance(old, float):  # abs 1e-12: paired means are now kept at 12 digits (stats.py)
            assert new == pytest.approx(old, rel=1e-12, abs=1e-12), path
        else:
            assert new == old, path

    for key in ("results", "cost", "diagnostics", "windows", "baselines", "steps", "eval_size"):
        same(committed[key], s[key], key)
    assert [{k: v for k, v in r.items() if k not in ("dir", "wall_short")} for r in s["runs"]] == [
        {k: v for k, v in r.items() if k != "dir"} for r in committed["runs"]]
    assert not any(r["wall_short"] for r in s["runs"])  # (a later field) every record there is whole
    # the reading as before, with the missing imitation baseline named before the differences it qualifies, and
    # where an agent ended below its partner's start (the shipped model under every algorithm here)
    assert s["reading"][:-3] == committed["reading"][:-1]
    assert s["reading"][-3].startswith("Missing baseline: imitation")
    assert s["reading"][-2].startswith("Below the partner's start: smollm2 under hacpo ended at 0.453, below "
                                       "smollm2-sft's start")
    assert s["reading"][-1] == committed["reading"][-1] + " (No per-problem records, so no paired interval.)"
    st = s["results"]["smollm2"]["hacpo"]["vs"]["gspo"]
    assert st["interval"] is None and st["interval_note"].startswith("no interval: these runs have no per-problem")
    text = render_report(s)
    # the seed t-interval is new: +0.213 ± t_{0.975,2} · se = 4.303 × 0.0177
    assert "| smollm2 | hacpo | gspo | greedy | +0.213 | — | [+0.137, +0.289] | no interval | 0.00677 | — |" in text
    assert "95% interval vs" not in text  # the detail tables as before
    assert ("| hacpo | 0.207 ± 0.012 | 0.453 ± 0.042 | +0.213 ± 0.018 | 0.00677 | [+0.137, +0.289] | +0.220 ± 0.031 "
            "| 0.0187 | [+0.089, +0.351] | 480 |") \
        in text


def test_default_baselines_are_gspo_multiples_and_imitation():
    from hacrl.report.summary import is_baseline

    assert [is_baseline(a) for a in ("gspo", "gspo2x", "gspo-x2", "imitation")] == [True] * 4
    # variants and the algorithms under test are not baselines unless --baselines says so
    assert [is_baseline(a) for a in ("hacpo", "naive", "grpo", "gspo@task.fewshot=3", "imitation@imitation_coef=0.5")] \
        == [False] * 5


def test_report_only_over_hand_made_runs_shows_provenance_both_intervals_and_what_is_missing(tmp_path, capsys):
    # the whole `hacrl compare --report-only` path, no training: finished run directories made by hand (their
    # checkpoints removed, as --keep-checkpoints none leaves them), two of them with a provenance record
    from hacrl.cli import main
    from hacrl.run.provenance import PROVENANCE_FILE, collect

    out = tmp_path / "cmp"
    for algo in ("hacpo", "gspo"):
        for seed in (0, 1):
            run = out / "runs" / algo / f"seed-{seed}"
            _make_run(run, algo, seed)
            (run / "compare.json").write_text(json.dumps({
                "wall_s": 1.0, "algorithm": algo, "seed": seed, "checkpoints_removed": True,
                "invocations": [{"status": "trained", "from_step": 0, "to_step": 2, "wall_s": 1.0}]}))
            if seed == 0:
                (run / PROVENANCE_FILE).write_text(json.dumps(collect()) + "\n")
    argv = ["compare", "--preset", "tiny-test", "--algos", "hacpo,gspo", "--seeds", "2", "--set",
            "trainer.eval_every=1", "--output", str(out), "--report-only", "-q"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # the Answer table ends the command's output
    assert ("| agent | algorithm | vs | measure | Δ | 95% interval (seeds × problems) | 95% t-interval (seeds) |"
            in printed)
    assert ("| qwen-char | hacpo | gspo | greedy | +1.000 | [+1.000, +1.000] | [+1.000, +1.000] | gain, indicative "
            "only (2 seeds) | 0 | 8 (2 × 4) |") in printed
    text = (out / "report.md").read_text()
    answer = text.split("## Answer")[1].split("## Reading")[0]
    assert "indicative only (2 seeds)" in answer and "| **gain** |" not in answer
    assert "- Missing baseline: gspo2x (GSPO with 2× the rollouts" in answer
    assert "- Missing baseline: imitation (the same shared answers" in answer
    provenance = text.split("## Provenance")[1].split("## Runs")[0]
    assert "| hacpo seed 0, gspo seed 0 | `" in provenance
    assert "No provenance recorded: hacpo seed 1, gspo seed 1." in provenance
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["unrecorded"] == ["hacpo seed 1", "gspo seed 1"]
    assert summary["results"]["llama-bpe"]["hacpo"]["vs"]["gspo"]["seed_interval"]["lo"] == 0.25
    assert "## Pace" not in text and text.index("## Answer") < text.index("## Plots") < text.index("## Reading")


def test_which_arm_to_train_with_is_read_against_the_best_arm(tmp_path):
    """summary["choice"]: per agent the arm with the highest mean final accuracy, every other arm's paired
    difference to it (arm − best) with both intervals, read against the 0.01 margin; with 2 seeds the advice
    recommends nothing (these runs hold hacpo, the default, so nothing more is named)."""
    s = _summary(tmp_path)
    qwen, llama = s["choice"]["agents"]["qwen-char"], s["choice"]["agents"]["llama-bpe"]
    assert (qwen["best"], llama["best"], qwen["seeds"], s["choice"]["margin"]) == ("hacpo", "hacpo", [0, 1], 0.01)
    # qwen-char: gspo 0 − hacpo 1 on every (seed, problem): both intervals at −1, behind by more than 0.01
    vs = qwen["arms"]["gspo"]["vs_best"]
    assert (vs["interval"]["lo"], vs["interval"]["hi"], vs["seed_interval"]["hi"]) == (-1.0, -1.0, -1.0)
    assert [qwen["arms"][a]["reading"] for a in ("hacpo", "gspo", "gspo2x")] == ["best", "behind", "behind"]
    # llama-bpe: gspo − hacpo = −0.25 in both seeds (seed interval one point), the bootstrap [−0.75, 0]: undecided
    vs = llama["arms"]["gspo"]["vs_best"]
    assert (vs["interval"]["lo"], vs["interval"]["hi"], vs["seed_interval"]["lo"]) == (-0.75, 0.0, -0.25)
    assert llama["arms"]["gspo"]["reading"] == "undecided" and llama["arms"]["gspo"]["mean"] == 0.0
    assert s["advice"] == [
        ("qwen-char: hacpo ended highest (1.000, mean of 2 seeds). Behind it by more than 0.01 by both intervals: "
         "gspo (-1.000), gspo2x (-1.000)."),
        "llama-bpe: hacpo ended highest (0.250, mean of 2 seeds). Undecided: gspo (-0.250), gspo2x (-0.250).",
        "With fewer than 3 seeds every reading is indicative: run more seeds before choosing."]
    report = render_report(json.loads(json.dumps(s, default=_jsonable)))
    assert "## Which to train with (within 0.01 of the best arm)\n\nqwen-char: hacpo ended highest" in report
