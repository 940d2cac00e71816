"""The KL reference runs on the rows whose KL term exists (HACPO: own answers only), and the loss is the
one a reference over every row gives."""

from __future__ import annotations

import pytest
import torch

from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.core import LossInputs, StepSettings, hacpo_loss
from hacrl.learner.update import _forward
from hacrl.learner.view import ViewRow

pytestmark = pytest.mark.model


@pytest.mark.parametrize("shared", [True, False])
def test_reference_on_own_rows_gives_the_same_loss(shared):
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    agent.model.double()
    agent.enable_reference()
    with torch.no_grad():  # move the policy away from the reference so the KL term is not zero
        for p in agent.model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    texts = [("7+8=", "15", True), ("12+34=", "46", False), ("7+8=", "1", False), ("12+34=", "4", True),
             ("1+2=", "3 3", True)]
    rows = [ViewRow(prompt_index=i % 2, source=0 if own else 1, is_own=own, prompt_ids=agent.render_prompt(p),
                    answer_ids=agent.encode_answer(a, finished=True)[0], old_logp_mean=-1.0,
                    old_token_logps=None, reward=float(i % 2), advantage=0.5 - i % 2, omega=1.0)
            for i, (p, a, own) in enumerate(texts)]
    own = [r.is_own for r in rows]
    _, ref_all, mask = _forward(agent, rows, shared, [True] * len(rows))
    logp, ref_own, _ = _forward(agent, rows, shared, own)
    assert ref_all is not None and ref_own is not None
    for i, o in enumerate(own):
        if o:
            torch.testing.assert_close(ref_own[i], ref_all[i], atol=1e-12, rtol=0)
        else:
            assert (ref_own[i] == 0).all()
    assert _forward(agent, rows, shared, [False] * len(rows))[1] is None

    def loss(ref):
        inputs = LossInputs(logp, mask, torch.tensor([r.advantage for r in rows], dtype=torch.float64),
                            old_logp_mean_B=torch.full((5,), -1.0, dtype=torch.float64), own_B=torch.tensor(own),
                            omega_B=torch.ones(5, dtype=torch.float64), ref_logp_BT=ref)
        return hacpo_loss(inputs, StepSettings(clip_low=0.2, clip_high=0.2, alpha=1.0, cross_lower=0.5,
                                               kl_coef=0.1))

    (l_all, m_all), (l_own, _) = loss(ref_all), loss(ref_own)
    assert float(m_all["kl"]) > 0
    torch.testing.assert_close(l_own, l_all, atol=1e-12, rtol=0)
