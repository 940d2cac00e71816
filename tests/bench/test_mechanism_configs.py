"""examples/mechanism/*.yaml, one config per cell of the mechanism study (issue #45): each loads, keeps the tiny
presets' settings, names agents that are shipped or made by scripts/make_mechanism_agents.py, and its header
gives the command that runs its arms. No model is loaded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hacrl.config import load_config
from hacrl.data import get_task
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.report.compare import parse_seeds, parse_variant

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "examples" / "mechanism").glob("*.yaml"))
CELLS = {"e1-tiny-model", "e1-tiny-state", "sym-0.5", "sym-1.0", "asym", "eq-model", "high", "low",
         "p1-rho0", "p1-rho1", "p2-rho0", "p2-rho1", "p1-avx2-rho0.5", "p2-rho0.5"}  # the last two: E2 stage B
E4 = {"e4-unfaithful": 3, "e4-faithful": 1}  # the SmolLM2 confirmation (design §7) and its control: cell -> seeds
TINY = [p for p in CONFIGS if p.stem not in E4]
PENDING_ARMS = {"naive-recompute"}  # the E1 arm, issue #45 item 1, lands with its own change
SHIPPED = {"qwen2-char", "qwen2-char-early", "qwen2-char-small", "llama-bpe"}


@pytest.fixture(scope="module")
def generated_agents(load_script) -> frozenset[str]:
    """The agents scripts/make_mechanism_agents.py makes into the cache."""
    module = load_script("scripts/make_mechanism_agents.py", "make_mechanism_agents")
    return frozenset(n for plan in module.PLANS for n in plan.targets)


def test_one_config_per_cell():
    assert {p.stem for p in CONFIGS} == CELLS | set(E4)


@pytest.mark.parametrize("path", TINY, ids=lambda p: p.stem)
def test_cell_config_loads_with_the_tiny_settings(path, generated_agents):
    cfg = load_config(path=path)
    assert (cfg.trainer.steps, cfg.trainer.batch_size, cfg.rollout.rollouts_per_prompt) == (30, 16, 8)
    assert (cfg.trainer.eval_size, cfg.trainer.eval_every, cfg.trainer.threads) == (1000, 10, 1)
    assert (cfg.algorithm.alpha, cfg.algorithm.delta) == (1.0, 0.6)
    # E2's trace cells run at lr 1e-4: at 3e-4 GSPOx2 dropped F_weak from 0.348 to 0.186 (docs/results/mechanism.md)
    lr = 1e-4 if cfg.task.name == "add2-trace" else 3e-4
    assert all(a.lr == lr for a in cfg.agents) and len(cfg.agents) == 2
    task = get_task(cfg.task.name)
    assert cfg.task.name in ("add2", "mixed", "add2-trace")
    assert cfg.rollout.max_new_tokens >= max(len(p.answer) for p in task.test_problems(1000)) + 1  # + EOS
    if cfg.task.name == "add2-trace":
        assert cfg.trainer.eval_texts == 1000
    known = SHIPPED | generated_agents
    for agent in cfg.agents:
        assert agent.model.startswith("builtin:") and agent.model.removeprefix("builtin:") in known


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_header_gives_the_command_that_runs_the_cell(path):
    header = " ".join(line.lstrip("# ").rstrip("\\ ") for line in path.read_text().splitlines()
                      if line.startswith("#"))
    assert f"hacrl compare --config examples/mechanism/{path.name}" in header
    assert f"--output results/mechanism/{path.stem}" in header
    # seeds 0-9, never fewer than the design's floor of 8 (the P2 cells ran 0-7); E4: 3 seeds, its control 1
    assert len(parse_seeds(re.search(r"--seeds (\S+)", header).group(1))) >= E4.get(path.stem, 8)
    assert "--keep-checkpoints none" in header
    arms = re.search(r"--algos (\S+)", header).group(1).split(",")
    baselines = re.search(r"--baselines (\S+)", header).group(1).split(",")
    assert set(baselines) <= set(arms) and "hacpo" in arms
    for arm in arms:
        if arm.split("@")[0] in PENDING_ARMS and arm.split("@")[0] not in ALGORITHMS:
            continue
        parse_variant(arm)


def test_e4_cells_are_smollm2_state_with_the_study_schedule_and_differ_only_in_the_partner():
    from hacrl.agents import gguf

    preset = load_config("smollm2-state")
    cells = {stem: load_config(path=ROOT / "examples" / "mechanism" / f"{stem}.yaml") for stem in E4}
    for stem, cfg in cells.items():
        assert (cfg.task, cfg.rollout, cfg.algorithm) == (preset.task, preset.rollout, preset.algorithm)
        assert [a.model_dump(exclude={"id", "model"}) for a in cfg.agents] == [
            a.model_dump(exclude={"id", "model"}) for a in preset.agents]
        assert (cfg.trainer.steps, cfg.trainer.batch_size) == (preset.trainer.steps, preset.trainer.batch_size)
        # design §7: 300 held-out problems at steps 0, 15, 30, every text kept, no 128-token pass
        t = cfg.trainer
        assert (t.eval_size, t.eval_every, t.eval_texts, t.eval_budget, t.threads) == (300, 15, 300, 0, 1)
        assert t.start_eval_cache == f"results/mechanism/{stem}/start-evals" and t.checkpoint_every == 5
        assert cfg.agents[0].model == preset.agents[0].model == f"builtin:{gguf.SMOLLM2}"
    assert cells["e4-faithful"].agents[1].model == preset.agents[1].model == f"builtin:{gguf.SMOLLM2_SFT}"
    assert cells["e4-unfaithful"].agents[1].model == f"builtin:{gguf.SMOLLM2_UNFAITHFUL}"
