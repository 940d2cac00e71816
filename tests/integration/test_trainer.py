"""Tiny heterogeneous agents (different architectures and tokenizers) trained end to end on CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from hacrl.agents.agent import token_logprobs
from hacrl.config import load_config
from hacrl.rollout import SamplingParams, get_engine
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model

THREE = [
    ("agents=[{id: small, model: 'builtin:qwen2-char-small', lr: 3.0e-4}, "
     "{id: qwen-char, model: 'builtin:qwen2-char', lr: 3.0e-4}, {id: llama-bpe, model: 'builtin:llama-bpe', lr: 3.0e-4}]")
]


def make_trainer(tmp_path, *overrides, name="run", resume_from=None):
    cfg = load_config("tiny-test", overrides=list(overrides))
    run_dir = tmp_path / name
    run_dir.mkdir(exist_ok=True)
    return Trainer(cfg, run_dir, resume_from=resume_from)


def snapshot(agent):
    return {k: v.detach().clone() for k, v in agent.model.state_dict().items()}


def changed(before, agent):
    return any(not torch.equal(before[k], v) for k, v in agent.model.state_dict().items())


@pytest.mark.parametrize("agents", [[], THREE], ids=["2-agents", "3-agents"])
def test_hacpo_steps_update_every_agent(tmp_path, agents):
    trainer = make_trainer(tmp_path, "trainer.steps=2", *agents)
    n, g, b = len(trainer.agents), trainer.cfg.rollout.rollouts_per_prompt, trainer.cfg.trainer.batch_size
    assert len({type(a.model).__name__ for a in trainer.agents}) == 2  # Qwen2 and Llama
    assert len({len(a.tokenizer) for a in trainer.agents}) == 2  # char and BPE vocabularies
    before = [snapshot(a) for a in trainer.agents]
    for _ in range(2):
        metrics = trainer.step()
        assert metrics["pool/size"] == n * g * b
        for a in trainer.agents:
            for key in ("pg_loss", "grad_norm", "reward", "capability"):
                assert math.isfinite(metrics[f"agent/{a.id}/{key}"]), key
            # each learner trained on its own G and the others' (N-1)·G answers of every prompt
            assert metrics[f"agent/{a.id}/count/own"] == g * b
            assert metrics[f"agent/{a.id}/count/cross"] == (n - 1) * g * b
    for a, snap in zip(trainer.agents, before):
        assert changed(snap, a), f"{a.id} did not change"


def test_pool_groups_hold_every_agents_answers_and_text_survives_retokenization(tmp_path):
    trainer = make_trainer(tmp_path, *THREE)
    problems = trainer.data.take(trainer.cfg.trainer.batch_size)
    pool, _ = trainer.phases.score(problems, trainer._rollout(problems)[0], step=1)
    g = trainer.cfg.rollout.rollouts_per_prompt
    groups = pool.by_group()
    assert sorted(groups) == list(range(len(problems)))
    for trajectories in groups.values():
        assert len(trajectories) == len(trainer.agents) * g
        assert sorted({t.source for t in trajectories}) == [0, 1, 2]
    for t in pool.trajectories:
        for learner in trainer.agents:
            if learner.index == t.source:
                continue
            ids, truncated = learner.encode_answer(t.text, t.finished)
            assert not truncated
            assert learner.decode_answers([ids]) == [t.text]
            assert (ids[-1] == learner.eos_id) == t.finished


def test_sampling_logprobs_equal_training_logprobs(tmp_path):
    trainer = make_trainer(tmp_path)
    engine = get_engine("hf")
    for agent in trainer.agents:
        prompts = [agent.render_prompt(p.prompt) for p in trainer.task.test_problems(6)]
        samples = engine.generate(agent, prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=5))
        batch = agent.batch([prompts[s.prompt_index] for s in samples], [list(s.token_ids) for s in samples])
        with torch.no_grad():
            logp_BT = token_logprobs(agent.model, batch)
        for i, s in enumerate(samples):
            got = logp_BT[i][batch.answer_mask_BT[i]]
            torch.testing.assert_close(got, torch.tensor(s.logps), atol=1e-5, rtol=0)


def test_resume_gives_the_same_metrics_as_an_uninterrupted_run(tmp_path, metric_lines):
    straight = make_trainer(tmp_path, "trainer.steps=4", "trainer.eval_size=20", name="straight")
    straight.train()
    first = make_trainer(tmp_path, "trainer.steps=2", "trainer.eval_size=20", name="resumed")
    first.train()
    ckpt = first.run_dir / "checkpoints" / "step-000002"
    # the first part ended (and evaluated) at step 2; the resumed part runs steps 3 and 4
    second = make_trainer(tmp_path, "trainer.steps=4", "trainer.eval_size=20", name="resumed", resume_from=ckpt)
    assert second.step_idx == 2
    second.train()
    a, b = metric_lines(straight.run_dir), metric_lines(second.run_dir)
    strip = lambda rec: {k: v for k, v in rec.items() if not k.startswith("eval/")}  # noqa: E731
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4]
    assert [strip(r) for r in a] == [strip(r) for r in b]
    assert a[-1] == b[-1]  # the final step, evaluation included, is identical


def test_a_resume_from_an_earlier_checkpoint_drops_every_line_written_after_it(tmp_path):
    """A run killed at step 3 (its checkpoint at step 2, a metrics line cut short by the kill) resumed from
    step 2: each log holds the lines up to step 2 once, then the resumed steps, as an uninterrupted run's."""
    sets = ("trainer.steps=4", "trainer.eval_size=20", "trainer.eval_every=2", "trainer.checkpoint_every=2",
            "trainer.keep_last=3")
    straight = make_trainer(tmp_path, *sets, name="straight")
    straight.train()
    killed = make_trainer(tmp_path, *sets[1:], "trainer.steps=3", name="killed")
    killed.train()
    logs = ("metrics.jsonl", "eval.jsonl", "eval_problems.jsonl")
    went_on = {name: [json.loads(x)["step"] for x in (killed.run_dir / name).read_text().splitlines()]
               for name in logs}
    assert {name: max(steps) for name, steps in went_on.items()} == {"metrics.jsonl": 3, "eval.jsonl": 3,
                                                                      "eval_problems.jsonl": 3}
    with (killed.run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "agent/qwen-char/rew')  # the kill came mid-line
    resumed = make_trainer(tmp_path, *sets, name="killed", resume_from=killed.run_dir / "checkpoints" / "step-000002")
    for name in logs:  # cut back to the checkpoint before the first resumed step
        assert {json.loads(x)["step"] for x in (resumed.run_dir / name).read_text().splitlines()} <= {0, 1, 2}
    resumed.train()
    strip = lambda text: [{k: v for k, v in json.loads(x).items() if not k.startswith("timing/")}  # noqa: E731
                          for x in text.splitlines()]
    for name in logs:
        assert strip((resumed.run_dir / name).read_text()) == strip((straight.run_dir / name).read_text()), name


def test_one_agent_hacpo_equals_gspo(tmp_path):
    one = ["agents=[{id: solo, model: 'builtin:qwen2-char', lr: 3.0e-4}]"]
    results = {}
    for algo in ("hacpo", "gspo"):
        trainer = make_trainer(tmp_path, *one, f"algorithm.name={algo}", name=algo)
        trainer.step()
        results[algo] = snapshot(trainer.agents[0])
    for k, v in results["hacpo"].items():
        torch.testing.assert_close(v, results["gspo"][k], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("algo", ["gspo", "gspo2x", "naive", "grpo", "hacpo-noclip"])
def test_baselines_run(tmp_path, algo):
    trainer = make_trainer(tmp_path, f"algorithm.name={algo}")
    metrics = trainer.step()
    g = trainer.cfg.rollout.rollouts_per_prompt * (2 if algo == "gspo2x" else 1)
    b = trainer.cfg.trainer.batch_size
    for a in trainer.agents:
        assert math.isfinite(metrics[f"agent/{a.id}/pg_loss"])
        own = metrics[f"agent/{a.id}/count/own"]
        cross = metrics.get(f"agent/{a.id}/count/cross", 0)
        if algo == "naive":  # the joint pool, all treated as own by plain GSPO
            assert own == 2 * g * b
        else:
            assert own == g * b
            assert cross == (g * b if algo.startswith("hacpo") else 0)


def test_resume_with_a_changed_training_setting_is_refused(tmp_path):
    from hacrl.config import ConfigError

    first = make_trainer(tmp_path, "trainer.steps=1", "trainer.eval_size=5", name="run")
    first.train()
    ckpt = first.run_dir / "checkpoints" / "step-000001"
    with pytest.raises(ConfigError, match="agents.qwen-char.lr"):
        make_trainer(tmp_path, "trainer.steps=2", "agents.qwen-char.lr=1.0e-3", name="run", resume_from=ckpt)
    with pytest.raises(ConfigError, match="agents"):
        make_trainer(tmp_path, "trainer.steps=2", "agents.llama-bpe.model=builtin:qwen2-char-small",
                     name="run", resume_from=ckpt)
    # the number of steps may change
    assert make_trainer(tmp_path, "trainer.steps=3", "trainer.eval_size=5", name="run", resume_from=ckpt).step_idx == 1


def test_rollout_without_kept_scores_gives_the_same_logprobs(tmp_path):
    """Past its memory budget the hf engine computes log-probs by a forward pass instead of keeping scores."""
    from hacrl.rollout.hf import HFEngine

    trainer = make_trainer(tmp_path)
    agent = trainer.agents[1]
    prompts = [agent.render_prompt(p.prompt) for p in trainer.task.test_problems(5)]
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=5)
    torch.manual_seed(0)
    kept = HFEngine().generate(agent, prompts, params)
    torch.manual_seed(0)
    forward = HFEngine(scores_budget_bytes=0, forward_batch=4).generate(agent, prompts, params)
    assert [s.token_ids for s in kept] == [s.token_ids for s in forward]
    for a, b in zip(kept, forward):
        torch.testing.assert_close(torch.tensor(a.logps), torch.tensor(b.logps), atol=1e-5, rtol=0)


def test_evaluation_on_benchmark_files_during_training(tmp_path):
    fixtures = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "benchmarks"
    trainer = make_trainer(tmp_path, "trainer.steps=1", "trainer.eval_size=10",
                           f"trainer.eval_benchmarks.gsm8k={fixtures / 'gsm8k.jsonl'}",
                           f"trainer.eval_benchmarks.math500={fixtures / 'math500.jsonl'}")
    result = trainer.train()
    records = [json.loads(x) for x in (trainer.run_dir / "eval.jsonl").read_text().splitlines()]
    # the start's held-out accuracy, as the CLI prints it beside the final one
    assert result["first"] == {f"eval/{r['agent']}/greedy_acc": r["greedy_acc"] for r in records
                               if r["step"] == 0 and "task" in r}
    benches = {(r["step"], r["agent"], r["benchmark"]) for r in records if "benchmark" in r}
    assert benches == {(s, a.id, b) for s in (0, 1) for a in trainer.agents for b in ("gsm8k", "math500")}
    assert all(r["n"] >= 1 and 0.0 <= r["greedy_acc"] <= 1.0 for r in records)


def test_a_missing_benchmark_file_is_a_config_error(tmp_path):
    from hacrl.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.eval_benchmarks.gsm8k"):
        make_trainer(tmp_path, "trainer.eval_benchmarks.gsm8k=/no/such/file.jsonl")


def test_recomputed_old_logprobs_log_the_gap_to_the_engines(tmp_path):
    """π_old by the training forward pass; the gap to the engine's log-probs is the rollout/training mismatch."""
    same = make_trainer(tmp_path, "rollout.old_logprobs=recompute", name="t1").step()
    hot = make_trainer(tmp_path, "rollout.temperature=0.7", name="t07").step()
    for agent in ("qwen-char", "llama-bpe"):
        # temperature 1: the hf engine's log-probs are the policy's own, up to float error
        assert same[f"agent/{agent}/rollout/logp_gap_mean"] < 1e-5
        assert same[f"agent/{agent}/rollout/seq_ratio_dev"] < 1e-5
        # temperature 0.7: the engine's are the sharpened distribution's, so they differ
        assert hot[f"agent/{agent}/rollout/logp_gap_mean"] > 1e-3
        assert hot[f"agent/{agent}/rollout/logp_gap_max"] >= hot[f"agent/{agent}/rollout/logp_gap_mean"]
        # the rollout correction's weight exp(mean log π_old − mean log π_engine) sees the same gap (auto: off
        # with hf, logged all the same): 1 at temperature 1, away from 1 at 0.7
        assert abs(same[f"agent/{agent}/rollout_is/weight_mean"] - 1.0) < 1e-5
        assert hot[f"agent/{agent}/rollout_is/weight_min"] < 1.0 - 1e-3
        assert same[f"agent/{agent}/rollout_is/applied_mean"] == hot[f"agent/{agent}/rollout_is/applied_mean"] == 1.0


def test_gradient_checkpointing_takes_the_same_step(tmp_path):
    plain = make_trainer(tmp_path, "trainer.shared_prompt_forward=false", name="plain")  # checkpointing's path
    ckpt = make_trainer(tmp_path, "agents.qwen-char.gradient_checkpointing=true",
                        "agents.llama-bpe.gradient_checkpointing=true", name="ckpt")
    assert all(a.model.is_activation_checkpointing for a in ckpt.agents)
    a, b = plain.step(), ckpt.step()
    for agent_p, agent_c in zip(plain.agents, ckpt.agents):
        assert a[f"agent/{agent_p.id}/pg_loss"] == pytest.approx(b[f"agent/{agent_c.id}/pg_loss"], abs=1e-6)
        for (name, v), w in zip(agent_p.model.state_dict().items(), agent_c.model.state_dict().values()):
            torch.testing.assert_close(v, w, atol=1e-6, rtol=1e-5, msg=name)


def test_mixed_precision_moves_weights_that_bf16_weights_round_away(tmp_path):
    """lr 1e-6 on bf16 weights is below their resolution; float32 weights with bf16 autocast train."""
    lr = ["agents.qwen-char.lr=1.0e-6", "agents.llama-bpe.lr=1.0e-6"]
    bf16 = make_trainer(tmp_path, *lr, "agents.qwen-char.dtype=bfloat16", "agents.llama-bpe.dtype=bfloat16",
                        name="bf16")
    mixed = make_trainer(tmp_path, *lr, "agents.qwen-char.autocast=bfloat16", "agents.llama-bpe.autocast=bfloat16",
                         name="mixed")
    for trainer in (bf16, mixed):
        before = [snapshot(a) for a in trainer.agents]
        metrics = trainer.step()
        moved = [sum((b[k] != v).float().mean().item() for k, v in a.model.state_dict().items()) / len(b)
                 for a, b in zip(trainer.agents, before)]
        trainer.moved = moved
        for a in trainer.agents:
            assert math.isfinite(metrics[f"agent/{a.id}/pg_loss"])
    assert max(bf16.moved) < 0.05  # almost every bf16 weight rounded back to itself
    assert min(mixed.moved) > 0.5  # most float32 weights moved
    for a in mixed.agents:
        assert next(a.model.parameters()).dtype == torch.float32
        # mixed precision: π_old is recomputed, and the rollout/training gap is logged
        assert f"agent/{a.id}/rollout/logp_gap_mean" in metrics


@pytest.mark.parametrize("algo", ["hacpo", "grpo"])
def test_the_shared_prompt_forward_takes_the_plain_forwards_step(tmp_path, algo):
    """Each prompt once per micro-batch (with KL: the reference too) = prompt + answer per row."""
    # one minibatch per learner: every metric is computed before the (only) optimizer step
    kl = ["agents.qwen-char.kl_coef=0.1", "agents.llama-bpe.kl_coef=0.1", f"algorithm.name={algo}",
          f"trainer.minibatch_size={32 if algo == 'hacpo' else 16}"]
    plain = make_trainer(tmp_path, *kl, "trainer.shared_prompt_forward=false", name="plain")
    shared = make_trainer(tmp_path, *kl, name="shared")
    a, b = plain.step(), shared.step()
    # compared through the step's metrics (after AdamW, weights whose gradient is ~0 move by ±lr on float
    # rounding alone; the log-probs and gradients themselves: tests/agents/test_shared_prompt.py)
    keys = [k for k in a if k.startswith("agent/") and k.rsplit("/", 1)[-1] in
            ("pg_loss", "kl", "grad_norm", "ratio_mean", "clip_frac")]
    assert len(keys) >= 8
    for key in keys:
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
