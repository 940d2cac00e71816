"""Provenance: the record every run invocation appends (hacrl.run.provenance) and what ``hacrl compare`` makes
of it (hacrl.report.provenance): fields, resumes, unknown git, absent libraries, damaged lines, runs from
different code named in the report's opening, runs without records listed."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from hacrl.report.provenance import provenance_summary, provenance_warning, render_provenance
from hacrl.report.runs import RunOutcome
from hacrl.run import provenance as prov
from hacrl.run.provenance import LIBRARIES, PROVENANCE_FILE, collect, read_provenance, record_provenance


def test_every_invocation_appends_one_record_with_every_field(tmp_path):
    run = tmp_path / "run"
    first = record_provenance(run)
    again = record_provenance(run, from_step=3)
    recs = read_provenance(run)
    assert recs == [first, again]
    assert (first["resumed"], first["from_step"], again["resumed"], again["from_step"]) == (False, 0, True, 3)
    assert set(first) == {"time", "resumed", "from_step", "hacrl", "python", "libraries", "device",
                          "torch_threads"}
    assert set(first["hacrl"]) == {"version", "commit", "dirty"} and first["hacrl"]["version"]
    assert list(first["libraries"]) == list(LIBRARIES)
    assert first["libraries"]["torch"] == importlib.metadata.version("torch")
    assert first["device"]["kind"] in ("cpu", "cuda") and first["device"]["cpu_capability"]
    assert isinstance(first["torch_threads"], int) and first["time"].endswith("Z")


def test_no_git_and_absent_libraries_are_recorded_as_unknown_never_an_error(monkeypatch, tmp_path):
    real = importlib.metadata.version

    def version(name):
        if name in ("vllm", "peft"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(prov, "_git", lambda args, cwd: None)  # no git at all
    rec = collect()
    assert rec["libraries"]["vllm"] is None and rec["libraries"]["peft"] is None
    assert rec["hacrl"]["commit"] == "unknown" and rec["hacrl"]["dirty"] is None
    # a directory that is not hacrl's checkout (an enclosing repository is not hacrl's either)
    assert prov.git_state(tmp_path) == {"commit": "unknown", "dirty": None}


def test_a_line_cut_short_is_skipped_and_a_run_without_the_file_reads_empty(tmp_path):
    record_provenance(tmp_path)
    with (tmp_path / PROVENANCE_FILE).open("a") as f:
        f.write('{"time": "2026-')  # a kill mid-line
    assert len(read_provenance(tmp_path)) == 1
    assert read_provenance(tmp_path / "old-run") == []


def _rec(commit="abc1234567890", dirty=False, torch="2.13.0", resumed=False):
    return {"time": "2026-12-04T00:00:00Z", "resumed": resumed, "from_step": 2 if resumed else 0,
            "hacrl": {"version": "0.1.0", "commit": commit, "dirty": dirty}, "python": "3.11.7",
            "libraries": {**dict.fromkeys(LIBRARIES), "torch": torch, "transformers": "5.25.0"},
            "device": {"kind": "cpu", "cpu_capability": "AVX512", "cpu_model": "Xeon", "gpu": None},
            "torch_threads": 1}


def _outcomes(root: Path, records: dict[tuple[str, int], list[dict]]) -> list[RunOutcome]:
    out = []
    for (algo, seed), recs in records.items():
        d = root / algo / f"seed-{seed}"
        d.mkdir(parents=True)
        if recs:
            (d / PROVENANCE_FILE).write_text("".join(json.dumps(r) + "\n" for r in recs))
        out.append(RunOutcome(algo, seed, d, "reused", 1.0))
    return out


def test_runs_of_the_same_code_make_one_row_and_no_warning(tmp_path):
    p = provenance_summary(_outcomes(tmp_path, {("hacpo", 0): [_rec()], ("gspo", 0): [_rec(), _rec(resumed=True)]}))
    assert (p["differ"], p["dirty"], p["unrecorded"]) == ([], [], [])
    assert provenance_warning(p) == []
    text = "\n".join(render_provenance(p))
    assert ("| all 2 runs | `abc1234567` | no | torch 2.13.0, transformers 5.25.0 | 3.11.7 | cpu: AVX512, Xeon "
            "| 1 |") in text


def test_runs_from_different_code_are_named_in_the_opening(tmp_path):
    p = provenance_summary(_outcomes(tmp_path, {
        ("hacpo", 0): [_rec()], ("gspo", 0): [_rec(commit="def4567890123", dirty=True)],
        ("hacpo", 1): [_rec(), _rec(torch="2.12.0", resumed=True)],  # resumed under another torch
        ("gspo", 1): []}))
    assert p["unrecorded"] == ["gspo seed 1"] and p["dirty"] == ["gspo seed 0"]
    assert [d["what"] for d in p["differ"]] == ["hacrl commit", "torch"]
    assert p["differ"][1]["values"] == {"2.13.0": ["hacpo seed 0", "gspo seed 0", "hacpo seed 1"],
                                        "2.12.0": ["hacpo seed 1"]}
    (warning, _) = provenance_warning(p)
    assert warning.startswith("> **These runs did not all come from the same code**: hacrl commit abc1234567 "
                              "(hacpo seed 0, hacpo seed 1); def4567890 (gspo seed 0). torch 2.13.0")
    assert "dirty checkout): gspo seed 0." in warning
    text = "\n".join(render_provenance(p))
    assert "No provenance recorded: gspo seed 1." in text
    assert "| hacpo seed 1 | `abc1234567` | no | torch 2.13.0/2.12.0, transformers 5.25.0 |" in text


def test_runs_of_one_dirty_checkout_are_marked_too(tmp_path):
    p = provenance_summary(_outcomes(tmp_path, {("hacpo", 0): [_rec(dirty=True)], ("gspo", 0): [_rec(dirty=True)]}))
    assert p["differ"] == [] and p["dirty"] == ["hacpo seed 0", "gspo seed 0"]
    assert provenance_warning(p)[0] == ("> **These runs came from a checkout with uncommitted changes**, so their "
                                        "code is not exactly their commit: hacpo seed 0, gspo seed 0. See "
                                        "Provenance below.")


def test_runs_without_any_record_say_none_was_recorded(tmp_path):
    p = provenance_summary(_outcomes(tmp_path, {("hacpo", 0): [], ("gspo", 0): []}))
    assert p == {"runs": [], "unrecorded": ["hacpo seed 0", "gspo seed 0"], "differ": [], "dirty": []}
    assert provenance_warning(p) == []
    assert render_provenance(p)[2].startswith("No provenance recorded: these runs predate `provenance.jsonl`")
    assert render_provenance(None)[2].startswith("No provenance recorded")


def test_eval_json_out_carries_the_provenance(tmp_path, one_thread):
    from hacrl.cli import main

    out = tmp_path / "eval.json"
    assert main(["eval", "--model", "builtin:qwen2-char", "--task", "add2", "--n", "2", "--max-new-tokens", "2",
                 "--json-out", str(out)]) == 0
    rec = json.loads(out.read_text())["provenance"]
    assert set(rec) >= {"hacrl", "libraries", "device", "torch_threads"} and rec["torch_threads"] == 1
