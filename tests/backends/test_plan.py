"""`hacrl plan`: the memory estimate against a measured peak (tiny agent, CPU), the paper presets from
built-in shapes (no model directory here), what sharding does to the table, and bad input."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hacrl.agents.agent import enable_checkpointing, load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.backends import plan
from hacrl.cli import main
from hacrl.config import AgentSpec, load_config, preset_names
from hacrl.learner.view import ViewRow

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


@pytest.mark.model
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_the_estimate_is_within_25_percent_of_the_measured_peak(checkpointing):
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    if checkpointing:
        enable_checkpointing(agent.model)
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


PAPER = [p for p in preset_names() if p.startswith("paper-")]
ONE_GPU = ["--set", "backend.name=local", "--set", "agents.0.device=cuda:0", "--set", "agents.1.device=cuda:1",
           "--set", "rollout.engine_options.batch_size=256"] + [
    f"--set=agents.{i}.{k}" for i in (0, 1) for k in ("data_parallel=1", "fsdp=false", "fsdp_mixed_precision=null")]


@pytest.mark.parametrize("preset", PAPER)
def test_the_paper_presets_fit_8_gpus_of_80_gb_as_shipped(preset, capsys):
    # as shipped: 2 agents x 4 sharded replicas (FSDP2, bf16 compute over float32 masters), hf rollouts of 32
    # rows per call, on 8 GPUs of 80 GB, with room
    assert len(PAPER) == 3
    assert main(["plan", "--preset", preset]) == 0
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert next(line for line in lines if line.startswith("fits")).split()[1:] == ["yes", "yes"]
    assert next(line for line in lines if line.startswith("replicas")).split()[2:] == ["4", "fsdp-bf16"] * 2
    assert next(line for line in lines if line.startswith("GPUs (Ray)")).endswith("= 8")
    for p in plan.plan(load_config(preset)):
        assert max(p.est["train_peak"], p.est["rollout_peak"]) < 0.7 * 80 * plan.GiB  # 30% left for the estimate


def test_the_paper_pair_on_one_gpu_each_overflows_and_the_plan_says_what_fits(capsys):
    assert main(["plan", "--preset", "paper-size-qwen3-1.7b-4b", *ONE_GPU]) == 0
    out = capsys.readouterr().out
    assert "built-in shapes of qwen3-4b-base" in out
    assert "qwen3-4b-base overflows 80.0 GiB" in out
    assert "--set agents.qwen3-4b-base.fsdp=true" in out
    sharded = ["--set", "agents.qwen3-4b-base.fsdp=true", "--set", "agents.qwen3-4b-base.data_parallel=4",
               "--set", "backend.name=ray", "--set", "rollout.engine_options.batch_size=16"]
    assert main(["plan", "--preset", "paper-size-qwen3-1.7b-4b", *ONE_GPU, *sharded]) == 0
    table = capsys.readouterr().out
    fits = next(line for line in table.splitlines() if line.startswith("fits"))
    assert fits.split()[1:] == ["yes", "yes"]
    # sharded agents roll out with vLLM too (its weight push gathers a layer at a time): the paper preset on
    # 8 GPUs fits with a 0.3 share asleep during training, and the plan counts the engine and the gathered weights
    vllm = ["--set", "rollout.engine=vllm",
            "--set", "rollout.engine_options={gpu_memory_utilization: 0.3, enable_sleep_mode: true}"]
    assert main(["plan", "--preset", "paper-size-qwen3-1.7b-4b", *vllm]) == 0
    table = capsys.readouterr().out.splitlines()
    assert next(line for line in table if line.startswith("fits")).split()[1:] == ["yes", "yes"]
    assert next(line for line in table if line.startswith("vLLM engine")).split()[2:] == ["24.0", "24.0"]
    assert next(line for line in table if line.startswith("gathered weights for rollout")).split()[4:] == ["3.20", "7.49"]


def test_sharding_divides_the_per_device_state():
    # agent 0 sharded 4 ways in float32, agent 1 one plain replica
    cfg = load_config("paper-state-qwen3-4b", overrides=["agents.0.fsdp_mixed_precision=null",
                                                          "agents.1.fsdp_mixed_precision=null", "agents.1.fsdp=false",
                                                          "agents.1.data_parallel=1"])
    sharded, plain = plan.plan(cfg)
    for key in ("weights", "gradients", "optimizer", "reference"):
        assert sharded.est[key] == pytest.approx(plain.est[key] / 4)
    assert plain.est["optimizer"] == pytest.approx(2 * 4 * plain.shape.params)  # two float32 moments
    lora = plan.plan(load_config("paper-state-qwen3-4b", overrides=["agents.qwen3-4b.lora.r=8"]))[0]
    assert lora.est["reference"] == 0 and lora.est["optimizer"] < plain.est["optimizer"] / 100


def test_mixed_precision_in_the_plan_by_hand():
    # a made-up shape with round numbers: 1000 parameters, the largest layer 100, the root 200, 2 layers of
    # hidden 4, q 4, kv 2, intermediate 8, vocabulary 10
    shape = plan.Shape("m", "by hand", "M", params=1000, layer_params=100, root_params=200, layers=2, hidden=4,
                       intermediate=8, q_dim=4, kv_dim=2, vocab=10, qk_norm=False, linears=())
    fp32 = plan.Setting(world=4, fsdp=True, offload=False, lora_r=None, lora_targets="all-linear",
                        checkpointing=False, micro=1, dtype="float32", act_dtype="float32", kl=True, engine="hf",
                        hf_rows=8, engine_util=0.9, sleep=False)
    mixed = replace(fp32, act_dtype="bfloat16", mixed=True)
    est = plan.estimate(shape, mixed, prompt=3, answer=5, rollout_rows=8, device_bytes=2**30)
    # float32 masters, 1/4 each: weights 1000·4/4, gradients the same, AdamW 2·1000·4/4, reference 1000·4/4
    assert (est["weights"], est["gradients"], est["optimizer"], est["reference"]) == (1000, 1000, 2000, 1000)
    # bf16 gathers: the root and two layers (200 + 2·100)·2; generation's whole weights 1000·2
    assert (est["gathered"], est["rollout_full"]) == (800, 2000)
    # bf16 activations: 8 tokens · 2 layers · (6·4 + 4·4 + 2·2 + 4·8 = 76 values) · 2 bytes
    assert est["activations"] == 8 * 2 * 76 * 2 == 2432
    # logits: 2 · 1 row · 5 answer tokens · 10 · 2 bytes, plus a float32 chunk 5 · 10 · 4
    assert est["logits"] == 200 + 200
    # hf KV cache: 8 rows · (8 tokens · 2 layers · 2 (k, v) · 2 kv · 2 bytes + 10 · 4 float32 scores)
    assert est["kv_cache"] == 8 * (128 + 40) == 1344
    assert est["train_peak"] == 5000 + 800 + 2432 + 400
    assert est["rollout_peak"] == 5000 + 2000 + 1344
    # without mixed precision every gathered or computed value is 4 bytes; the resident state is the same
    full = plan.estimate(shape, fp32, prompt=3, answer=5, rollout_rows=8, device_bytes=2**30)
    assert (full["gathered"], full["rollout_full"], full["activations"]) == (1600, 4000, 4864)
    assert all(full[k] == est[k] for k in ("weights", "gradients", "optimizer", "reference"))


def test_the_plan_suggests_mixed_precision_as_a_fix():
    # sharded float32 4B agents on 30 GiB devices: bf16 gathers and compute are among the fixes
    cfg = load_config("paper-state-qwen3-4b", overrides=["agents.0.fsdp_mixed_precision=null",
                                                          "agents.1.fsdp_mixed_precision=null"])
    fixes = [label for label, _ in plan.plan(cfg, device_memory_gib=30)[0].fixes]
    assert any("agents.qwen3-4b.fsdp_mixed_precision=bfloat16" in label.split() for label in fixes), fixes


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


@pytest.mark.parametrize("preset", preset_names())
def test_every_shipped_preset_plans_on_a_fresh_machine(preset, tmp_path, monkeypatch, capsys):
    # no converted builtin (SmolLM2, its SFT copy) and an empty Hub cache: the shipped shapes stand in
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path / "hacrl"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert main(["plan", "--preset", preset]) == 0, capsys.readouterr().err
    assert "fits" in capsys.readouterr().out


# the models the project names, by the spelling it uses, and their published parameter counts
NAMED = [("Qwen/Qwen3-0.6B", "Qwen3ForCausalLM", 0.596e9), ("meta-llama/Llama-3.2-1B-Instruct", "LlamaForCausalLM",
                                                            1.236e9),
         ("models/Qwen3-1.7B-Base", "Qwen3ForCausalLM", 1.72e9), ("models/Qwen3-4B-Instruct-2507", "Qwen3ForCausalLM",
                                                                  4.02e9),
         ("models/Llama-3.2-3B-Instruct", "LlamaForCausalLM", 3.21e9),
         ("builtin:smollm2-135m-instruct-sft", "LlamaForCausalLM", 134.5e6),
         ("builtin:gemma-3-270m", "Gemma3ForCausalLM", 268.1e6)]


@pytest.mark.parametrize(("model", "arch", "params"), NAMED, ids=[m for m, _, _ in NAMED])
def test_plan_knows_the_shapes_of_every_model_the_project_names(model, arch, params, tmp_path, monkeypatch):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path / "hacrl"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    shape = plan.model_shape(AgentSpec(id="a", model=model))
    assert shape.arch == arch and shape.params == pytest.approx(params, rel=2e-3)
    assert "built-in shapes" in shape.source


def test_the_shipped_smollm2_shape_is_the_converted_models():
    from hacrl.agents.gguf import cache_dir

    converted = cache_dir() / "smollm2-135m-instruct" / "config.json"
    if not converted.is_file():
        pytest.skip("builtin:smollm2-135m-instruct is not converted on this machine")
    cached = plan.model_shape(AgentSpec(id="a", model="builtin:smollm2-135m-instruct"))
    shipped = plan.model_shape(AgentSpec(id="a", model="builtin:smollm2-135m-instruct-sft"),
                               {"a": str(plan._shape_files()["smollm2-135m"])})
    assert (cached.params, cached.layers, cached.vocab, cached.linears) == \
        (shipped.params, shipped.layers, shipped.vocab, shipped.linears)
