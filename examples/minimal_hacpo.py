"""HACPO in one file: two different tiny language models learn 2-digit addition together.

Read top to bottom. Everything the library spreads over layers is here in order: sampling, the verifier,
the shared pool, capability tracking, the capability-aware advantage (eqs. 6-7), re-tokenization of the
other agent's answers, and the loss with the capability discrepancy coefficient, exponential importance
sampling and stepwise clipping (Appendix E). The agents are the warm-started tiny models shipped with
hacrl: a Qwen2-style model with a character tokenizer and a Llama-style model with a BPE tokenizer.

    python examples/minimal_hacpo.py --steps 20

The real trainer (``hacrl train``) adds configs, N agents, baselines, evaluation, checkpoints, logging.
tests/integration/test_example.py checks that one step here computes what ``hacrl.core`` computes.
"""

from __future__ import annotations

import argparse
import random
from collections import deque

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hacrl.agents.tiny import tiny_agent_path

# ---------------------------------------------------------------------------------------------- setup
CLIP_LOW, CLIP_HIGH = 3e-4, 4e-4  # GSPO clip radii for own answers
ALPHA, DELTA, DELTA_STEP = 1.0, 0.2, 0.025  # exponential IS, cross clip window [1-δ+m·δ_step, 1]
WINDOW = 5  # K: steps in the capability window
MAX_NEW = 4  # answers are at most 3 digits + EOS


class Agent:
    def __init__(self, name: str, lr: float):
        path = tiny_agent_path(name)
        self.name = name
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.history: deque[float] = deque(maxlen=WINDOW)  # per-step success rate

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]


def problem(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randrange(100), rng.randrange(100)
    return f"{a:02d}+{b:02d}=", str(a + b)


def reward(text: str, answer: str) -> float:  # the verifier
    return float(text.strip() == answer)


# ------------------------------------------------------------------------------------- log-probs
def logprobs(model, prompts: list[list[int]], answers: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token log-probs of each answer given its prompt: [B, T] and the answer mask [B, T]."""
    rows = [p + a for p, a in zip(prompts, answers)]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros(len(rows), width - 1)
    for i, (p, a) in enumerate(zip(prompts, answers)):
        ids[i, : len(p) + len(a)] = torch.tensor(p + a)
        attn[i, : len(p) + len(a)] = 1
        mask[i, len(p) - 1 : len(p) + len(a) - 1] = 1  # position t predicts token t+1
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logp * mask, mask


@torch.no_grad()
def sample(agent: Agent, prompt: str, n: int) -> list[dict]:
    """n answers with the sampling policy's sequence log-prob (temperature 1: π_old itself)."""
    ids = torch.tensor([agent.encode(prompt)] * n)
    out = agent.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                               max_new_tokens=MAX_NEW, eos_token_id=agent.tok.eos_token_id,
                               pad_token_id=agent.tok.pad_token_id, output_scores=True,
                               return_dict_in_generate=True)
    answers = []
    for r in range(n):
        tokens, logp = [], 0.0
        for t, score in enumerate(out.scores):
            tok_id = int(out.sequences[r, ids.shape[1] + t])
            tokens.append(tok_id)
            logp += float(score[r].log_softmax(-1)[tok_id])
            if tok_id == agent.tok.eos_token_id:
                break
        finished = tokens[-1] == agent.tok.eos_token_id
        answers.append({"tokens": tokens, "text": agent.tok.decode(tokens, skip_special_tokens=True),
                        "finished": finished, "old_mean": logp / len(tokens)})
    return answers


@torch.no_grad()
def greedy_accuracy(agent: Agent, n: int = 200) -> float:
    test = random.Random(12345)
    correct = 0
    for _ in range(n):
        a, b = test.randrange(100), test.randrange(100)
        ids = torch.tensor([agent.encode(f"{a:02d}+{b:02d}=")])
        out = agent.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                   max_new_tokens=MAX_NEW, pad_token_id=agent.tok.pad_token_id,
                                   eos_token_id=agent.tok.eos_token_id)
        correct += reward(agent.tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True), str(a + b))
    return correct / n


# ------------------------------------------------------------------------------------- one step
def update_capability(agents: list[Agent], pool: list[tuple]) -> list[float]:
    """Each agent's success rate this step, smoothed over the last K steps (eq. 9), floored."""
    for j, agent in enumerate(agents):
        mine = [r for _, src, _, r in pool if src == j]
        agent.history.append(sum(mine) / len(mine))
    return [max(sum(a.history) / len(a.history), 1e-8) for a in agents]


def omega_table(cap: list[float]) -> list[list[float]]:
    """ω^(k,j) = P̂_k / P̂_j, clamped (eq. 8)."""
    return [[min(max(cap_k / cap_j, 0.1), 10.0) for cap_j in cap] for cap_k in cap]


def learner_rows(k: int, learner: Agent, pool: list[tuple], batch: list[tuple[str, str]],
                 omega: list[list[float]]) -> list[dict]:
    """Learner k's view of the whole pool: its tokens, advantages (eqs. 6-7) and the update's ω."""
    rows = []
    for g in range(len(batch)):
        group = [(src, ans, r) for gg, src, ans, r in pool if gg == g]
        rewards = torch.tensor([r for _, _, r in group])
        # capability-aware baseline (eq. 7): μ̂_k = 1/|group| Σ ω^(k,src) R
        mu = sum(omega[k][src] * r for src, _, r in group) / len(group)
        if mu > rewards.max():  # baseline above every reward: use the learner's own mean
            mu = sum(r for src, _, r in group if src == k) / sum(1 for src, _, _ in group if src == k)
        std = rewards.std()  # unbiased, over the raw rewards of the whole group
        for src, ans, r in group:
            adv = 0.0 if rewards.max() == rewards.min() else (r - mu) / (float(std) + 1e-6)  # eq. 6
            if src == k:  # own answer: its own tokens
                answer_ids = ans["tokens"]
            else:  # another agent's answer: re-tokenize its text with the learner's tokenizer
                answer_ids = learner.encode(ans["text"]) + ([learner.tok.eos_token_id] if ans["finished"] else [])
            rows.append({"prompt": learner.encode(batch[g][0]), "answer": answer_ids, "own": src == k,
                         "old_mean": ans["old_mean"], "adv": adv, "omega": omega[src][k]})
    return rows


def hacpo_loss(learner: Agent, mb: list[dict], m: int) -> torch.Tensor:
    """The loss of optimizer step m (Appendix E): GSPO on own answers, the corrected term on the others'."""
    lower = min(1.0, 1.0 - DELTA + m * DELTA_STEP)  # stepwise clipping (eq. 14)
    logp, mask = logprobs(learner.model, [r["prompt"] for r in mb], [r["answer"] for r in mb])
    # sequence ratio: mean log-prob under the learner (its tokens) minus the source's old mean
    log_s = (logp.sum(-1) / mask.sum(-1).clamp_min(1)) - torch.tensor([r["old_mean"] for r in mb])
    s = log_s.clamp(-10, 10).exp()
    adv = torch.tensor([r["adv"] for r in mb])
    own = torch.tensor([r["own"] for r in mb])
    # own answers: GSPO's clipped surrogate
    own_obj = torch.minimum(s * adv, s.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH) * adv)
    # other agents' answers: clip(s, ℓ_m, 1) · sg(clip)^α · ω^(src,k) · A   (eq. 50)
    c = s.clamp(lower, 1.0)
    cross_obj = c * c.detach() ** ALPHA * torch.tensor([r["omega"] for r in mb]) * adv
    return -torch.where(own, own_obj, cross_obj).mean()


def train_step(agents: list[Agent], rng: random.Random, prompts: int, group: int) -> None:
    # 1. rollout: every agent answers the same prompts; 2. reward; 3. one shared pool
    pool = []  # (prompt index, source agent, answer dict, reward)
    batch = [problem(rng) for _ in range(prompts)]
    for j, agent in enumerate(agents):
        for g, (prompt, answer) in enumerate(batch):
            for ans in sample(agent, prompt, group):
                pool.append((g, j, ans, reward(ans["text"], answer)))
    # 4. capability and ω
    omega = omega_table(update_capability(agents, pool))
    # 5. each learner k learns from the whole pool, in 2 minibatches
    for k, learner in enumerate(agents):
        rows = learner_rows(k, learner, pool, batch, omega)
        rng.shuffle(rows)
        for m, mb in enumerate([rows[: len(rows) // 2], rows[len(rows) // 2 :]]):
            loss = hacpo_loss(learner, mb, m)
            learner.opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(learner.model.parameters(), 1.0)
            learner.opt.step()


# ------------------------------------------------------------------------------------- training
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step (B)")
    parser.add_argument("--group", type=int, default=8, help="answers per prompt per agent (G)")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    torch.set_num_threads(1)

    agents = [Agent("qwen2-char", args.lr), Agent("llama-bpe", args.lr)]
    start_acc = [greedy_accuracy(a) for a in agents]
    for step in range(args.steps):
        train_step(agents, rng, args.prompts, args.group)
        print(f"step {step + 1:3d}  " + "  ".join(f"{a.name} acc {a.history[-1]:.2f}" for a in agents), flush=True)
    for agent, before in zip(agents, start_acc):
        print(f"{agent.name}: greedy accuracy {before:.3f} -> {greedy_accuracy(agent):.3f}")


if __name__ == "__main__":
    main()
