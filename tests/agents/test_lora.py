"""LoRA agents (peft) on tiny random models: only adapters train, the KL reference is the base with the
adapter off, and saved adapters / merged copies reproduce the training model's log-probs."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft", reason="LoRA needs the peft package (pip install 'hacrl[lora]')")

from transformers import AutoModelForCausalLM

from hacrl.agents.agent import load_agent, token_logprobs
from hacrl.agents.lora import AdapterDisabledReference
from hacrl.agents.tiny import build_bpe_tokenizer, build_char_tokenizer, build_model
from hacrl.config import build_config
from hacrl.trainer.trainer import Trainer

pytestmark = [pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning"), pytest.mark.model]

LORA = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}


@pytest.fixture(scope="module", params=["qwen2-small", "llama-base"])
def base_dir(request, tmp_path_factory):
    """A random tiny model saved as an ordinary checkpoint (char tokenizer for Qwen2, BPE for Llama)."""
    tok = build_char_tokenizer() if request.param.startswith("qwen") else build_bpe_tokenizer()
    path = tmp_path_factory.mktemp(request.param)
    build_model(request.param, tok, seed=1).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def batch_of(agent):
    prompts = [agent.render_prompt(p) for p in ("12+34=", "7+8=", "99+1=")]
    answers = [agent.encode_answer(a, finished=True)[0] for a in ("46", "15", "100")]
    return agent.batch(prompts, answers)


def train_step(agent, batch):
    agent.optimizer.zero_grad()
    (-token_logprobs(agent.model, batch).sum()).backward()
    agent.optimizer.step()


def test_only_adapter_weights_change(base_dir):
    agent = load_agent("a", 0, base_dir, lora=LORA)
    agent.configure_optimizer(lr=1e-2)
    trainable = {n for n, p in agent.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert sum(len(g["params"]) for g in agent.optimizer.param_groups) == len(trainable)
    assert agent.num_trainable < agent.num_parameters / 5
    before = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
    train_step(agent, batch_of(agent))
    for n, p in agent.model.named_parameters():
        same = torch.equal(before[n], p)
        if "lora_B" in n:  # B starts at 0 and gets the first gradient
            assert not same, f"{n} did not train"
        elif "lora_" not in n:
            assert same, f"base weight {n} changed"


def test_reference_is_the_base_model_with_adapters_off(base_dir):
    agent = load_agent("a", 0, base_dir, lora=LORA)
    agent.configure_optimizer(lr=1e-2)
    agent.enable_reference()
    assert isinstance(agent.ref_model, AdapterDisabledReference)  # no deep copy
    batch = batch_of(agent)
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    want = token_logprobs(base, batch)
    for _ in range(2):
        train_step(agent, batch)
    with torch.no_grad():
        assert torch.allclose(token_logprobs(agent.ref_model, batch), want, atol=1e-6)
    assert not torch.allclose(token_logprobs(agent.model, batch), want, atol=1e-4)  # the adapter is back on


def test_save_reload_and_merged_copy_give_the_same_logprobs(base_dir, tmp_path):
    agent = load_agent("a", 0, base_dir, lora=LORA)
    agent.configure_optimizer(lr=1e-2)
    batch = batch_of(agent)
    for _ in range(2):
        train_step(agent, batch)
    agent.model.eval()
    with torch.no_grad():
        want = token_logprobs(agent.model, batch)
    agent.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()

    again = load_agent("a", 0, base_dir, adapter_path=tmp_path / "ckpt")
    assert again.num_trainable == agent.num_trainable  # reloaded trainable, for resume
    again.model.eval()
    with torch.no_grad():
        assert torch.equal(token_logprobs(again.model, batch), want)

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "merged")  # plain transformers
    assert type(merged).__name__ == type(agent.model.get_base_model()).__name__
    with torch.no_grad():
        assert torch.allclose(token_logprobs(merged, batch), want, atol=1e-5)
    plain = load_agent("m", 0, tmp_path / "ckpt")  # a LoRA checkpoint as a model dir: its merged copy
    assert not plain.is_lora
    with torch.no_grad():
        assert torch.allclose(token_logprobs(plain.model, batch), want, atol=1e-5)


def test_trainer_lora_agent_with_kl_checkpoints_and_resumes_exactly(base_dir, tmp_path):
    tree = {
        "task": {"name": "add2"},
        "agents": [{"id": "lora", "model": str(base_dir), "lr": 1e-2, "kl_coef": 0.01, "lora": LORA},
                   {"id": "full", "model": str(base_dir), "lr": 1e-3}],
        "rollout": {"rollouts_per_prompt": 2, "max_new_tokens": 4},
        "trainer": {"steps": 1, "batch_size": 2, "eval_size": 4, "log_samples": 0},
        "run": {"tensorboard": False},
    }
    cfg = build_config(tree)
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, tmp_path / "run", sinks=False)
    agent = trainer.agents[0]
    assert agent.is_lora and isinstance(agent.ref_model, AdapterDisabledReference)
    trainer.step()
    ckpt = trainer.save_checkpoint()
    lora_dir = ckpt / "agents" / "lora"
    assert (lora_dir / "adapter_config.json").is_file() and (lora_dir / "merged" / "config.json").is_file()
    assert not (lora_dir / "reference").exists()  # the reference is the base: nothing to save
    assert (ckpt / "agents" / "full" / "model.safetensors").is_file()

    batch = batch_of(agent)
    agent.model.eval()
    with torch.no_grad():
        want = token_logprobs(agent.model, batch)
    resumed = Trainer(cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"steps": 2})}),
                      tmp_path / "run", resume_from=ckpt, sinks=False)
    again = resumed.agents[0]
    assert again.is_lora and resumed.step_idx == 1
    again.model.eval()
    with torch.no_grad():
        assert torch.equal(token_logprobs(again.model, batch), want)
    state = agent.optimizer.state_dict()["state"]
    state2 = again.optimizer.state_dict()["state"]
    assert state.keys() == state2.keys() and all(torch.equal(state[k]["exp_avg"], state2[k]["exp_avg"])
                                                 for k in state)


def test_a_lora_agent_is_built_and_reloaded_without_peft_s_future_warning(base_dir, tmp_path):
    import warnings

    from hacrl.agents.lora import save_lora

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # peft asks the deprecated is_gradient_checkpointing
        agent = load_agent("a", 0, base_dir, lora=LORA)
        save_lora(agent.model, tmp_path / "adapter", merged=False)
        load_agent("a", 0, base_dir, lora=LORA, adapter_path=tmp_path / "adapter")


def test_the_references_shared_prompt_pass_hands_the_cache_under_the_current_keyword(base_dir):
    # The KL reference of a LoRA agent wraps the peft model, whose forward takes **kwargs: the keyword for
    # the KV cache must be read from the transformers model inside, not from the wrapper (which would pick
    # the deprecated ``past_key_values``: a FutureWarning in every run with kl_coef > 0).
    import warnings

    from hacrl.agents.shared_prompt import cache_kwargs, group_batch, grouped_logprobs

    agent = load_agent("a", 0, base_dir, lora=LORA)
    agent.enable_reference()
    assert set(cache_kwargs(agent.ref_model, None)) == {"cache"}
    prompts = [agent.render_prompt("12+34=")] * 2
    answers = [agent.encode_answer(a, finished=True)[0] for a in ("46", "45")]
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    grouped, plain = group_batch(prompts, answers, int(agent.tokenizer.pad_token_id)), agent.batch(prompts, answers)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        with torch.no_grad():
            got = grouped_logprobs(agent.ref_model, grouped)[grouped.answer_mask_BA]
    want = token_logprobs(base, plain)[plain.answer_mask_BT]
    assert torch.allclose(got, want, atol=1e-5)
