"""`hacrl plan`: the memory estimate against a measured peak (tiny agent, CPU), the paper presets from
built-in shapes (no model directory here), what sharding does to the table, and bad input."""

from __future__ import annotations

import pytest
import torch

from hacrl import plan
from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.cli import main
from hacrl.config import load_config
from hacrl.learner.update import ViewRow

PROMPT, ANSWER, ROWS = 48, 80, 16


def rows_for(agent):
    """ROWS rows of exactly PROMPT + ANSWER tokens, every prompt distinct."""
    out = []
    for i in range(ROWS):
        prompt = [3 + (i * 7 + j) % 40 for j in range(PROMPT)]
        answer = [5 + j % 9 for j in range(ANSWER)]
        out.append(ViewRow(prompt_index=i, source=0, is_own=True, prompt_ids=prompt, answer_ids=answer,
                           old_logp_mean=-2.0, old_token_logps=None, reward=float(i % 2),
                           advantage=1.0 if i % 2 else -1.0))
    return out


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_the_estimate_is_within_25_percent_of_the_measured_peak(checkpointing):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    if checkpointing:
        agent.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    agent.enable_reference()
    agent.configure_optimizer(lr=1e-4)
    measured = plan.measure_update_peak(agent, rows_for(agent), micro_batch_size=ROWS, kl_coef=0.01)
    cfg = load_config("tiny-test", overrides=[f"agents.qwen-char.max_prompt_tokens={PROMPT}",
                                              f"agents.qwen-char.max_answer_tokens={ANSWER}",
                                              f"trainer.micro_batch_size={ROWS}", "agents.qwen-char.kl_coef=0.01",
                                              f"agents.qwen-char.gradient_checkpointing={checkpointing}"])
    spec = cfg.agents[0]
    shape = plan.model_shape(spec)
    assert shape.params == agent.num_parameters  # counted on the meta device from config.json alone
    est = plan.estimate(shape, plan.setting_of(spec, cfg), prompt=PROMPT, answer=ANSWER, rollout_rows=16,
                        device_bytes=2**34)
    assert est["train_peak"] == pytest.approx(measured["peak"], rel=0.25), (est, measured)


def test_paper_presets_plan_from_built_in_shapes_and_say_what_fits(capsys):
    assert main(["plan", "--preset", "paper-size-qwen3-1.7b-4b"]) == 0
    out = capsys.readouterr().out
    assert "built-in shapes of qwen3-4b-base" in out
    assert "qwen3-4b-base overflows 80.0 GiB" in out
    assert "--set agents.qwen3-4b-base.fsdp=true" in out
    sharded = ["--set", "agents.qwen3-4b-base.fsdp=true", "--set", "agents.qwen3-4b-base.data_parallel=4",
               "--set", "backend.name=ray", "--set", "rollout.engine_options.batch_size=16"]
    assert main(["plan", "--preset", "paper-size-qwen3-1.7b-4b", *sharded]) == 0
    table = capsys.readouterr().out
    fits = next(line for line in table.splitlines() if line.startswith("fits"))
    assert fits.split()[1:] == ["yes", "yes"]
    # a sharded agent generates with the hf engine; vLLM's weight push from shards is refused, in one line
    assert main(["plan", "--preset", "paper-size-qwen3-1.7b-4b", *sharded, "--set", "rollout.engine=vllm"]) == 2
    assert "agents.qwen3-4b-base.fsdp: pushing a sharded agent's weights" in capsys.readouterr().err


def test_sharding_divides_the_per_device_state():
    cfg = load_config("paper-state-qwen3-4b", overrides=["backend.name=ray", "agents.qwen3-4b.data_parallel=4",
                                                          "agents.qwen3-4b.fsdp=true"])
    sharded, plain = plan.plan(cfg)
    for key in ("weights", "gradients", "optimizer", "reference"):
        assert sharded.est[key] == pytest.approx(plain.est[key] / 4)
    assert plain.est["optimizer"] == pytest.approx(2 * 4 * plain.shape.params)  # two float32 moments
    lora = plan.plan(load_config("paper-state-qwen3-4b", overrides=["agents.qwen3-4b.lora.r=8"]))[0]
    assert lora.est["reference"] == 0 and lora.est["optimizer"] < plain.est["optimizer"] / 100


@pytest.mark.parametrize(("args", "message"), [
    (["--model-config", "nope"], "expected ID=PATH"),
    (["--model-config", "ghost=x.json"], "no agent has that id"),
    (["--model-config", "qwen-char=/no/such/config.json"], "no such config.json"),
    (["--set", "agents.qwen-char.model=/no/such/Model-7B"], "give --model-config qwen-char="),
    (["--device-memory", "0"], "--device-memory must be"),
])
def test_bad_input_is_one_line(capsys, args, message):
    assert main(["plan", "--preset", "tiny-test", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
