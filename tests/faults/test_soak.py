"""Issue #28, "slow leaks": bench/soak.py records every process of a run step by step (a short run here, so
the script cannot rot unnoticed), and what it found stays fixed: Ray's GCS kept a record of every call to an
agent's actor (~3.6 KiB each, up to Ray's cap of 100,000), growing ~2 MiB per 100 steps of tiny-test (the
actors are now made with ``enable_task_events=False``); each agent kept every prompt it had rendered, up to
100,000 (a Python heap growing by each new training prompt; now the 4,096 most recently used)."""

from __future__ import annotations

import argparse
import json
import time

import psutil
import pytest

from hacrl.agents.agent import PROMPT_CACHE_SIZE, load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.config import load_config
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model

def test_the_soak_bench_records_every_process_each_step(load_script, tmp_path, capsys):
    soak = load_script("bench/soak.py", "soak")
    args = argparse.Namespace(backend="local", preset="tiny-test", steps=4, warmup=1, threads=1, eval_every=2,
                              eval_size=5, checkpoint_every=2, out=tmp_path / "soak.json", overrides=[])
    result = soak.run(args)
    # the trainer and its reward worker (task.reward=numeric is scored in a worker process), every step
    assert set(result["series"]) == {"trainer", "reward-worker-0"}
    for role, s in result["series"].items():
        assert s["step"] == [1, 2, 3, 4], role
        assert all(x > 0 for x in s["rss_mib"]) and all(x >= 1 for x in s["threads"]) and len(set(s["pid"])) == 1
    assert result["summary"]["trainer"]["rss_mib_last"] == result["series"]["trainer"]["rss_mib"][-1]
    assert soak.slope([1, 2, 3], [1.0, 3.0, 5.0]) == 2.0  # the least-squares line through the points
    text = soak.report(result)
    assert "reward-worker-0" in text and "MiB/100 steps" in text
    json.dumps(result)  # what --out writes


def test_an_agent_keeps_only_its_most_recently_rendered_prompts():
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    first = agent.render_prompt("12+34=?")
    for i in range(PROMPT_CACHE_SIZE + 100):
        agent.render_prompt(f"{i}+{i}=")
        if i % 1000 == 0:
            assert agent.render_prompt("12+34=?") is first  # used again: kept, and moved to the recent end
    assert len(agent._prompt_cache) == PROMPT_CACHE_SIZE
    assert "12+34=?" in agent._prompt_cache and "0+0=" not in agent._prompt_cache  # least recently used: dropped
    assert agent.render_prompt("0+0=") == agent.render_prompt("0+0=")  # rendered again, the same ids


@pytest.mark.slow
def test_calls_to_ray_actors_leave_no_record_in_rays_gcs(tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        gcs = [p for p in psutil.Process().children(recursive=True) if p.name() == "gcs_server"]
        assert len(gcs) == 1
        cfg = load_config("tiny-test", overrides=["backend.name=ray", "trainer.threads=1",
                                                  "backend.num_cpus_per_agent=0.5"])
        trainer = Trainer(cfg, tmp_path, sinks=False)
        try:
            actors = [a for group in trainer.backend.groups for a in group]
            ray.get([a.info.remote() for _ in range(200) for a in actors])  # warm-up: the GCS's tables settle
            time.sleep(3)
            before = gcs[0].memory_info().rss
            # 3,000 actor calls: ~10 MiB of task records when Ray keeps them
            ray.get([a.info.remote() for _ in range(1500) for a in actors])
            time.sleep(3)  # workers report task events to the GCS every second
            grown = (gcs[0].memory_info().rss - before) / 2**20
        finally:
            trainer.close()
    finally:
        ray.shutdown()
    assert grown < 3, f"Ray's GCS grew {grown:.1f} MiB over 3,000 actor calls"
