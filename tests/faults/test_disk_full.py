"""Issue #28, "disk full": every write of a run either completes or fails with one line naming the path and
the space it needed; the previous checkpoint stays loadable, no log line is half-written, and resuming once
there is room gives exactly the metrics of an uninterrupted run.

ENOSPC is injected at each write site the way a nearly full disk fails: the part that fits is written, then
the error (``hacrl.run.files._write_all`` for the logs, samples and config; a saver cut short for a
checkpoint; TensorBoard's flush). One test fills a real size-limited tmpfs (root only; skipped otherwise).
In-process (``main``) on the tiny preset: the models load once per session."""

from __future__ import annotations

import errno
import json
import os
import shlex
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import pytest

from hacrl.cli import main
from hacrl.errors import DiskFull
from hacrl.run import checkpoint as ckpt
from hacrl.run import files
from hacrl.run.checkpoint import complete_checkpoints, load_state, verify_checkpoint

ARGS = ["train", "--preset", "tiny-test", "--set", "trainer.steps=2", "--set", "trainer.checkpoint_every=1",
        "--set", "trainer.eval_every=1", "--set", "trainer.eval_size=10", "--set", "trainer.log_samples=1", "-q"]
LOGS = ("metrics.jsonl", "eval.jsonl", "eval_problems.jsonl")
NO_SPACE = "hacrl: error: disk full writing "


def metrics(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in rec.items() if not k.startswith("timing/")} for rec in lines]


def outputs(run_dir: Path) -> dict[str, str]:
    """Every log and sample file's text (metrics without their wall-clock timings)."""
    out = {name: (run_dir / name).read_text() for name in LOGS[1:]}
    out |= {f"samples/{p.name}": p.read_text() for p in sorted((run_dir / "samples").iterdir())}
    return {"metrics": json.dumps(metrics(run_dir)), **out}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main([*ARGS, "--output", str(out)]) == 0
    return outputs(out)


def failed(capsys, argv: list[str]) -> str:
    """Run ``hacrl argv``: exit 2 and exactly one line, which says that the disk is full."""
    rc = main(argv)
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith(NO_SPACE), (rc, err)
    return err[0]


def assert_clean(run_dir: Path) -> None:
    """Every log line whole and the file ending in a newline; no temporary file or directory left behind."""
    for name in LOGS:
        text = (run_dir / name).read_text() if (run_dir / name).is_file() else ""
        assert text == "" or text.endswith("\n"), (name, text[-80:])
        for line in text.splitlines():
            json.loads(line)  # raises on a half-written line
    assert not [p for p in run_dir.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp-")]


def assert_previous_checkpoint_loads(run_dir: Path, step: int) -> None:
    done = complete_checkpoints(run_dir / "checkpoints")
    assert [p.name for p in done] == [f"step-{s:06d}" for s in range(1, step + 1)]
    assert verify_checkpoint(done[-1]) is None and load_state(done[-1])["step"] == step


@pytest.fixture
def enospc(monkeypatch):
    """``enospc(pattern, nth)``: the nth write to a file whose name matches writes all its bytes but the last
    (a nearly full disk takes what fits), then fails with ENOSPC. Returns a function that frees the space."""
    real = files._write_all

    def inject(pattern: str, nth: int = 1):
        seen = 0

        def write_all(fd: int, data: bytes) -> None:
            nonlocal seen
            if fnmatch(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), pattern):
                seen += 1
                if seen == nth:
                    os.write(fd, data[:-1])  # every line but the last whole: only a rollback leaves none torn
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(fd, data)

        monkeypatch.setattr(files, "_write_all", write_all)
        return lambda: monkeypatch.setattr(files, "_write_all", real)

    return inject


def cut_checkpoint(monkeypatch, nth: int):
    """The nth agent save writes its files, then safetensors reports the disk full with one of them half
    written (its own error type, whose text says so)."""
    from hacrl.agents.agent import Agent

    real, seen = Agent.save, 0

    def save(self, path, **kwargs):
        nonlocal seen
        real(self, path, **kwargs)
        seen += 1
        if seen == nth:
            weights = path / "model.safetensors"
            weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
            raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(Agent, "save", save)
    return lambda: monkeypatch.setattr(Agent, "save", real)


def full_tensorboard(monkeypatch, nth: int):
    from torch.utils.tensorboard import SummaryWriter

    real, seen = SummaryWriter.flush, 0

    def flush(self):
        nonlocal seen
        seen += 1
        if seen == nth:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self)

    monkeypatch.setattr(SummaryWriter, "flush", flush)
    return lambda: monkeypatch.setattr(SummaryWriter, "flush", real)


# (site, how to fill the disk during step 2, what the one line names); each run writes step 0's evaluation,
# then per step: samples, evaluation (eval.jsonl, eval_problems.jsonl), the metrics line, TensorBoard, checkpoint
SITES = {
    "metrics-line": (lambda enospc, mp: enospc("metrics.jsonl", 3), "metrics.jsonl (needs "),
    "eval-totals": (lambda enospc, mp: enospc("eval.jsonl", 3), "eval.jsonl (needs "),
    "eval-problems": (lambda enospc, mp: enospc("eval_problems.jsonl", 3), "eval_problems.jsonl (needs "),
    "samples": (lambda enospc, mp: enospc("step-000002.jsonl.tmp"), "samples/step-000002.jsonl (needs "),
    "tensorboard": (lambda enospc, mp: full_tensorboard(mp, 3), "tensorboard ("),
    "checkpoint": (lambda enospc, mp: cut_checkpoint(mp, 3), "checkpoints/step-000002 (needs about "),
}


@pytest.mark.model
@pytest.mark.parametrize("site", list(SITES))
def test_a_full_disk_at_each_write_is_one_line_and_resuming_matches_an_uninterrupted_run(
        tmp_path, capsys, monkeypatch, enospc, reference, site):
    fill, named = SITES[site]
    out = tmp_path / "run"
    free_space = fill(enospc, monkeypatch)
    line = failed(capsys, [*ARGS, "--output", str(out)])
    assert f"{NO_SPACE}{out}/{named}" in line, line
    assert "free there); free space, then continue with: hacrl train " in line, line
    command = shlex.split(line.split("continue with: ")[1])
    assert command[-3:] == ["--output", str(out), "--resume"]
    assert_clean(out)
    assert_previous_checkpoint_loads(out, 1)  # step 2's checkpoint was never written, or was taken back
    free_space()
    assert main([*command[1:], "-q"]) == 0
    assert outputs(out) == reference
    assert_clean(out)


@pytest.mark.model
def test_a_resume_that_finds_the_disk_full_leaves_the_file_it_rewrites_whole(tmp_path, capsys, enospc, reference):
    out = tmp_path / "run"
    free_space = enospc("metrics.jsonl", 3)  # step 2's evaluation records are written, its metrics line is not
    failed(capsys, [*ARGS, "--output", str(out)])
    free_space()
    assert [json.loads(x)["step"] for x in (out / "eval_problems.jsonl").read_text().splitlines()][-1] == 2
    # resuming rewrites the logs without step 2's records, then config.yaml: each whole or not at all
    for pattern, name in (("eval_problems.jsonl.tmp", "eval_problems.jsonl"), ("config.yaml.tmp", "config.yaml")):
        before = (out / name).read_bytes()
        free_space = enospc(pattern)
        line = failed(capsys, [*ARGS, "--output", str(out), "--resume"])
        assert line.startswith(f"{NO_SPACE}{out}/{name} (needs ") and "continue with: hacrl train " in line, line
        free_space()
        assert (out / name).read_bytes() == before
        assert_clean(out)
        assert_previous_checkpoint_loads(out, 1)
    assert main([*ARGS, "--output", str(out), "--resume"]) == 0
    assert outputs(out) == reference


@pytest.mark.model
def test_a_fresh_run_that_never_checkpointed_is_removed_and_started_again(tmp_path, capsys, enospc, reference):
    out = tmp_path / "runs" / "run"
    free_space = enospc("config.yaml.tmp")  # the first file a run writes
    line = failed(capsys, [*ARGS, "--output", str(out)])
    assert line.startswith(f"{NO_SPACE}{out}/config.yaml (needs ") and "start again with: hacrl train " in line
    assert not out.exists()  # nothing to resume: what it wrote is gone, space with it
    free_space()
    command = shlex.split(line.split("start again with: ")[1])
    assert command[-2:] == ["--output", str(out)]
    assert main([*command[1:], "-q"]) == 0
    assert outputs(out) == reference


def test_a_checkpoint_that_torch_cannot_finish_on_a_full_disk(tmp_path, monkeypatch):
    # torch.save on a full disk raises RuntimeError("... unexpected pos 576 vs 534"), naming no errno: with
    # (almost) nothing free the write failed for want of room; with room it is some other error, raised as is
    root = tmp_path / "checkpoints"

    def torch_save_fails(tmp: Path) -> None:
        (tmp / "agents").mkdir()
        (tmp / "agents" / "optimizer.pt").write_bytes(b"PK" * 1000)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    ckpt.save_checkpoint(root, 1, lambda tmp: None, {"step": 1}, {"agents": []}, keep_last=2)
    monkeypatch.setattr(ckpt, "free_bytes", lambda path: 4096)
    with pytest.raises(DiskFull) as info:
        ckpt.save_checkpoint(root, 2, torch_save_fails, {"step": 2}, {"agents": []}, keep_last=2)
    assert str(info.value).startswith(f"disk full writing {root}/step-000002 (needs about ")
    monkeypatch.setattr(ckpt, "free_bytes", lambda path: 10 << 30)
    with pytest.raises(RuntimeError, match="unexpected pos"):
        ckpt.save_checkpoint(root, 2, torch_save_fails, {"step": 2}, {"agents": []}, keep_last=2)
    assert [p.name for p in root.iterdir()] == ["step-000001"] and load_state(root / "step-000001")["step"] == 1


def test_quota_and_library_errors_are_recognised(tmp_path):
    assert files.is_disk_full(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)))
    err = files.disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"), tmp_path / "metrics.jsonl", 10)
    assert str(err).startswith(f"disk quota exceeded writing {tmp_path}/metrics.jsonl (needs 10 bytes); free space")
    wrapped = RuntimeError("agent 'a' failed in save: SafetensorError: I/O error: No space left on device "
                           "(os error 28)")  # what the Ray backend reports for an actor's failed save
    assert files.is_disk_full(wrapped) and not files.is_disk_full(RuntimeError("unexpected pos 576 vs 534"))


@pytest.mark.model
def test_a_compare_report_is_written_whole_or_not_at_all(tmp_path, capsys, enospc):
    out = tmp_path / "cmp"
    argv = ["compare", "--preset", "tiny-test", "--algos", "hacpo", "--seeds", "1", "--set", "trainer.steps=1",
            "--set", "trainer.eval_size=5", "--output", str(out), "-q"]
    free_space = enospc("omega.png.tmp")  # the plots come first, then summary.json and report.md
    line = failed(capsys, argv)
    assert line.startswith(f"{NO_SPACE}{out}/plots/omega.png (needs ") and line.endswith(
        "free space, then run the same command again (finished runs are reused, the others continue from their "
        "last checkpoint)"), line
    assert not (out / "report.md").exists() and not (out / "summary.json").exists()
    assert [p.read_bytes()[-8:-4] for p in (out / "plots").iterdir()] == [b"IEND"] * 2  # the curves, whole
    assert not list(out.rglob("*.tmp"))
    free_space()
    assert main(argv) == 0
    assert "reused" in capsys.readouterr().out and (out / "report.md").read_text().startswith("#")
    assert json.loads((out / "summary.json").read_text())["plots"]


# ---- a real full disk ----------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 24 MiB tmpfs (one tiny-test checkpoint is 15 MiB): ``(path, grow)``, ``grow()`` frees space."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a size-limited tmpfs needs root to mount (the injected-ENOSPC tests cover the same writes)")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed: {res.stderr.strip() or res.returncode}")
    try:
        yield disk, lambda: subprocess.run(["mount", "-o", "remount,size=96m", str(disk)], check=True)
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.model
def test_a_real_full_disk(small_disk, capsys, reference):
    disk, grow = small_disk
    out = disk / "run"
    # step 1's checkpoint fits, step 2's does not: the agents' savers (safetensors, torch) fail part-way
    line = failed(capsys, [*ARGS, "--output", str(out)])
    assert line.startswith(f"{NO_SPACE}{out}/checkpoints/step-000002 (needs about 15."), line
    assert_clean(out)
    assert_previous_checkpoint_loads(out, 1)
    # a batch of log lines on the disk filled to the last byte: the kernel takes what fits, then ENOSPC
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError, match="No space left"):
        while True:
            os.write(fd, b"\0" * (1 << 16))
    os.close(fd)
    before = (out / "eval.jsonl").read_bytes()
    with pytest.raises(DiskFull, match=f"writing {out}/eval.jsonl \\(needs 20.0 KiB; "):
        files.append_lines(out / "eval.jsonl", [{"step": 9, "pad": "x" * 10229}, {"step": 9, "pad": "y" * 10229}])
    assert (out / "eval.jsonl").read_bytes() == before
    (disk / "filler").unlink()
    grow()
    assert main([*ARGS, "--output", str(out), "--resume"]) == 0
    assert outputs(out) == reference
