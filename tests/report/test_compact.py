"""Compact run records (``hacrl compare --compact``): lines read back exactly from records.parquet, every reader
the same before and after, nothing removed unless verified, finished runs only, a compacted comparison reused
and extended by hacrl compare; a real tiny comparison regenerates its summary.json; the committed
compacted directory under results/ regenerates its committed summary.json."""

from __future__ import annotations

import errno
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hacrl.errors import DiskFull, InputError
from hacrl.report import compact as compact_module
from hacrl.report.compact import compact, tree_bytes
from hacrl.report.runs import pruned_run_steps, read_problem_records, read_record
from hacrl.run import records as records_module
from hacrl.run.provenance import read_provenance
from hacrl.run.records import (
    RECORDS_FILE,
    Records,
    has_run,
    parse_lines,
    run_text,
    same_lines,
    to_table,
    write_table,
)
from hacrl.run.sinks import read_evals, read_jsonl, read_problem_evals, read_sampled_evals

pa = pytest.importorskip("pyarrow")

REPO = Path(__file__).resolve().parents[2]
IDS = ["add2/1+2", "add2/3+4", "add2/5+6"]


# ---- hand-made runs ---------------------------------------------------------------------------------------

def _lines(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _make_run(root: Path, algo: str, seed: int, steps: int = 2, finished: bool = True) -> Path:
    """A run as hacrl compare leaves it with --keep-checkpoints none: metrics (sorted keys, ints and floats,
    a null), evaluations, per-problem records (with sampled answers and texts), samples, event files."""
    d = root / "runs" / algo / f"seed-{seed}"
    (d / "samples").mkdir(parents=True)
    (d / "tensorboard").mkdir()
    (d / "tensorboard" / "events.out").write_bytes(b"\0" * 5000)
    (d / "config.yaml").write_text(f"run: {{seed: {seed}}}\ntask: {{}}\nagents: []\nrollout: {{}}\nalgorithm: {{}}\n"
                                   "trainer: {mode: lockstep}\n")
    (d / "provenance.jsonl").write_text('{"commit": "abc"}\n')
    metrics, evals, problems = [], [], []
    for step in range(steps + 1):
        acc = round(0.1 * step + 0.01 * seed, 3)
        metrics.append({"agent/a/grad_norm": None if step == 1 else 1.5 * step, "agent/a/optimizer_steps": step,
                        "eval/a/greedy_acc": acc, "step": step})
        evals.append({"step": step, "task": "add2", "agent": "a", "n": 3, "greedy_acc": acc, "k": 2,
                      "sampled_avg": 0.5, "sampled_pass": 1.0})
        problems.append({"step": step, "agent": "a", "task": "add2", "ids": IDS,
                         "reward": [1.0, float(step > 0), 0.0], "unscorable": [], "finished": [True, True, False],
                         "tokens": [3, 4, 16], "texts": ["3", "7 ✓", "1\n2"],
                         "sampled": [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]],
                         "sampled_finished": [[True, True], [True, False], [True, True]]})
        problems.append({"step": step, "agent": "a", "benchmark": "gsm8k", "ids": [7, 8], "reward": [0, 1.0]})
        (d / "samples" / f"step-{step:06d}.jsonl").write_text('{"problem_id": "add2/1+2", "answers": []}\n')
    (d / "metrics.jsonl").write_text(_lines(metrics) + '{"step": 3, "agent/a/gr')  # a line cut short by a kill
    (d / "eval.jsonl").write_text(_lines(evals))
    (d / "eval_problems.jsonl").write_text(_lines(problems))
    invocations = [{"status": "trained" if finished else "cut short", "from_step": 0, "to_step": steps,
                    "wall_s": 1.0}]
    (d / "compare.json").write_text(json.dumps({"wall_s": 1.0, "algorithm": algo, "seed": seed,
                                                "invocations": invocations, "checkpoints_removed": finished}))
    return d


def _comparison(root: Path, algos=("hacpo", "gspo"), seeds=(0, 1)) -> Path:
    for algo in algos:
        for seed in seeds:
            _make_run(root, algo, seed)
    (root / "summary.json").write_text("{}")
    return root


def _reads(run_dir: Path) -> dict:
    """What every reader of a run gets back."""
    return {"metrics": read_jsonl(run_dir / "metrics.jsonl"), "eval": read_jsonl(run_dir / "eval.jsonl"),
            "problems": read_problem_evals(run_dir), "evals": read_evals(run_dir),
            "sampled": read_sampled_evals(run_dir), "records": read_problem_records(run_dir),
            "finished": pruned_run_steps(run_dir), "config": run_text(run_dir / "config.yaml"),
            "provenance": read_provenance(run_dir), "run": has_run(run_dir),
            "record": {k: v for k, v in read_record(run_dir).items() if k != "compacted"}}


def _same(a: dict, b: dict) -> bool:
    return repr(a) == repr(b)  # 1, 1.0 and True, key order, NaN and -0.0 told apart


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".hacrl.lock"}


# ---- the records file -------------------------------------------------------------------------------------

def test_every_line_reads_back_as_it_was(tmp_path):
    """Types kept apart (1, 1.0, True), NaN and ±inf, -0.0, a null beside an absent key, unsorted keys, nested
    lists, a key whose values mix types (JSON text), a dict value, a huge int, and lines that are no object."""
    metrics = parse_lines(_lines([
        {"step": 0, "x": 1, "y": 1.0, "z": True, "n": None, "f": float("nan"), "g": float("inf"), "h": -0.0},
        {"z": False, "step": 1, "x": 2, "mixed": 1, "big": 2 ** 70, "d": {"a": [1, None]}},
        {"step": 2, "mixed": "one", "f": -float("inf")}, {"no_step": 1}]) + '[1, 2]\n{"step": 3, "x"\n\n')
    problems = parse_lines(_lines([
        {"step": 0, "agent": "a", "ids": IDS, "reward": [1.0, 0.0, 1.0], "unscorable": [],
         "sampled": [[1.0], [], [0.0, 1.0]], "texts": ["é", "", "a\u2028b"], "tokens": [1, 2, 3]},
        {"step": 0, "agent": "a", "benchmark": "b", "ids": [1, 2], "reward": [1, 0.5], "unscorable": [0]}]))
    runs = {("hacpo@delta=0.6", 0): {"metrics": metrics, "eval_problems": problems}, ("gspo", 3): {"eval": []}}
    path = tmp_path / RECORDS_FILE
    write_table(to_table(runs), path)
    back = Records(path)
    assert back.runs() == [("hacpo@delta=0.6", 0)]  # a run with no lines holds no row
    assert same_lines(back.lines("hacpo@delta=0.6", 0, "metrics"), metrics)
    assert same_lines(back.lines("hacpo@delta=0.6", 0, "eval_problems"), problems)
    assert back.lines("hacpo@delta=0.6", 0, "eval") == [] and back.lines("gspo", 3, "metrics") == []
    got = back.lines("hacpo@delta=0.6", 0, "metrics")
    assert list(got[1]) == ["z", "step", "x", "mixed", "big", "d"] and "n" in got[0] and "n" not in got[1]
    assert math.isnan(got[0]["f"]) and math.copysign(1, got[0]["h"]) == -1 and type(got[0]["x"]) is int
    assert got[4:] == ["[1, 2]", '{"step": 3, "x"', ""]
    schema = back.table.schema  # typed columns where a key's values agree, JSON text where they do not
    assert schema.field("metrics:x").type == pa.int64() and schema.field("metrics:y").type == pa.float64()
    assert schema.field("eval_problems:sampled").type == pa.list_(pa.list_(pa.float64()))
    assert schema.field("eval_problems:ids").type == pa.string()  # strings here, ints there: JSON text
    assert schema.field("metrics:mixed").metadata == {b"encoding": b"json"}


def test_the_comparison_of_lines_tells_every_difference():
    a = parse_lines('{"a": 1, "b": 2}\n')
    assert same_lines(a, parse_lines('{"a": 1, "b": 2}'))
    for other in ('{"b": 2, "a": 1}', '{"a": 1.0, "b": 2}', '{"a": true, "b": 2}', '{"a": 1}', ""):
        assert not same_lines(a, parse_lines(other)), other


# ---- compacting a comparison ------------------------------------------------------------------------------

def test_every_reader_gets_the_same_records_from_a_compacted_comparison(tmp_path):
    cmp = _comparison(tmp_path / "cmp")
    runs = sorted(cmp.glob("runs/*/seed-*"))
    texts = {d: {n: (d / n).read_text() for n in ("config.yaml", "provenance.jsonl")} for d in runs}
    before = {d: _reads(d) for d in runs}
    size = tree_bytes(cmp)
    out: list[str] = []
    result = compact(cmp, log=out.append)
    assert len(result.compacted) == 4 and not result.left
    assert {d: _reads(d) for d in runs} == before and all(_same(before[d], _reads(d)) for d in runs)
    assert tree_bytes(cmp) < size and result.after_bytes == tree_bytes(cmp)
    # only the excerpt is left: the first and last step of each algorithm's lowest seed
    assert sorted(p.relative_to(cmp).as_posix() for p in cmp.rglob("*") if p.is_file()) == [
        "records.parquet", "runs/gspo/seed-0/samples/step-000000.jsonl", "runs/gspo/seed-0/samples/step-000002.jsonl",
        "runs/hacpo/seed-0/samples/step-000000.jsonl", "runs/hacpo/seed-0/samples/step-000002.jsonl", "summary.json"]
    assert not (cmp / "runs/hacpo/seed-1").exists()
    back = Records(cmp / RECORDS_FILE)
    for d in runs:  # the whole texts byte for byte; the record names every file it moved
        assert all(run_text(d / n) == t for n, t in texts[d].items())
        assert json.loads(back.text(d.parent.name, int(d.name[5:]), "compare.json"))["compacted"] == [
            "metrics.jsonl", "eval.jsonl", "eval_problems.jsonl", "config.yaml", "provenance.jsonl"]
    assert "compacted 4 runs into records.parquet" in out[0]
    again = compact(cmp, log=out.append)  # nothing left to do
    assert (again.compacted, len(again.kept), again.removed) == ([], 4, [])


def test_a_comparison_compacted_by_an_older_hacrl_is_read_and_folded(tmp_path, monkeypatch):
    """Format 1: the line files in the records file, compare.json, config.yaml and provenance.jsonl still files."""
    cmp = _comparison(tmp_path / "cmp")
    runs = sorted(cmp.glob("runs/*/seed-*"))
    before = {d: _reads(d) for d in runs}
    lines = {(d.parent.name, int(d.name[5:])): {s: records_module.read_lines(d / f"{s}.jsonl")
                                                for s in records_module.SOURCES} for d in runs}
    monkeypatch.setattr(records_module, "FORMAT_VERSION", 1)
    write_table(to_table(lines), cmp / RECORDS_FILE)
    monkeypatch.undo()
    for d in runs:
        record = json.loads((d / "compare.json").read_text())
        (d / "compare.json").write_text(json.dumps({**record, "compacted": ["metrics.jsonl", "eval.jsonl",
                                                                            "eval_problems.jsonl"]}))
        for name in ("metrics.jsonl", "eval_problems.jsonl", "eval.jsonl"):
            (d / name).unlink()
    assert {d: _reads(d) for d in runs} == before
    result = compact(cmp, log=lambda _: None)
    assert len(result.compacted) == 4 and not (cmp / "runs/hacpo/seed-1").exists()
    assert all(_same(before[d], _reads(d)) for d in runs)


def test_a_dry_run_changes_nothing(tmp_path):
    cmp = _comparison(tmp_path / "cmp")
    files = _files(cmp)
    out: list[str] = []
    result = compact(cmp, log=out.append, dry_run=True)
    assert _files(cmp) == files and len(result.compacted) == 4 and result.removed_bytes > 0
    assert out[0].startswith(f"{cmp}: would compact 4 runs")


def test_a_failed_check_or_write_leaves_the_directory_as_it_was(tmp_path, monkeypatch):
    cmp = _comparison(tmp_path / "cmp")
    files = _files(cmp)
    real = compact_module.same_lines
    monkeypatch.setattr(compact_module, "same_lines", lambda a, b: False)  # the read-back differs
    with pytest.raises(InputError, match="differs from the originals.*nothing was removed"):
        compact(cmp, log=lambda _: None)
    assert _files(cmp) == files

    def full(table, path):
        path.write_bytes(b"PAR1")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(compact_module, "same_lines", real)
    monkeypatch.setattr(compact_module, "write_table", full)
    with pytest.raises(DiskFull):
        compact(cmp, log=lambda _: None)
    assert _files(cmp) == files


def test_a_compaction_stopped_part_way_is_finished_by_the_next(tmp_path, monkeypatch):
    cmp = _comparison(tmp_path / "cmp")
    runs = sorted(cmp.glob("runs/*/seed-*"))
    before = {d: _reads(d) for d in runs}
    real, calls = compact_module._finish_run, []

    def stop_at_the_second(run_dir, record, remove):
        calls.append(run_dir)
        if len(calls) == 2:  # its compare.json names the records file; half its files are still there
            compact_module.write_atomic(run_dir / "compare.json", record)
            for path in remove[: len(remove) // 2]:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            raise KeyboardInterrupt
        real(run_dir, record, remove)

    monkeypatch.setattr(compact_module, "_finish_run", stop_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        compact(cmp, log=lambda _: None)
    assert {d: _reads(d) for d in runs} == before  # every reader meanwhile: files where they are, else records
    monkeypatch.setattr(compact_module, "_finish_run", real)
    result = compact(cmp, log=lambda _: None)
    assert len(result.compacted) == 3 and len(result.kept) == 1
    assert {d: _reads(d) for d in runs} == before and not list(cmp.rglob("*.yaml"))


def test_unfinished_runs_and_runs_with_checkpoints_are_left_as_they_are(tmp_path):
    cmp = _comparison(tmp_path / "cmp", algos=("hacpo",))
    _make_run(cmp, "gspo", 0, finished=False)
    (cmp / "runs/hacpo/seed-1/checkpoints/step-000002").mkdir(parents=True)
    left = [cmp / "runs/gspo/seed-0", cmp / "runs/hacpo/seed-1"]
    files = {d: _files(d) for d in left}
    out: list[str] = []
    result = compact(cmp, log=out.append)
    assert result.compacted == [("hacpo", 0)]
    assert set(result.left) == {("gspo", 0), ("hacpo", 1)} and {d: _files(d) for d in left} == files
    assert "left as it is: hacpo/seed-1: holds checkpoints/" in "\n".join(out)
    assert "left as it is: gspo/seed-0: not finished" in "\n".join(out)


def test_new_runs_beside_compacted_ones_are_read_and_join_the_file(tmp_path):
    cmp = _comparison(tmp_path / "cmp", seeds=(0,))
    compact(cmp, log=lambda _: None)
    new = _make_run(cmp, "hacpo", 1, steps=3)  # a seed added later, in the files' layout
    reads = _reads(new)
    assert reads["finished"] == 3 and len(reads["metrics"]) == 4
    result = compact(cmp, log=lambda _: None)
    assert result.compacted == [("hacpo", 1)] and len(result.kept) == 2
    assert _same(_reads(new), reads) and Records(cmp / RECORDS_FILE).runs() == [
        ("gspo", 0), ("hacpo", 0), ("hacpo", 1)]
    assert (cmp / "runs/hacpo/seed-0/samples").is_dir() and not new.exists()  # one excerpt an arm


def test_a_compacted_run_is_reused_and_never_trained_over(tmp_path):
    import yaml

    from hacrl.config import ConfigError, load_config
    from hacrl.report.runs import plan_run

    cmp = _comparison(tmp_path / "cmp", algos=("hacpo",), seeds=(0, 1))
    run = cmp / "runs/hacpo/seed-1"
    cfg = load_config(overrides=["run.seed=1", "trainer.steps=2"])
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    compact(cmp, log=lambda _: None)
    assert not run.exists() and has_run(run)  # its directory is gone: the records file holds it
    assert plan_run(cfg, run, label="hacpo").action == "reuse"
    with pytest.raises(ConfigError, match="set trainer.steps=2 or use another --output .the run is compacted"):
        plan_run(load_config(overrides=["run.seed=1", "trainer.steps=3"]), run, label="hacpo")
    with pytest.raises(ConfigError, match="was trained with run.seed=1, now 0; .*; use another --output .the run is"):
        plan_run(load_config(overrides=["trainer.steps=2"]), run, label="hacpo")


def test_a_missing_records_file_is_one_line_naming_it(tmp_path, monkeypatch):
    cmp = _comparison(tmp_path / "cmp", algos=("hacpo",), seeds=(0,))
    monkeypatch.setattr(compact_module, "_finish_run", lambda run_dir, record, remove: (
        compact_module.write_atomic(run_dir / "compare.json", record), [p.unlink() for p in remove
                                                                         if p.is_file()]))
    compact(cmp, log=lambda _: None)  # stopped before compare.json went: it names the moved files
    (cmp / RECORDS_FILE).unlink()
    with pytest.raises(InputError, match=r"metrics.jsonl is in .*records.parquet, which is missing or lacks it; res"):
        read_jsonl(cmp / "runs/hacpo/seed-0/metrics.jsonl")
    with pytest.raises(InputError, match="config.yaml is in .*restore that file"):
        run_text(cmp / "runs/hacpo/seed-0/config.yaml")
    with pytest.raises(InputError, match="restore that file"):
        compact(cmp, log=lambda _: None)


def test_the_command_line(tmp_path):
    cmp = _comparison(tmp_path / "cmp", algos=("hacpo",), seeds=(0,))
    from hacrl.cli import main

    assert main(["compare", "--compact", str(cmp), "--report-only"]) == 2
    assert main(["compare", "--compact", str(tmp_path / "none")]) == 2
    assert main(["compare", "--compact", str(cmp), "--dry-run"]) == 0 and not (cmp / RECORDS_FILE).exists()
    assert main(["compare", "--compact", str(cmp)]) == 0 and (cmp / RECORDS_FILE).is_file()


def test_pyarrow_is_imported_only_for_a_compacted_run(tmp_path):
    cmp = _comparison(tmp_path / "cmp", algos=("hacpo",), seeds=(0, 1))
    compact(cmp, log=lambda _: None)
    code = ("import sys; from pathlib import Path; import hacrl; from hacrl.run.sinks import read_jsonl\n"
            f"read_jsonl(Path({str(tmp_path / 'none.jsonl')!r})); assert 'pyarrow' not in sys.modules\n"
            f"assert read_jsonl(Path({str(cmp / 'runs/hacpo/seed-1/metrics.jsonl')!r}))\n"
            "assert 'pyarrow' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bench_mechanism_reads_a_compacted_comparison(tmp_path, load_script):
    mech = load_script("bench/mechanism.py", "bench_mechanism_compact")
    cmp = _comparison(tmp_path / "cmp")
    runs = sorted(cmp.glob("runs/*/seed-*"))
    before = {d: mech.run_measures(d) for d in runs}
    compact(cmp, log=lambda _: None)
    assert {d: mech.run_measures(d) for d in runs} == before


# ---- a real comparison, and the committed one ------------------------------------------------------------

def _numbers(summary: dict) -> dict:
    """summary.json without what changes with each invocation: its time, its own wall time and what it did with
    each run (trained, reused)."""
    out = {k: v for k, v in summary.items() if k not in ("created", "wall_s")}
    out["runs"] = [{k: v for k, v in run.items() if k != "status"} for run in summary.get("runs", [])]
    return out


@pytest.mark.model
def test_a_trained_comparison_compacted_reports_the_same_and_extends(tmp_path, monkeypatch):
    from hacrl.agents.tiny import build_bpe_tokenizer, build_char_tokenizer, build_model
    from hacrl.report.compare import run_comparison

    models = tmp_path / "models"
    for name, arch, make_tok in (("qwen-char", "qwen2-small", build_char_tokenizer),
                                 ("llama-bpe", "llama-base", build_bpe_tokenizer)):
        tok = make_tok()
        build_model(arch, tok).save_pretrained(models / name)
        tok.save_pretrained(models / name)
    overrides = [f"agents.qwen-char.model={models / 'qwen-char'}", f"agents.llama-bpe.model={models / 'llama-bpe'}",
                 "trainer.steps=2", "trainer.eval_every=1", "trainer.eval_size=20", "trainer.batch_size=4",
                 "rollout.rollouts_per_prompt=4", "trainer.threads=1"]
    monkeypatch.chdir(tmp_path)
    out = Path("cmp")

    def report(seeds: int, report_only: bool = True) -> dict:
        run_comparison("tiny-test", "hacpo,gspo", seeds, overrides, out, log=lambda _: None,
                       keep_checkpoints="none", report_only=report_only, command="hacrl compare (test)")
        return _numbers(json.loads((out / "summary.json").read_text()))

    trained = report(2, report_only=False)
    original = report(2)
    size = tree_bytes(out)
    compact(out, log=lambda _: None)
    assert report(2) == original and tree_bytes(out) < size
    assert original["runs_with_problem_records"] == 4 and original["results"]["qwen-char"]["hacpo"]["vs"]
    assert trained == original  # as the training invocation wrote it
    # a seed added beside the compacted runs: they are reused, the new ones trained in files and read
    lines: list[str] = []
    run_comparison("tiny-test", "hacpo,gspo", 3, overrides, out, log=lines.append, keep_checkpoints="none",
                   command="hacrl compare (test)")
    assert sum("reused" in line for line in lines) == 4 and sum(": trained" in line for line in lines) == 2
    extended = report(3)
    assert extended["seeds"] == [0, 1, 2] and extended["runs_with_problem_records"] == 6
    compact(out, log=lambda _: None)
    assert report(3) == extended and not list(out.rglob("metrics.jsonl"))


# every compacted directory under results/; all but the small tiny-model-evidence take a minute or more each
COMMITTED = [pytest.param(p.parent, id=str(p.parent.relative_to(REPO)),
                          marks=() if p.parent.name == "tiny-model-evidence" else pytest.mark.slow)
             for p in sorted((REPO / "results").rglob(RECORDS_FILE))
             if (p.parent / "summary.json").is_file()]  # one still being run (no report yet) has nothing to match


@pytest.mark.parametrize("source", COMMITTED)
def test_a_committed_compacted_comparison_regenerates_its_report(source, tmp_path, monkeypatch):
    """Each compacted comparison under results/ (results/tiny-model-evidence; more as results/README.md's tranches
    go in): its command with --report-only writes its committed summary.json again, every number and word the
    report shows (only the time, this invocation's wall time and what it did with each run differ; keys the
    summary gained since are new)."""
    import argparse
    import shlex

    from hacrl.cli.compare import add_compare_parser
    from hacrl.report.compare import parse_algos, parse_seeds, run_comparison

    committed = json.loads((source / "summary.json").read_text())
    parser = argparse.ArgumentParser()
    add_compare_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(shlex.split(committed["command"])[1:])
    monkeypatch.chdir(tmp_path)  # the command's relative paths: its --output here, the rest the repository's
    for entry in REPO.iterdir():
        if entry.name not in ("results", ".git"):
            (tmp_path / entry.name).symlink_to(entry)
    out = Path(args.output)
    shutil.copytree(source, out)
    run_comparison(args.preset, parse_algos(args.algos), parse_seeds(args.seeds), args.overrides, out,
                   log=lambda _: None, command=committed["command"], baselines=args.baselines,
                   keep_checkpoints=args.keep_checkpoints, report_only=True, config_path=args.config)
    regenerated = json.loads((out / "summary.json").read_text())
    assert {k: v for k, v in _numbers(regenerated).items() if k in committed} == _numbers(committed)
