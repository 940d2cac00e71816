"""The tiny agents shipped in hacrl/assets/tiny: they load offline, tokenize exactly, and sit at the
partial accuracy their manifest records (made by scripts/make_tiny_agents.py)."""

from __future__ import annotations

import itertools
import json
from functools import cache

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hacrl.agents.tiny import TINY_PAIRS, generate_greedy, greedy_accuracy, tiny_agent_path
from hacrl.data import get_task

AGENTS = sorted({name for pair in TINY_PAIRS.values() for name in pair})


@cache
def load(name: str):
    path = tiny_agent_path(name)
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    manifest = json.loads((path / "manifest.json").read_text())
    return model.eval(), tok, manifest


def test_pairs_name_shipped_agents():
    assert set(TINY_PAIRS) == {"state", "size", "model"}
    for a, b in TINY_PAIRS.values():
        assert a != b
        assert (tiny_agent_path(a) / "model.safetensors").is_file()
    with pytest.raises(FileNotFoundError, match="qwen2-char"):
        tiny_agent_path("no-such-agent")


@pytest.mark.model
@pytest.mark.parametrize("name", AGENTS)
def test_agent_loads_with_auto_classes(name):
    model, tok, manifest = load(name)
    assert manifest["name"] == name and manifest["task"] == "add2"
    assert model.config.model_type == manifest["model_type"] in {"qwen2", "llama"}
    assert sum(p.numel() for p in model.parameters()) == manifest["params"]
    assert 2e5 <= manifest["params"] <= 2e6
    assert model.dtype == torch.float32
    assert len(tok) == manifest["vocab_size"] == model.config.vocab_size
    assert tok.pad_token_id is not None and tok.eos_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert model.generation_config.eos_token_id == tok.eos_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id


@pytest.mark.model
@pytest.mark.parametrize("name", AGENTS)
def test_tokenizer_round_trips_task_text(name):
    _, tok, _ = load(name)
    texts = []
    for task_name in ("add2", "add3", "mixed", "mul1x3"):
        for p in itertools.islice(get_task(task_name).train_problems(0), 50):
            texts.append((p.prompt, p.answer))
    for prompt, answer in texts:
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        a_ids = tok(answer, add_special_tokens=False)["input_ids"]
        joint = tok(prompt + answer, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in joint
        assert p_ids + a_ids == joint  # no token straddles the prompt/answer boundary
        assert tok.decode(joint) == prompt + answer
        assert tok.decode(a_ids + [tok.eos_token_id], skip_special_tokens=True) == answer
    for text in ["Question: 07 + 85 = ?\nAnswer: 92", "  a  b ", "x=-3*(4/5)!"]:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


@pytest.mark.model
def test_left_padded_batch_matches_single_prompts():
    model, tok, _ = load(TINY_PAIRS["model"][0])
    prompts = ["07+85=", "123+456=", "3*004=", "41+17="]  # different lengths, so left padding happens
    batched = generate_greedy(model, tok, prompts, max_new_tokens=6)
    single = [generate_greedy(model, tok, [p], max_new_tokens=6)[0] for p in prompts]
    assert batched == single


@pytest.mark.model
@pytest.mark.parametrize("name", AGENTS)
def test_greedy_accuracy_matches_manifest(name):
    model, tok, manifest = load(name)
    task = get_task("add2")
    acc = greedy_accuracy(model, tok, task, task.test_problems(200))
    assert 0.1 < acc < 0.9
    assert abs(acc - manifest["test_accuracy_greedy"]) <= 0.10


@pytest.mark.model
def test_pairs_differ_the_way_their_names_say():
    def arch(name):
        model, tok, manifest = load(name)
        return model.config.model_type, tok.get_vocab(), manifest["params"], model

    (ta, va, pa, ma), (tb, vb, pb, mb) = arch(TINY_PAIRS["state"][0]), arch(TINY_PAIRS["state"][1])
    config_a, config_b = (
        {k: v for k, v in m.config.to_dict().items() if k != "_name_or_path"} for m in (ma, mb)
    )
    assert ta == tb and va == vb and pa == pb and config_a == config_b
    assert any(not torch.equal(x, y) for x, y in zip(ma.parameters(), mb.parameters()))

    (ta, va, pa, _), (tb, vb, pb, _) = arch(TINY_PAIRS["size"][0]), arch(TINY_PAIRS["size"][1])
    assert ta == tb and va == vb and pb >= 2 * pa

    (ta, va, _, ma), (tb, vb, _, mb) = arch(TINY_PAIRS["model"][0]), arch(TINY_PAIRS["model"][1])
    assert ta != tb and type(ma) is not type(mb)
    assert len(va) != len(vb) and va != vb
