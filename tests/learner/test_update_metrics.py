"""``update_learner``'s KL reference and its metrics: the reference runs only with a KL coefficient above zero
and a reference model, on the learner's own rows (every row for ``naive``, whose cross answers train as its
own), and its log-probs reach the loss; each phase's seconds come back under its name; the gradient norm is
the row-weighted mean over minibatches, and each loss metric the mean over the rows it describes. Each test
holds lines that mutation testing (docs/mutation.md) found unchecked."""

from __future__ import annotations

import copy
import dataclasses
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from test_update import CAP, SETTINGS, make_agent, row, token_logps_by_hand  # the spy is conftest.py's

from hacrl.core import omega_matrix
from hacrl.learner import update
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.update import _accumulate, update_learner
from hacrl.learner.view import assign_advantages


def rows_of(agent) -> list:
    # learner 0: two own answers and two of agent 1, to one prompt
    return [row(agent, 0, 0, 0, "12+30=", "42", 1.0), row(agent, 0, 1, 0, "12+30=", "43", 0.0),
            row(agent, 0, 0, 0, "12+30=", "7", 0.0), row(agent, 0, 1, 0, "12+30=", "42", 1.0)]


def referenced_agent():
    """An agent whose policy has moved away from its frozen KL reference."""
    agent = make_agent()
    agent.enable_reference()
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(0.01)
    return agent


def run(agent, algo_name: str, kl_coef: float, spy, *, shared: bool = True) -> dict[str, float]:
    rows = rows_of(agent)
    algo = ALGORITHMS.get(algo_name)
    assign_advantages(rows, 0, algo, omega_matrix(CAP))
    settings = dataclasses.replace(SETTINGS, loss=dataclasses.replace(SETTINGS.loss, kl_coef=kl_coef))
    return update_learner(agent, [rows], algo, settings, micro_batch_size=64, grad_clip=1.0, shared_prompt=shared)


@pytest.mark.model
@pytest.mark.parametrize("algo_name, ref_on", [("hacpo", [True, False, True, False]), ("naive", [True] * 4)])
@pytest.mark.parametrize("kl_coef", [0.05, 1.0])  # a coefficient at or below 1 is a KL term too
def test_the_reference_logprobs_reach_the_loss_on_the_rows_the_kl_term_covers(spy, algo_name, ref_on, kl_coef):
    agent = referenced_agent()
    rows = rows_of(agent)
    metrics = run(agent, algo_name, kl_coef, spy)
    (call,) = spy
    ref, mask = call.inputs.ref_logp_BT, call.inputs.mask_BT
    assert ref is not None and call.settings.kl_coef == kl_coef
    for i, on in enumerate(ref_on):
        got = ref[i][mask[i].bool()].tolist()
        if on:  # the reference model's own log-probs, not the policy's
            want = token_logps_by_hand(SimpleNamespace(model=agent.ref_model), rows[i].prompt_ids, rows[i].answer_ids)
            assert got == pytest.approx(list(want), abs=1e-9), i
        else:
            assert all(v == 0 for v in got), i
    assert metrics["kl"] > 0 and metrics["busy_reference_s"] >= 0


@pytest.mark.model
@pytest.mark.parametrize("kl_coef, reference", [(0.0, True), (0.1, False)])
def test_no_reference_pass_without_a_kl_coefficient_or_a_reference_model(spy, kl_coef, reference):
    agent = referenced_agent() if reference else make_agent()
    metrics = run(agent, "hacpo", kl_coef, spy)
    (call,) = spy
    assert call.inputs.ref_logp_BT is None
    assert "busy_reference_s" not in metrics


@pytest.mark.model
@pytest.mark.parametrize("shared", [True, False])
def test_each_phase_reports_its_seconds_under_its_name(spy, shared):
    agent = referenced_agent()
    metrics = run(agent, "hacpo", 0.1, spy, shared=shared)
    busy = {k for k in metrics if k.startswith("busy_")}
    assert busy == {"busy_forward_s", "busy_reference_s", "busy_backward_s", "busy_optimizer_s"}
    assert all(metrics[k] >= 0 for k in busy)


@pytest.mark.model
def test_grad_norm_is_the_row_weighted_mean_over_minibatches(spy, monkeypatch):
    agent = make_agent()
    rows = rows_of(agent)
    algo = ALGORITHMS.get("hacpo")
    assign_advantages(rows, 0, algo, omega_matrix(CAP))
    norms = iter([1.0, 3.0])
    monkeypatch.setattr(update, "clip_grad_norm", lambda model, max_norm: next(norms))
    # minibatches of 1 and 3 rows: (1·1 + 3·3) / 4
    metrics = update_learner(agent, [rows[:1], copy.deepcopy(rows[1:])], algo, SETTINGS, micro_batch_size=64,
                             grad_clip=1.0)
    assert metrics["grad_norm"] == pytest.approx(2.5)


def test_each_metric_is_averaged_over_the_rows_it_describes():
    # three micro-batches of 4, 2 and 1 rows; a count a loss leaves out is 0 (mb 1 imitated, mb 2 own, mb 3 cross)
    t = torch.tensor
    micro = [({"count/own": t(3), "count/cross": t(1), "self/ratio": t(1.0), "cross/ratio": t(2.0),
               "imitation/nll": t(9.0), "pg_loss": t(0.5)}, 4),
             ({"count/cross": t(2), "count/imitated": t(2), "self/ratio": t(0.0), "cross/ratio": t(5.0),
               "imitation/nll": t(3.0), "pg_loss": t(2.0)}, 2),
             ({"count/own": t(1), "self/ratio": t(3.0), "cross/ratio": t(7.0), "imitation/acc": t(1.0),
               "pg_loss": t(1.0)}, 1)]
    totals: dict[str, float] = defaultdict(float)
    weights: dict[str, float] = defaultdict(float)
    for metrics, n in micro:
        _accumulate(totals, weights, metrics, n)
    means = {k: totals[k] / weights[k] for k in totals}
    assert means == pytest.approx({
        "count/own": 4, "count/cross": 3, "count/imitated": 2,  # counts are summed
        "self/ratio": (1.0 * 3 + 0.0 * 0 + 3.0 * 1) / 4,  # over own rows
        "cross/ratio": (2.0 * 1 + 5.0 * 2 + 7.0 * 0) / 3,  # over cross rows
        "imitation/nll": (9.0 * 0 + 3.0 * 2) / 2,  # over imitated rows
        "pg_loss": (0.5 * 4 + 2.0 * 2 + 1.0 * 1) / 7,  # over all rows
    })
    assert "imitation/acc" not in totals  # a metric of no rows is not reported at all
