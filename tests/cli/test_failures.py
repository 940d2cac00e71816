"""Issue #17, "nothing lost, nothing raw": damaged files, damaged checkpoints, bad paths, a run directory
that is not a run, a second writer, divergence. Each ends with exit 2 and at most three lines that start
with ``hacrl:`` and name the file or field - never a traceback - and ``--overwrite`` never deletes a file
hacrl did not write. In-process (``main``) to stay within the suite's time budget."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from hacrl.cli import main
from hacrl.run.checkpoint import complete_checkpoints, verify_checkpoint

FAST = ["--set", "trainer.eval_size=10", "--set", "trainer.log_samples=0", "-q"]
TRAIN = ["train", "--preset", "tiny-test", *FAST]


def failed(capsys, argv, *expected, code=2):
    """Run ``hacrl argv``: exit ``code``, at most three ``hacrl:`` lines, the first naming ``expected``."""
    rc = main(argv)
    err = [x for x in capsys.readouterr().err.strip().splitlines() if x.strip()]
    assert rc == code, err
    assert 1 <= len(err) <= 3 and all(x.startswith("hacrl: ") for x in err), err
    for text in expected:
        assert text in err[0], err
    return err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-step run with checkpoints at steps 1 and 2."""
    out = tmp_path_factory.mktemp("trained") / "run"
    assert main([*TRAIN, "--set", "trainer.checkpoint_every=1", "--output", str(out)]) == 0
    assert [p.name for p in complete_checkpoints(out / "checkpoints")] == ["step-000001", "step-000002"]
    return out


def half(data: bytes) -> bytes:
    return data[: len(data) // 2]


# ---- damaged model files ------------------------------------------------------------------------------

MODEL_DAMAGE = [
    ("model.safetensors", lambda b: b"\xff" * 8 + b[8:], "model.safetensors cannot be read"),  # bad header
    ("model.safetensors", half, "model.safetensors cannot be read"),  # cut short
    ("model.safetensors", lambda b: b"", "model.safetensors"),  # empty
    ("tokenizer.json", lambda b: b[:50], "no usable tokenizer"),
    ("config.json", lambda b: b"{not json", "config.json"),
]


@pytest.mark.model
@pytest.mark.parametrize("name,damage,expected", MODEL_DAMAGE, ids=[f"{n}-{i}" for i, (n, _, _) in
                                                                    enumerate(MODEL_DAMAGE)])
def test_a_damaged_model_is_one_line_naming_the_file(trained, tmp_path, capsys, name, damage, expected):
    model = tmp_path / "model"
    shutil.copytree(trained / "checkpoints/step-000002/agents/qwen-char", model)
    (model / name).write_bytes(damage((model / name).read_bytes()))
    out = tmp_path / "run"
    err = failed(capsys, [*TRAIN, "--set", f"agents.qwen-char.model={model}", "--output", str(out)],
                 "agents.qwen-char.model", expected)
    assert str(model) in err[0]
    assert not out.exists()
    # hacrl eval --model on the same files: the same one line
    failed(capsys, ["eval", "--model", str(model), "--n", "5"], f"--model {model}:", expected)


# ---- damaged checkpoints --------------------------------------------------------------------------------

CHECKPOINT_DAMAGE = [
    ("trainer_state.pt", half),
    ("agents/qwen-char/model.safetensors", half),
    ("agents/llama-bpe/optimizer.pt", half),
    ("agents/llama-bpe/rng.pt", half),
    ("manifest.json", lambda b: b"{not json"),
]


@pytest.mark.model
@pytest.mark.parametrize("name,damage", CHECKPOINT_DAMAGE, ids=[n for n, _ in CHECKPOINT_DAMAGE])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(trained, tmp_path, capsys, name, damage):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    path = run / "checkpoints/step-000002" / name
    path.write_bytes(damage(path.read_bytes()))
    problem = verify_checkpoint(run / "checkpoints/step-000002")
    assert problem and problem.startswith(name), problem
    if name != "trainer_state.pt":  # the whole resume once; the others stop at the choice of checkpoint
        from hacrl.cli import _parser, _resolve_resume

        assert _resolve_resume(_parser().parse_args([*TRAIN, "--resume"]), run) == run / "checkpoints/step-000001"
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "step-000002 is damaged" in err[0] and name in err[0], err
        return
    assert main([*TRAIN, "--output", str(run), "--resume"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hacrl: warning: checkpoint step-000002 is damaged ({problem}); resuming from step-000001"]
    assert verify_checkpoint(run / "checkpoints/step-000002") is None  # step 2 trained and saved again


@pytest.mark.model
def test_no_usable_checkpoint_names_the_command_that_starts_over(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for step in ("step-000001", "step-000002"):
        path = run / "checkpoints" / step / "trainer_state.pt"
        path.write_bytes(half(path.read_bytes()))
    failed(capsys, [*TRAIN, "--output", str(run), "--resume"], "no intact checkpoint", "trainer_state.pt",
           f"start over with: hacrl train --preset tiny-test --set trainer.eval_size=10 --set trainer.log_samples=0 "
           f"--output {run} --overwrite")
    # a damaged checkpoint given by name is refused, naming the file
    failed(capsys, [*TRAIN, "--output", str(run), "--resume", str(run / "checkpoints/step-000002")],
           "the checkpoint is damaged: trainer_state.pt")


@pytest.mark.model
def test_a_checkpoint_file_damaged_in_place_is_one_line_naming_it(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    path = run / "checkpoints/step-000002/agents/llama-bpe/optimizer.pt"
    data = bytearray(path.read_bytes())
    data[100:400] = bytes(300)  # same size, readable zip directory: found only when it loads
    path.write_bytes(bytes(data))
    # one step further: a finished run is only reported on (issue 26), never loaded
    failed(capsys, [*TRAIN, "--set", "trainer.steps=3", "--output", str(run), "--resume"], "step-000002 is damaged",
           "agents/llama-bpe/optimizer.pt cannot be read")


# ---- eval --run / --model ---------------------------------------------------------------------------------

def _no_config(run):
    (run / "config.yaml").unlink()


def _broken_yaml(run):
    (run / "config.yaml").write_text("agents: [\n")


def _unknown_key(run):
    (run / "config.yaml").write_text((run / "config.yaml").read_text() + "extra_section: 1\n")


def _no_checkpoint(run):
    shutil.rmtree(run / "checkpoints")


EVAL_RUN = [(_no_config, "no config.yaml"), (_broken_yaml, "not valid YAML"), (_unknown_key, "extra_section"),
            (_no_checkpoint, "no complete checkpoint")]


@pytest.mark.model
@pytest.mark.parametrize("damage,expected", EVAL_RUN, ids=[f.__name__ for f, _ in EVAL_RUN])
def test_eval_of_a_broken_run_directory_is_one_line(trained, tmp_path, capsys, damage, expected):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    damage(run)
    failed(capsys, ["eval", "--run", str(run), "--n", "5"], f"--run {run}", expected)


@pytest.mark.parametrize("args,expected", [
    (["--run", "no/such/run"], "no such directory"),
    (["--model", "builtin:qwen2-char", "--device", "nonsense"], "--device='nonsense'"),
    (["--model", "builtin:nope"], "no tiny agent 'nope'"),
])
def test_eval_bad_arguments_are_one_line(capsys, args, expected):
    failed(capsys, ["eval", *args, "--n", "5"], expected)


# ---- the run directory: paths, foreign files, a second writer ------------------------------------------------

def test_output_paths_that_cannot_be_a_run_directory(tmp_path, capsys, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    failed(capsys, [*TRAIN, "--output", str(afile)], "is a file")
    failed(capsys, [*TRAIN, "--output", str(afile / "sub")], f"{afile} is a file")
    from hacrl.run import rundir

    monkeypatch.setattr(rundir.os, "access", lambda path, mode: False)  # (root may write anywhere)
    failed(capsys, [*TRAIN, "--output", str(tmp_path / "new")], "is not writable")
    assert afile.read_text() == "x" and not (tmp_path / "new").exists()


@pytest.mark.model
def test_overwrite_deletes_nothing_in_a_directory_that_is_not_a_run(trained, tmp_path, capsys):
    user = tmp_path / "mine"
    (user / "notes").mkdir(parents=True)
    (user / "notes" / "todo.txt").write_text("keep me")
    (user / "config.yaml").write_text("my: own config\n")  # not a resolved hacrl config
    (user / "metrics.jsonl").write_text("{}\n")
    before = sorted(p.relative_to(user) for p in user.rglob("*"))
    for flag in ([], ["--overwrite"]):
        failed(capsys, [*TRAIN, "--output", str(user), *flag], "not a hacrl run directory", "config.yaml",
               "notes/")
    assert sorted(p.relative_to(user) for p in user.rglob("*")) == before
    assert (user / "notes" / "todo.txt").read_text() == "keep me"
    # a folder of runs is not a run either: --output runs --overwrite deletes none of them
    runs = tmp_path / "runs"
    shutil.copytree(trained, runs / "exp1")
    failed(capsys, [*TRAIN, "--output", str(runs), "--overwrite"], "not a hacrl run directory", "exp1/")
    assert verify_checkpoint(runs / "exp1/checkpoints/step-000002") is None


@pytest.mark.model
def test_a_second_trainer_on_a_running_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    first = subprocess.Popen([sys.executable, "-m", "hacrl.cli", *TRAIN, "--set", "trainer.steps=200",
                              "--output", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out / "config.yaml").is_file():  # training has begun
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read()
        for flag in ("--resume", "--overwrite"):
            failed(capsys, [*TRAIN, "--output", str(out), flag], "is in use by another hacrl process",
                   f"pid {first.pid}")
        assert (out / "config.yaml").is_file() and (out / "metrics.jsonl").is_file()  # --overwrite deleted nothing
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert "--resume" in err.strip().splitlines()[-1]
    from hacrl.run.rundir import RunLock

    with RunLock(out):  # released when the first one ended
        pass


# ---- divergence ---------------------------------------------------------------------------------------------

@pytest.mark.model
def test_a_diverging_learning_rate_names_agent_step_and_phase(tmp_path, capsys):
    out = tmp_path / "run"
    err = failed(capsys, [*TRAIN, "--set", "agents.llama-bpe.lr=1e30", "--output", str(out)],
                 "agent 'llama-bpe' diverged at step 1 (update)", "agents.llama-bpe.lr (now 1e+30)")
    assert "--overwrite" in err[-1]
    assert not out.exists()  # nothing to resume: the retry needs no --overwrite


@pytest.mark.model
@pytest.mark.parametrize("phase,value,expected", [
    ("update", float("nan"), "its weights became non-finite"),
    ("rollout", 1e30, "non-finite logits"),  # finite but huge weights: the next rollout meets inf logits
])
def test_divergence_keeps_the_last_checkpoint_intact(tmp_path, capsys, monkeypatch, phase, value, expected):
    from hacrl.learner import learn  # the worker's update runs the learner's optimizer steps through it

    real, calls = learn.update_learner, []

    def update_learner(agent, *args, **kwargs):
        metrics = real(agent, *args, **kwargs)
        if agent.index == 0:
            calls.append(1)
            if len(calls) == 2:  # qwen-char's update of step 2
                with torch.no_grad():
                    for p in agent.model.parameters():
                        p.fill_(value)
        return metrics

    monkeypatch.setattr(learn, "update_learner", update_learner)
    out = tmp_path / "run"
    step = 2 if phase == "update" else 3
    err = failed(capsys, [*TRAIN, "--set", "trainer.steps=3", "--set", "trainer.checkpoint_every=1",
                          "--output", str(out)],
                 f"agent 'qwen-char' diverged at step {step} ({phase})", expected)
    assert f"the last complete checkpoint {out / 'checkpoints' / f'step-{step - 1:06d}'} is intact" in err[1], err
    last = complete_checkpoints(out / "checkpoints")[-1]
    assert last.name == f"step-{step - 1:06d}" and verify_checkpoint(last) is None


# ---- compare and presets ---------------------------------------------------------------------------------------

def test_compare_and_presets_bad_input_is_one_line(tmp_path, capsys):
    failed(capsys, ["compare", "--preset", "tiny-test", "--algos", "hacpo", "--seeds", "1", "-q",
                    "--set", "agents.qwen-char.device=nonsense", "--output", str(tmp_path / "cmp")],
           "agents.qwen-char.device='nonsense'")
    afile = tmp_path / "afile"
    afile.write_text("x")
    failed(capsys, ["compare", "--preset", "tiny-test", "--algos", "hacpo", "--seeds", "1", "-q",
                    "--output", str(afile)], f"--output {afile}: is a file")
    failed(capsys, ["presets", "--show", "nope"], "--preset 'nope' is unknown")
