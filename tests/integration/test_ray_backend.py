"""The Ray backend (an actor per agent) against the local one on CPU: same seed, same metrics; an actor
killed mid-step is reported by agent and the run resumes from its last checkpoint."""

from __future__ import annotations

import json
import os

import pytest

from hacrl.cli import main
from hacrl.config import load_config
from hacrl.run.sinks import read_problem_evals
from hacrl.trainer.trainer import Trainer

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.model

THREE = ("agents=[{id: small, model: 'builtin:qwen2-char-small', lr: 3.0e-4}, "
         "{id: qwen-char, model: 'builtin:qwen2-char', lr: 3.0e-4}, "
         "{id: llama-bpe, model: 'builtin:llama-bpe', lr: 3.0e-4}]")
COMMON = ["trainer.steps=2", "trainer.eval_size=20", "trainer.threads=1", "backend.num_cpus_per_agent=0.5"]


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()


def lines(run_dir, name):
    recs = [json.loads(x) for x in (run_dir / name).read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in recs]


def run(tmp_path, backend, *overrides):
    cfg = load_config("tiny-test", overrides=[*COMMON, f"backend.name={backend}", *overrides])
    run_dir = tmp_path / backend
    run_dir.mkdir()
    trainer = Trainer(cfg, run_dir)
    if backend == "ray":
        pids = {a["pid"] for a in trainer.agent_info}
        assert len(pids) == len(cfg.agents) and os.getpid() not in pids  # one process per agent
    trainer.train()
    return run_dir, [a.id for a in cfg.agents]


@pytest.mark.parametrize("agents", [[], [THREE]], ids=["2-agents", "3-agents"])
def test_ray_backend_gives_the_local_backends_metrics(tmp_path, agents):
    (local, _), (remote, ids) = run(tmp_path, "local", *agents), run(tmp_path, "ray", *agents)
    a, b = lines(local, "metrics.jsonl"), lines(remote, "metrics.jsonl")
    assert [r["step"] for r in b] == [0, 1, 2]
    assert a == b
    assert lines(local, "eval.jsonl") == lines(remote, "eval.jsonl")
    assert lines(local, "eval_problems.jsonl") == lines(remote, "eval_problems.jsonl")  # EOS flags, lengths too
    # each actor wrote its agent into the driver's checkpoint
    assert sorted(p.name for p in (remote / "checkpoints" / "step-000002" / "agents").iterdir()) == sorted(ids)
    # the overlap of the agents' rollouts is measured on both (about 1 locally)
    raw = json.loads((remote / "metrics.jsonl").read_text().splitlines()[1])
    assert raw["timing/rollout_overlap"] > 0 and raw["timing/update_overlap"] > 0


def test_a_killed_actor_is_named_and_the_run_resumes_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    args = ["train", "--preset", "tiny-test", "-q", *(x for o in [*COMMON, "trainer.steps=3",
            "trainer.checkpoint_every=1", "backend.name=ray"] for x in ("--set", o))]
    reference = tmp_path / "reference"
    assert main([*args, "--set", "backend.name=local", "--output", str(reference)]) == 0
    out = tmp_path / "run"
    monkeypatch.setenv("HACRL_FAILPOINT", "update@2")  # every agent's actor kills itself after its step-2 update
    assert main([*args, "--output", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "agent 'qwen-char' rank 0: its Ray actor died during update" in err
    assert "step-000001" in err and "--resume" in err
    monkeypatch.delenv("HACRL_FAILPOINT")
    assert main([*args, "--output", str(out), "--resume"]) == 0
    assert lines(out, "metrics.jsonl") == lines(reference, "metrics.jsonl")
    assert lines(out, "eval.jsonl") == lines(reference, "eval.jsonl")
    assert lines(out, "eval_problems.jsonl") == lines(reference, "eval_problems.jsonl")


def test_a_data_parallel_agent_keeps_its_replicas_identical_and_checkpoints(tmp_path):
    cfg = load_config("tiny-test", overrides=[*COMMON, "backend.name=ray", "agents.qwen-char.data_parallel=2"])
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, tmp_path / "run", sinks=False)
    try:
        assert [len(g) for g in trainer.backend.groups] == [2, 1]
        g, b = cfg.rollout.rollouts_per_prompt, cfg.trainer.batch_size
        for _ in range(2):
            metrics = trainer.step()
            # each replica answered half the prompts; together a full group per prompt, and a full view
            assert metrics["pool/size"] == 2 * g * b
            assert metrics["agent/qwen-char/count/own"] == g * b
            assert metrics["agent/qwen-char/count/cross"] == g * b
        digests = ray.get([actor.weights_digest.remote() for actor in trainer.backend.groups[0]])
        assert digests[0] == digests[1]
        trainer.evaluate()  # each replica answers its half of the held-out problems, merged in problem order
        record = next(r for r in read_problem_evals(trainer.run_dir) if r["agent"] == "qwen-char")
        assert record["ids"] == [p.id for p in trainer.eval_problems]
        assert len(record["tokens"]) == len(record["finished"]) == cfg.trainer.eval_size
        path = trainer.save_checkpoint()
        assert (path / "agents" / "qwen-char" / "rng-rank1.pt").is_file()
        assert (path / "agents" / "qwen-char" / "model.safetensors").is_file()
    finally:
        trainer.close()
    resumed = Trainer(cfg, tmp_path / "run", resume_from=path, sinks=False)
    try:
        assert resumed.step_idx == 2
        again = ray.get([actor.weights_digest.remote() for actor in resumed.backend.groups[0]])
        assert again == digests  # both replicas start from the checkpoint's weights
    finally:
        resumed.close()


def test_divergence_inside_an_actor_is_one_line_naming_agent_step_and_phase(tmp_path, capsys):
    # (#17) the worker's check runs in the actor; its TrainingDiverged crosses Ray as the same exit-2 line
    args = ["train", "--preset", "tiny-test", "-q", *(x for o in [*COMMON, "backend.name=ray",
            "agents.llama-bpe.lr=1e30"] for x in ("--set", o))]
    assert main([*args, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("hacrl: error: agent 'llama-bpe' diverged at step 1 (update)"), err
    assert "--overwrite" in err[1] and not (tmp_path / "run").exists()
