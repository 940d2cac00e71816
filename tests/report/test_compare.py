"""`hacrl compare`: the paired statistics on hand-made numbers, and a real 2 × 2 comparison on throwaway
tiny models (report, plots, reuse of finished runs, resume of partial ones, refusal of a changed config)."""

from __future__ import annotations

import argparse
import json
import math
import shutil

import pytest
import torch
import yaml

from hacrl.cli.compare import add_compare_parser, cmd_compare
from hacrl.config import ConfigError
from hacrl.report.compare import parse_algos, parse_seeds, run_comparison
from hacrl.report.stats import paired_difference
from hacrl.run.provenance import read_provenance

try:
    import scipy  # noqa: F401

    HAVE_SCIPY = True
except ImportError:
    HAVE_SCIPY = False

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALGOS = "hacpo,gspo"
SEEDS = 2



# ---- paired_difference ----------------------------------------------------------------------------

def test_paired_difference_on_a_hand_made_example():
    a = [0.6, 0.7, 0.9]
    b = [0.5, 0.5, 0.6]
    st = paired_difference(a, b)
    # d = a − b = [0.1, 0.2, 0.3]; n = 3
    # mean = 0.6 / 3 = 0.2
    # sd = sqrt(((0.1−0.2)² + 0² + (0.3−0.2)²) / (3 − 1)) = sqrt(0.02 / 2) = 0.1
    # se = sd / √n = 0.1 / √3 = 0.0577350
    # t = mean / se = 0.2 / 0.0577350 = 2√3 = 3.4641016
    assert st["n"] == 3
    assert st["mean"] == pytest.approx(0.2)
    assert st["sd"] == pytest.approx(0.1)
    assert st["se"] == pytest.approx(0.1 / math.sqrt(3))
    assert st["t"] == pytest.approx(2 * math.sqrt(3))
    # Student's t with ν = 2 has the closed form CDF F(t) = 1/2 + t / (2·sqrt(2 + t²)), so the two-sided
    # p = 2·(1 − F(|t|)) = 1 − |t| / sqrt(2 + t²) = 1 − 2√3 / √14 = 1 − 0.9258201 = 0.0741799
    if HAVE_SCIPY:
        assert st["p"] == pytest.approx(1 - 2 * math.sqrt(3) / math.sqrt(14), rel=1e-6)
        assert st["p"] == pytest.approx(0.0741799, abs=1e-6)
    else:
        assert st["p"] is None


def test_paired_difference_with_two_seeds_matches_the_cauchy_case():
    st = paired_difference([1.0, 0.5], [0.0, 0.0])
    # d = [1, 0.5]; mean 0.75; sd = sqrt((0.25² + 0.25²) / 1) = 0.3535534; se = sd / √2 = 0.25; t = 3
    assert (st["mean"], st["se"], st["t"]) == pytest.approx((0.75, 0.25, 3.0))
    assert st["sd"] == pytest.approx(math.sqrt(0.125))
    # ν = 1 is the Cauchy distribution: two-sided p = 1 − (2/π)·atan(3) = 0.2048328
    if HAVE_SCIPY:
        assert st["p"] == pytest.approx(1 - 2 / math.pi * math.atan(3.0), rel=1e-6)


def test_paired_difference_edge_cases():
    one = paired_difference([0.4], [0.1])  # one seed: a difference, no spread, no test
    assert one["n"] == 1 and one["mean"] == pytest.approx(0.3)
    assert one["sd"] is None and one["se"] is None and one["t"] is None and one["p"] is None
    same = paired_difference([0.3, 0.5, 0.2], [0.3, 0.5, 0.2])  # identical: no difference at all
    assert (same["mean"], same["sd"], same["t"], same["p"]) == (0.0, 0.0, 0.0, 1.0)
    shifted = paired_difference([0.4, 0.6], [0.3, 0.5])  # the same +0.1 in every seed
    assert shifted["mean"] == pytest.approx(0.1) and shifted["sd"] == 0.0
    assert shifted["t"] == math.inf and shifted["p"] == 0.0
    assert paired_difference([], [])["mean"] is None
    with pytest.raises(ValueError):
        paired_difference([0.1, 0.2], [0.1])


def test_paired_difference_mean_prints_as_the_bootstrap_mean_of_the_same_pairs():
    # 4 seeds × 300 problems: accuracies 166, 162, 165, 161 against 173, 170, 171, 161 right answers, so
    # the paired differences sum to −21 of 1200 and the mean is −0.0175 exactly; summed over seeds in
    # floating point it is −0.01749999…, which '+.3f' prints as −0.017, while the bootstrap's mean over
    # the same 1200 pairs prints −0.018. One number, one rounding.
    a = [166 / 300, 162 / 300, 165 / 300, 161 / 300]
    b = [173 / 300, 170 / 300, 171 / 300, 161 / 300]
    st = paired_difference(a, b)
    assert st["mean"] == -0.0175
    assert f"{st['mean']:+.3f}" == "-0.018"


# ---- argument checks --------------------------------------------------------------------------------

def _compare_args(*argv):
    parser = argparse.ArgumentParser(prog="hacrl")
    add_compare_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["compare", *argv])


@pytest.mark.parametrize(("argv", "needle"), [
    (["--algos", "hacpo,ppo"], "unknown algorithm 'ppo'"),
    (["--algos", "hacpo,,gspo"], "comma-separated"),
    (["--algos", "gspo,gspo"], "listed twice"),
    (["--seeds", "0"], "a bare number counts seeds, and at least 1 seed is needed (2 or more for the paired tests); seed 0 alone is 0-0"),
    (["--seeds", "two"], "number of seeds"),
    (["--set", "run.seed=3"], "--seeds"),
    (["--set", "algorithm.name=gspo"], "--algos"),
    (["--algos", "hacpo@delta"], "is not key=value"),
    (["--algos", "hacpo@run.seed=3"], "set by compare"),
    (["--algos", "hacpo@delta=2"], "algorithm.delta"),
    (["--algos", "gspo-x0"], "gspo-x<N>"),
    (["--algos", "hacpo,gspo", "--baselines", "gspo2x"], "listed in --algos"),
    (["--preset", "tiny-test", "--set", "agents.qwen-char.model=/no/such/model"], "is not a directory"),
    (["--preset", "tiny-test", "--set", "trainer.batch_size=0"], "trainer.batch_size"),
])
def test_bad_arguments_raise_one_line_config_errors(argv, needle, tmp_path):
    with pytest.raises(ConfigError) as err:
        cmd_compare(_compare_args(*argv, "--output", str(tmp_path / "out")))
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out" / "runs").exists()  # nothing trained


def test_seed_and_algo_parsing():
    assert parse_seeds(3) == [0, 1, 2] and parse_seeds("2") == [0, 1] and parse_seeds("4,1") == [4, 1]
    # ranges are inclusive and mix with single seeds; one seed alone is a range of one or a trailing comma
    assert parse_seeds("3-5") == [3, 4, 5] and parse_seeds("0, 4-5") == [0, 4, 5]
    assert parse_seeds("3-3") == [3] and parse_seeds("3,") == [3] and parse_seeds(" 2 ") == [0, 1]
    for bad, needle in [("5-3", "4-6"), ("a", "4-6"), ("1,,2", "4-6"), ("-2", "4-6"), ("0", "at least 1"),
                        ("1,1-2", "listed twice")]:
        with pytest.raises(ConfigError, match=needle):
            parse_seeds(bad)
    assert parse_algos(" hacpo , gspo2x") == ["hacpo", "gspo2x"]
    assert parse_algos("hacpo@delta=0.6,gspo-x3") == ["hacpo@delta=0.6", "gspo-x3"]


@pytest.mark.model
def test_a_variant_runs_under_its_own_settings_and_every_gspo_multiple_is_a_baseline(tiny_models, tmp_path):
    out = tmp_path / "cmp"
    overrides = [o for o in _overrides(tiny_models) if not o.startswith("trainer.steps")] + ["trainer.steps=1"]
    run_comparison("tiny-test", "hacpo@delta=0.6@window_target=0.5,gspo-x2", 1, overrides, out, log=lambda _: None)
    saved = yaml.safe_load((out / "runs" / "hacpo@delta=0.6@window_target=0.5" / "seed-0" / "config.yaml").read_text())
    assert (saved["algorithm"]["name"], saved["algorithm"]["delta"], saved["algorithm"]["window_target"]) == (
        "hacpo", 0.6, 0.5)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["baselines"] == ["gspo-x2"]
    assert "Δ vs gspo-x2" in (out / "report.md").read_text()
    # the same runs, reused, paired against the variant instead
    label = "hacpo@delta=0.6@window_target=0.5"
    run_comparison("tiny-test", f"{label},gspo-x2", 1, overrides, out, log=lambda _: None, baselines=label)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["baselines"] == [label] and "--baselines" in summary["command"]
    assert f"Δ vs {label}" in (out / "report.md").read_text()


# ---- a real comparison on throwaway tiny models ---------------------------------------------------------

@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Two untrained heterogeneous agents: a Qwen2-style model with a char tokenizer, a Llama one with BPE."""
    from hacrl.agents.tiny import build_bpe_tokenizer, build_char_tokenizer, build_model

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny-models")
    for name, arch, make_tok in (("qwen-char", "qwen2-small", build_char_tokenizer),
                                 ("llama-bpe", "llama-base", build_bpe_tokenizer)):
        tok = make_tok()
        model = build_model(arch, tok)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return root


def _overrides(models):
    return [f"agents.qwen-char.model={models / 'qwen-char'}",
            f"agents.llama-bpe.model={models / 'llama-bpe'}",
            "trainer.steps=2", "trainer.eval_every=1", "trainer.eval_size=20", "trainer.batch_size=4",
            "rollout.rollouts_per_prompt=4", "trainer.checkpoint_every=1", "run.tensorboard=false",
            "trainer.threads=1"]


@pytest.fixture(scope="module")
def comparison(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "cmp"
    lines: list[str] = []
    report = run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append)
    return out, report, lines


def _run_dirs(out):
    return [out / "runs" / a / f"seed-{s}" for a in ALGOS.split(",") for s in range(SEEDS)]


def _files(root):
    """Every file under ``root`` but the lock files, path → bytes: what a call must leave untouched."""
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".hacrl.lock"}


@pytest.mark.model
def test_comparison_writes_every_table_and_plot(comparison):
    out, report, lines = comparison
    assert report == out / "report.md"
    assert sum("trained" in line for line in lines) == 4
    for run in _run_dirs(out):
        assert (run / "checkpoints" / "step-000002" / "manifest.json").is_file()
        (prov,) = read_provenance(run)  # one invocation: its code, libraries and device
        assert (prov["resumed"], prov["from_step"]) == (False, 0) and prov["libraries"]["torch"]
        assert json.loads((run / "compare.json").read_text())["wall_s"] > 0
    text = report.read_text()
    for needle in ("## Command and configuration",
                   "hacrl compare --preset tiny-test --algos hacpo,gspo --seeds 2",
                   "| steps | 2 ", "| seeds | 0, 1 ",
                   "## Held-out accuracy", "### qwen-char", "### llama-bpe",
                   ("| algorithm | start | final (mean ± sd) | Δ vs gspo (± se) | p vs gspo | t-interval vs gspo "
                    "| 95% interval vs gspo | rollouts / run | optimizer updates / run | wall s / run |"),
                   "## Answer", "| qwen-char | hacpo | gspo | greedy | ", "indicative only (2 seeds)",
                   "95% t-interval (seeds)", "- Missing baseline: gspo2x", "- Missing baseline: imitation",
                   "## Provenance", "| all 4 runs | `",
                   "## Cost per run", "## Collaboration diagnostics", "| hacpo | qwen-char |",
                   "| hacpo | llama-bpe |",
                   "## Reading", "fell inside the clip window", "## Runs", "| gspo | 1 | trained |",
                   "![qwen-char learning curves](plots/curve-qwen-char.png)", "![ω over time](plots/omega.png)"):
        assert needle in text, needle
    # rollouts per agent per run = steps × batch × G × multiplier = 2 × 4 × 4 × 1 = 32.
    # updates per run = steps × (rows per step / minibatch size), minibatch = B·G/2 = 8 sequences:
    # hacpo trains on 4 prompts × (4 own + 4 cross) = 32 rows → 4 per step → 8; gspo on 16 rows → 2 → 4.
    hacpo_row = next(line for line in text.splitlines() if line.startswith("| hacpo | ") and "± " in line)
    assert "| 32 | 8 |" in hacpo_row
    gspo_row = next(line for line in text.splitlines()
                    if line.startswith("| gspo | ") and "| — | — |" in line)
    assert "| 32 | 4 |" in gspo_row
    for name in ("curve-qwen-char.png", "curve-llama-bpe.png", "omega.png", "cross-window.png"):
        data = (out / "plots" / name).read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithms"] == ["hacpo", "gspo"] and summary["seeds"] == [0, 1]
    st = summary["results"]["qwen-char"]["hacpo"]["vs"]["gspo"]
    assert set(st) >= {"mean", "sd", "se", "t", "p", "n"} and st["n"] == 2
    # the runs wrote per-problem records: a paired interval over 2 seeds × the 20 held-out problems
    assert st["interval"]["pairs"] == 40 and st["interval"]["pairs_by_seed"] == [20, 20]
    assert st["interval"]["lo"] <= st["interval"]["mean"] <= st["interval"]["hi"]
    assert st["seed_interval"]["n"] == 2 and st["seed_interval"]["lo"] <= st["mean"] <= st["seed_interval"]["hi"]
    assert summary["provenance"]["unrecorded"] == [] and len(summary["provenance"]["runs"]) == 4
    assert summary["runs_with_problem_records"] == 4
    assert summary["results"]["qwen-char"]["hacpo"]["curve"]["answers"] == [0, 16, 32]
    assert "hacpo" in summary["diagnostics"] and "gspo" not in summary["diagnostics"]
    assert 0.0 <= summary["diagnostics"]["hacpo"]["qwen-char"]["in_window_frac"] <= 1.0


@pytest.mark.model
def test_same_seed_gives_every_algorithm_the_same_prompts(comparison):
    out, _, _ = comparison

    def prompts(algo, seed):
        path = out / "runs" / algo / f"seed-{seed}" / "samples" / "step-000001.jsonl"
        return [json.loads(line)["prompt"] for line in path.read_text().splitlines()]

    assert prompts("hacpo", 0) == prompts("gspo", 0)
    assert prompts("hacpo", 1) == prompts("gspo", 1)
    assert prompts("hacpo", 0) != prompts("hacpo", 1)


@pytest.mark.model
def test_second_invocation_reuses_finished_runs(comparison, tiny_models, capsys):
    out, report, _ = comparison
    files = [run / "metrics.jsonl" for run in _run_dirs(out)]
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    argv = ["--preset", "tiny-test", "--algos", ALGOS, "--seeds", str(SEEDS), "--output", str(out), "-q"]
    for o in _overrides(tiny_models):
        argv += ["--set", o]
    assert cmd_compare(_compare_args(*argv)) == 0
    printed = capsys.readouterr().out
    assert printed.count("reused") == 4 and "trained" not in printed
    assert f"report in {report}" in printed
    advice = printed[printed.index("Which to train with (within 0.01 of the best arm):"):]  # after the table
    assert "  With fewer than 3 seeds every reading is indicative" in advice and "report in" in advice
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before}
    assert after == before  # not retrained, not even rewritten
    assert "| runs this time | 4 reused |" in report.read_text()


@pytest.mark.model
def test_changed_config_is_refused_before_anything_trains(comparison, tiny_models, tmp_path):
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    shutil.rmtree(out / "runs/hacpo/seed-0")  # the first run would train, but the other runs disagree
    with pytest.raises(ConfigError, match=r"agents\.qwen-char\.lr=0\.0003.*now 0\.01"):
        run_comparison("tiny-test", ALGOS, SEEDS, [*_overrides(tiny_models), "agents.qwen-char.lr=1e-2"], out,
                       log=lambda line: None)
    assert not (out / "runs/hacpo/seed-0").exists()


@pytest.mark.model
def test_partial_run_is_resumed_and_checkpointless_run_restarted(comparison, tiny_models, tmp_path):
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)

    def metrics_without_timing(run):
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("timing/")}
                for line in (run / "metrics.jsonl").read_text().splitlines()]

    partial, empty = out / "runs/hacpo/seed-0", out / "runs/gspo/seed-1"
    expected = {partial: metrics_without_timing(partial), empty: metrics_without_timing(empty)}
    shutil.rmtree(partial / "checkpoints" / "step-000002")  # step-000001 is left: resume from it
    shutil.rmtree(empty / "checkpoints")  # no checkpoint at all and no record of finishing: start again
    (empty / "compare.json").unlink()
    lines: list[str] = []
    run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append)
    assert any("hacpo seed 0: resuming from step 1 of 2" in line for line in lines)
    assert any("gspo seed 1: no complete checkpoint" in line for line in lines)
    runs = json.loads((out / "summary.json").read_text())["runs"]
    statuses = {(r["algorithm"], r["seed"]): r["status"] for r in runs}
    assert statuses == {("hacpo", 0): "resumed", ("hacpo", 1): "reused", ("gspo", 0): "reused",
                        ("gspo", 1): "restarted"}
    # a resume appends its own provenance line; a restart wipes the run (and its record) and starts one afresh
    assert [(p["resumed"], p["from_step"]) for p in read_provenance(partial)] == [(False, 0), (True, 1)]
    assert [(p["resumed"], p["from_step"]) for p in read_provenance(empty)] == [(False, 0)]
    for run in (partial, empty):
        assert (run / "checkpoints" / "step-000002" / "manifest.json").is_file()
        # the resumed run continues exactly, and the restarted one repeats its seed exactly
        assert metrics_without_timing(run) == expected[run]


def test_phase_seconds_count_each_phase_once():
    from hacrl.report.summary import _phase_seconds, _update_seconds

    # since the worker split: totals beside per-agent times and overlap ratios
    new = {"timing/rollout": 1.0, "timing/rollout/a": 0.6, "timing/rollout/b": 0.4, "timing/rollout_overlap": 1.0,
           "timing/update": 2.0, "timing/update/a": 1.2, "timing/update/b": 0.8, "timing/update_overlap": 1.0,
           "timing/reward": 0.5, "agent/a/reward": 0.3}
    assert _phase_seconds(new) == 3.5 and _update_seconds(new) == 2.0
    # before it: per-agent update times only
    old = {"timing/rollout": 1.0, "timing/update/a": 1.2, "timing/update/b": 0.8, "timing/reward": 0.5}
    assert _phase_seconds(old) == 3.5 and _update_seconds(old) == 2.0


@pytest.mark.model
def test_a_finished_run_whose_checkpoints_were_deleted_by_hand_is_reused_not_wiped(comparison, tiny_models,
                                                                                  tmp_path):
    # checkpoints/ removed outside hacrl, so compare.json carries no "checkpoints_removed" note: the record's
    # last invocation finished, so the run is reused from its records and none of them is touched
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    for run in _run_dirs(out):
        shutil.rmtree(run / "checkpoints")
        assert "checkpoints_removed" not in json.loads((run / "compare.json").read_text())
    before = _files(out / "runs")
    lines: list[str] = []
    run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append, dry_run=True)
    assert sum(line.endswith("finished: reused") for line in lines) == 4, lines
    run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append)
    assert {p: p.read_bytes() for p in before} == before
    assert json.loads((out / "summary.json").read_text())["results"] == \
        json.loads((src / "summary.json").read_text())["results"]

    # a run stopped part-way whose checkpoints are gone has nothing to resume from: it is trained again
    run = out / "runs" / "gspo" / "seed-0"
    record = json.loads((run / "compare.json").read_text())
    record["invocations"][-1]["status"] = "stopped"
    (run / "compare.json").write_text(json.dumps(record))
    lines.clear()
    run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append, dry_run=True)
    assert any(line.startswith("[2/4] gspo seed 0: restart from scratch") for line in lines), lines


@pytest.mark.model
def test_finished_runs_without_checkpoints_are_reused_and_never_deleted(comparison, tiny_models,
                                                                        tmp_path):
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    summary_before = json.loads((src / "summary.json").read_text())["results"]
    lines: list[str] = []
    run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append,
                   keep_checkpoints="none")
    assert sum("removed the checkpoints" in line for line in lines) == 4
    for run in _run_dirs(out):
        assert not (run / "checkpoints").exists()
        assert json.loads((run / "compare.json").read_text())["checkpoints_removed"] is True

    # a third invocation (a fresh copy of the directory, say) reuses all four from their records alone
    lines.clear()
    run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append)
    assert sum("reused" in line for line in lines) == 4
    assert json.loads((out / "summary.json").read_text())["results"] == summary_before

    # a changed training setting is still refused for a checkpointless finished run
    with pytest.raises(ConfigError, match=r"agents\.qwen-char\.lr"):
        run_comparison("tiny-test", ALGOS, SEEDS, [*_overrides(tiny_models), "agents.qwen-char.lr=1e-2"], out,
                       log=lambda line: None)

    # asked for more steps, a run without checkpoints cannot be extended: refused, and nothing is deleted
    before = _files(out)
    with pytest.raises(ConfigError, match=r"finished at step 2 and its checkpoints were removed.*"
                                          r"trainer\.steps=3"):
        run_comparison("tiny-test", ALGOS, SEEDS, [*_overrides(tiny_models), "trainer.steps=3"], out,
                       log=lambda line: None)
    assert {p: p.read_bytes() for p in before} == before


def test_keep_checkpoints_is_checked_before_anything_trains(tmp_path):
    with pytest.raises(ConfigError, match="--keep-checkpoints must be one of all, none"):
        run_comparison("tiny-test", ALGOS, SEEDS, [], tmp_path / "out", keep_checkpoints="last")
    assert not (tmp_path / "out").exists()


@pytest.mark.model
def test_sampled_accuracy_is_reported_and_paired_like_the_greedy(comparison, tiny_models, tmp_path):
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    # hand-set sampled results (k = 4) in every eval.jsonl record of qwen-char: start 0.3 / 0.6 everywhere;
    # final avg@4 hacpo 0.5, 0.7 and gspo 0.4, 0.5 (seeds 0, 1); pass@4 hacpo 0.8, 0.9, gspo 0.7, 0.7
    final = {("hacpo", 0): (0.5, 0.8), ("hacpo", 1): (0.7, 0.9), ("gspo", 0): (0.4, 0.7), ("gspo", 1): (0.5, 0.7)}
    for (algo, seed), (avg, pas) in final.items():
        path = out / "runs" / algo / f"seed-{seed}" / "eval.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for r in records:
            if r.get("agent") == "qwen-char" and "benchmark" not in r:
                r.update({"k": 4, "sampled_avg": 0.3, "sampled_pass": 0.6} if r["step"] == 0 else
                         {"k": 4, "sampled_avg": avg, "sampled_pass": pas} if r["step"] == 2 else {})
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lambda line: None)
    sampled = json.loads((out / "summary.json").read_text())["results"]["qwen-char"]["hacpo"]["sampled"]
    assert sampled["k"] == 4
    assert sampled["start_avg"][0] == pytest.approx(0.3) and sampled["start_pass"][0] == pytest.approx(0.6)
    # final avg@4: mean (0.5 + 0.7) / 2 = 0.6, sd = |0.7 − 0.5| / √2 = 0.1414214
    assert sampled["final_avg"]["mean_sd"] == pytest.approx([0.6, 0.2 / math.sqrt(2)])
    assert sampled["final_pass"]["mean_sd"] == pytest.approx([0.85, 0.1 / math.sqrt(2)])
    # paired: d = [0.1, 0.2], mean 0.15, sd 0.0707107, se = sd / √2 = 0.05
    vs = sampled["vs"]["gspo"]
    assert (vs["mean"], vs["se"], vs["n"]) == pytest.approx((0.15, 0.05, 2))
    text = report.read_text()
    assert "| algorithm | start avg@4 | final avg@4 (mean ± sd) | Δ avg@4 vs gspo (± se) |" in text
    assert "| hacpo | 0.300 ± 0.000 | 0.600 ± 0.141 | +0.150 ± 0.050 |" in text
    # llama-bpe evaluated greedily only: no sampled table under it
    assert "sampled" not in json.loads((out / "summary.json").read_text())["results"]["llama-bpe"]["hacpo"]
    assert text.split("### llama-bpe")[1].split("## Cost per run")[0].count("avg@") == 0


@pytest.mark.model
def test_dry_run_says_what_each_run_would_do_and_changes_nothing(comparison, tiny_models, tmp_path, capsys):
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    shutil.rmtree(out / "runs/hacpo/seed-1/checkpoints/step-000002")  # resume from step 1
    shutil.rmtree(out / "runs/gspo/seed-1")  # never trained
    before = _files(out)
    argv = ["--preset", "tiny-test", "--algos", ALGOS, "--seeds", str(SEEDS), "--output", str(out), "--dry-run"]
    for o in _overrides(tiny_models):
        argv += ["--set", o]
    assert cmd_compare(_compare_args(*argv)) == 0
    printed = capsys.readouterr().out
    for line in ("[1/4] hacpo seed 0: finished: reused", "[2/4] gspo seed 0: finished: reused",
                 "[3/4] hacpo seed 1: resume from step 1 of 2", "[4/4] gspo seed 1: train 2 steps",
                 "dry run: 2 of 4 runs to train; about "):
        assert line in printed, line
    assert "report in" not in printed
    # the estimate: hacpo seed 1's one step left at hacpo seed 0's measured seconds per step, plus gspo seed 1's
    # two at gspo seed 0's
    per_step = {a: json.loads((out / "runs" / a / "seed-0" / "compare.json").read_text())["wall_s"] / 2
                for a in ("hacpo", "gspo")}
    assert f"about {per_step['hacpo'] + 2 * per_step['gspo']:.0f} s" in printed
    assert _files(out) == before
    assert not (out / "runs/gspo/seed-1").exists()


@pytest.mark.model
def test_report_only_writes_the_report_from_the_finished_runs_and_trains_nothing(comparison, tiny_models,
                                                                                    tmp_path, capsys):
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    (out / "report.md").unlink()
    shutil.rmtree(out / "runs/gspo/seed-1")  # still to train (another process may be training it)
    runs_before = _files(out / "runs")
    argv = ["--preset", "tiny-test", "--algos", ALGOS, "--seeds", str(SEEDS), "--output", str(out), "--report-only"]
    for o in _overrides(tiny_models):
        argv += ["--set", o]
    assert cmd_compare(_compare_args(*argv)) == 0
    printed = capsys.readouterr().out
    assert "left out of the report: gspo seed 1 (not finished: train)" in printed
    assert _files(out / "runs") == runs_before and not (out / "runs/gspo/seed-1").exists()
    summary = json.loads((out / "summary.json").read_text())
    hacpo = summary["results"]["qwen-char"]["hacpo"]
    assert sorted(hacpo["final"]["by_seed"]) == ["0", "1"]  # every finished run of hacpo is in the report
    assert hacpo["vs"]["gspo"]["seeds"] == [0]  # paired over the seeds both finished
    # the report says which algorithm's mean is over fewer seeds than the comparison's, and which runs it lacks
    rows = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("| gspo | ")]
    finals = [line.split(" | ")[2] for line in rows[:2]]  # the two agents' accuracy tables
    assert finals and all(f.endswith(" (1 of 2 seeds)") for f in finals), finals
    assert not any("of 2 seeds" in line for line in (out / "report.md").read_text().splitlines()
                   if line.startswith("| hacpo | ") and "lock-step" not in line)
    assert "`--report-only` trains them): gspo seed 1." in (out / "report.md").read_text()
    shutil.rmtree(out / "runs/gspo/seed-0")
    with pytest.raises(ConfigError, match=r"--report-only: no finished run of gspo in .*; drop it from --algos"):
        run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lambda _: None,
                       report_only=True)


def test_a_config_file_layers_on_the_preset_as_in_train(tmp_path, capsys):
    """``hacrl compare --preset X --config mine.yaml``: the file's settings win over the preset's, the rest of
    the preset stays, and the command written into the report names both."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  steps: 3\n")
    out = tmp_path / "cmp"
    argv = ["--preset", "tiny-test", "--config", str(mine), "--algos", "hacpo,gspo", "--seeds", "1",
            "--output", str(out), "--dry-run"]
    assert cmd_compare(_compare_args(*argv)) == 0
    printed = capsys.readouterr().out
    assert "[1/2] hacpo seed 0: train 3 steps" in printed and "[2/2] gspo seed 0: train 3 steps" in printed
    from hacrl.report.compare import default_command

    cmd = default_command("tiny-test", mine, ["hacpo"], [0], [], out)
    assert cmd.startswith(f"hacrl compare --preset tiny-test --config {mine} --algos hacpo")


@pytest.mark.model
def test_a_wall_time_below_the_phases_is_counted_as_the_phases_and_marked(comparison, tiny_models, tmp_path):
    # a record that missed an invocation (killed before compare.json was kept after every step) has less wall
    # time than the run's own phase timings: the cost counts that run's phases, and both tables say so
    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    short = out / "runs/gspo/seed-1/compare.json"
    short.write_text(json.dumps({**json.loads(short.read_text()), "wall_s": 1e-3}))
    run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lambda _: None, report_only=True)
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["algorithm"], r["seed"]): r for r in summary["runs"]}
    assert [k for k, r in rows.items() if r["wall_short"]] == [("gspo", 1)]
    gspo, hacpo = summary["cost"]["gspo"], summary["cost"]["hacpo"]
    assert (gspo["wall_measured"], gspo["walls_measured"], gspo["runs"]) == (False, 1, 2)
    assert gspo["wall_s"][0] == pytest.approx((rows["gspo", 0]["wall_s"] + rows["gspo", 1]["phase_s"]) / 2)
    assert hacpo["wall_measured"] and hacpo["wall_s"][0] == pytest.approx(
        (rows["hacpo", 0]["wall_s"] + rows["hacpo", 1]["wall_s"]) / 2)
    text = (out / "report.md").read_text()
    assert "(1 of 2 runs: phases)" in text and " 0.0 (part) | " in text and "*(part)*: the recorded wall" in text


@pytest.mark.model
@pytest.mark.filterwarnings("ignore:No artists with labels")  # the stand-in draws nothing
def test_a_curve_of_fewer_seeds_than_the_comparison_says_how_many(comparison, tmp_path, monkeypatch):
    # --report-only with an algorithm still training: its curve is the mean of fewer seeds, and its legend
    # entry says so (the figure's title gives the comparison's count)
    from hacrl.report import plots

    out, _, _ = comparison
    summary = json.loads((out / "summary.json").read_text())
    summary["results"]["qwen-char"]["gspo"]["final"]["by_seed"] = {"0": 0.5}  # seed 1 not finished
    drawn = []
    monkeypatch.setattr(plots, "draw_curves", lambda ax, *a, labels=None, **k: drawn.append(labels))
    plots.write_plots(summary, tmp_path / "plots")
    assert drawn[0] == drawn[1] == {"hacpo": "hacpo", "gspo": "gspo (1 seed)"}  # qwen-char, both panels
    assert drawn[2] == {"hacpo": "hacpo", "gspo": "gspo"}  # llama-bpe: both seeds of both
    monkeypatch.undo()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    plots.draw_curves(ax, summary["results"]["qwen-char"], ["hacpo", "gspo"], {"hacpo": "C0", "gspo": "C1"},
                      labels=drawn[0])
    assert ax.get_legend_handles_labels()[1] == ["hacpo", "gspo (1 seed)"]
    plt.close(fig)


@pytest.mark.model
def test_a_run_another_process_is_training_is_named_before_anything_trains(comparison, tiny_models, tmp_path):
    # side-by-side lanes (one compare per algorithm or seed into one output): a full compare started meanwhile
    # stops at once with the run and its holder, rather than after hours at that run; --dry-run marks it
    import os
    import socket

    from hacrl.run.rundir import RunLock, lock_holder

    src, _, _ = comparison
    out = tmp_path / "cmp"
    shutil.copytree(src, out)
    shutil.rmtree(out / "runs/gspo/seed-1")
    busy = out / "runs/gspo/seed-1"
    assert lock_holder(busy) is None  # no directory yet
    before = {p: p.read_bytes() for p in (out / "runs").rglob("*") if p.is_file()}
    lines: list[str] = []
    with RunLock(busy):
        me = f"pid {os.getpid()} on {socket.gethostname()}"
        assert lock_holder(busy) == me
        with pytest.raises(ConfigError, match=rf"runs/gspo/seed-1 is being trained by another hacrl process "
                                              rf"\({me}\); wait for it, or leave gspo seed 1 out"):
            run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append)
        assert not any(": trained in" in line or "resumed" in line for line in lines)
        run_comparison("tiny-test", ALGOS, SEEDS, _overrides(tiny_models), out, log=lines.append, dry_run=True)
        assert f"[4/4] gspo seed 1: train 2 steps (being trained now by {me})" in lines
        assert "[2/4] gspo seed 0: finished: reused" in lines  # a finished run is not probed
    assert lock_holder(busy) is None  # released
    assert {p: p.read_bytes() for p in (out / "runs").rglob("*") if p.is_file() and p.parent != busy} == before


def test_the_reading_says_when_a_pair_has_fewer_seeds_than_the_comparison():
    # --report-only while a baseline's seed still trains: the pair is over the seeds both finished, and the
    # reading's every mention of that pair says how many (a claim as strong as its seeds)
    from hacrl.report.reading import automatic_reading

    def st(mean, lo, hi, seeds):
        iv = {"mean": mean, "lo": lo, "hi": hi, "includes_zero": lo <= 0 <= hi}
        return {"mean": mean, "p": 0.01, "seeds": seeds, "interval": iv}

    summary = {"diagnostics": {}, "baselines": ["gspo", "slow"], "algorithms": ["hacpo", "gspo", "slow"],
               "seeds": [0, 1, 2], "runs_with_problem_records": 6,
               "results": {"a": {"hacpo": {"final": {"mean": 0.6}, "vs": {"gspo": st(0.1, 0.05, 0.15, [0, 1, 2]),
                                                                         "slow": st(0.2, 0.1, 0.3, [0, 1])}},
                                 "gspo": {"final": {"mean": 0.5}, "vs": {}},
                                 "slow": {"final": {"mean": 0.4}, "vs": {}}}}}
    missing, text = automatic_reading(summary)
    assert missing.startswith("Missing baseline: imitation")
    assert "+0.200 vs slow (95% interval [+0.100, +0.300]; t-test p = 0.01; 2 of 3 seeds)" in text
    assert "+0.100 vs gspo (95% interval [+0.050, +0.150]; t-test p = 0.01)" in text
    assert "hacpo vs slow on a (+0.200, 2 of 3 seeds)" in text and "hacpo vs gspo on a (+0.100)" in text


@pytest.mark.model
def test_a_stopped_run_is_recorded_as_stopped_and_resumes(tiny_models, tmp_path):
    # SIGTERM (a scheduler's preemption) in step 1 of 2: the step finishes, a checkpoint is written, the record
    # says "stopped" at step 1, and the same command resumes it to the end
    import os
    import signal

    out = tmp_path / "cmp"

    def log(line):
        if "step 1/2" in line:
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler asks for a stop after this step

    with pytest.raises(KeyboardInterrupt):
        run_comparison("tiny-test", "gspo", 1, _overrides(tiny_models), out, log=log, log_steps=True)
    record = json.loads((out / "runs/gspo/seed-0/compare.json").read_text())
    assert [(i["status"], i["from_step"], i["to_step"]) for i in record["invocations"]] == [("stopped", 0, 1)]
    run_comparison("tiny-test", "gspo", 1, _overrides(tiny_models), out, log=lambda _: None)
    record = json.loads((out / "runs/gspo/seed-0/compare.json").read_text())
    assert [(i["status"], i["from_step"], i["to_step"]) for i in record["invocations"]] == [
        ("stopped", 0, 1), ("resumed", 1, 2)]


def test_a_comparison_with_epochs_plans_the_counted_steps(tmp_path, capsys):
    """``trainer.num_train_epochs`` is counted over the task's training problems before the runs are planned,
    as the trainer counts it: the plan (and the resume and reuse decisions) use that count, not the preset's;
    epochs over a builtin task are refused in one line before anything trains."""
    data = tmp_path / "train.jsonl"
    data.write_text("".join(f'{{"question": "{i:02d}+{i:02d}=", "answer": "{2 * i}"}}\n' for i in range(20)))
    out = tmp_path / "cmp"
    sets = ["task.kind=dataset", f"task.train_path={data}", "task.test_fraction=0.5", "trainer.eval_size=5",
            "trainer.batch_size=4", "trainer.steps=null", "trainer.num_train_epochs=1"]  # ceil(10 / 4) = 3 steps
    argv = ["--preset", "tiny-test", "--algos", "hacpo,gspo", "--seeds", "1", "--output", str(out), "--dry-run"]
    assert cmd_compare(_compare_args(*argv, *(x for s in sets for x in ("--set", s)))) == 0
    printed = capsys.readouterr().out
    assert "[1/2] hacpo seed 0: train 3 steps" in printed and "[2/2] gspo seed 0: train 3 steps" in printed, printed
    with pytest.raises(ConfigError, match=r"^trainer\.num_train_epochs: task 'add2' draws new problems"):
        cmd_compare(_compare_args(*argv, "--set", "trainer.steps=null", "--set", "trainer.num_train_epochs=1"))
    assert not (out / "runs").exists()
