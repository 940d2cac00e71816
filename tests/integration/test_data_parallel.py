"""Data parallel within one agent: W replicas, each running every W-th micro-batch, gradients summed
in place before each optimizer step (``sharding.sum_replica_gradients``), take the step one process
takes on the whole minibatch. The sharded (FSDP2) variant: test_sharded.py."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.core import StepSettings
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.settings import LossSettings
from hacrl.learner.update import update_learner
from hacrl.learner.view import ViewRow

pytestmark = pytest.mark.model

SETTINGS = LossSettings(StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, max_log_ratio=10.0,
                                     kl_coef=0.0, imitation_coef=1.0),
                        delta=0.2, delta_step=0.025, rollout_correction="off", rollout_correction_cap=2.0)


def make_agent():
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    agent.configure_optimizer(lr=1e-3)
    return agent


def make_minibatches(agent):
    """Two minibatches of 6 rows (own and cross, varied lengths) with fixed advantages."""
    mbs = []
    for m in range(2):
        rows = []
        for i in range(6):
            prompt = agent.render_prompt(f"{10 + m}+{i}=")
            answer, _ = agent.encode_answer(str(10 + m + i) + "7" * (i % 3), finished=i % 2 == 0)
            rows.append(ViewRow(prompt_index=i // 3, source=0 if i % 2 else 1, is_own=bool(i % 2), prompt_ids=prompt,
                                answer_ids=answer, old_logp_mean=-1.5 + 0.1 * i, old_token_logps=None,
                                reward=float(i % 2), advantage=(-1.0) ** i * (0.5 + 0.1 * i), omega=1.0 + 0.2 * i))
        mbs.append(rows)
    return mbs


def run_update(agent, dp_group=None):
    metrics = update_learner(agent, make_minibatches(agent), ALGORITHMS.get("hacpo"), SETTINGS,
                             micro_batch_size=2, grad_clip=0.5, dp_group=dp_group)
    return {k: v for k, v in metrics.items() if not k.startswith("busy_")}  # this rank's seconds


def _rank(rank, world, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    agent = make_agent()
    metrics = run_update(agent, dist.group.WORLD)
    torch.save({"weights": agent.model.state_dict(), "metrics": metrics}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_data_parallel_update_equals_one_process(tmp_path, world):
    agent = make_agent()
    expected = run_update(agent)
    mp.spawn(_rank, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world)]
    for res in results:
        for name, value in agent.model.state_dict().items():
            torch.testing.assert_close(res["weights"][name], value, atol=1e-6, rtol=1e-5, msg=name)
        assert res["metrics"].keys() == expected.keys()
        for key, value in expected.items():
            assert res["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    # the replicas are bit-identical to each other: the same summed gradient, the same step
    for res in results[1:]:
        for name, value in results[0]["weights"].items():
            assert torch.equal(res["weights"][name], value), name
