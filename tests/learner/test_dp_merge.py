"""The data-parallel merges of ``update_learner``'s metrics and observed cross ratios, by hand.

Each replica of an agent accumulates weighted totals over the micro-batches it ran; ``_merge_across`` must
give every replica the metrics one process would have computed over all of them, and ``_merge_ratios`` every
cross ratio any replica observed. The multi-process equality with one process is held by
tests/integration/test_data_parallel.py; here the merge arithmetic itself, with the other replica's part
handed in as ``all_gather_object`` would hand it (rank order), so that a wrong sum or weight fails fast.
"""

from __future__ import annotations

import pytest

from hacrl.learner import update


class TwoRanks:
    """Stands in for ``torch.distributed`` on rank 0 of a group of two: the gather returns this rank's
    object and the other rank's, in rank order."""

    def __init__(self, other):
        self.other = other
        self.sent = []

    def get_world_size(self, group):
        assert group == "dp"
        return 2

    def all_gather_object(self, out, obj, group):
        assert group == "dp" and len(out) == 2
        self.sent.append(obj)
        out[0], out[1] = obj, self.other


def test_merged_metrics_are_the_weighted_means_over_both_replicas(monkeypatch):
    # rank 0: pg_loss over 3 rows mean 2.0 (total 6), self/clip_frac over 2 own answers mean 0.5 (total 1),
    # 2 own answers counted; rank 1: pg_loss over 1 row mean 4.0, cross/ratio over 4 cross answers mean 0.25,
    # 1 own answer counted. grad_norm: both replicas took the same step, so the same total and weight.
    rank0 = ({"pg_loss": 6.0, "self/clip_frac": 1.0, "count/own": 2.0, "grad_norm": 12.0},
             {"pg_loss": 3.0, "self/clip_frac": 2.0, "count/own": 1.0, "grad_norm": 4.0})
    rank1 = ({"pg_loss": 4.0, "cross/ratio": 1.0, "count/own": 1.0, "grad_norm": 12.0},
             {"pg_loss": 1.0, "cross/ratio": 4.0, "count/own": 1.0, "grad_norm": 4.0})
    fake = TwoRanks(rank1)
    monkeypatch.setattr(update, "dist", fake)
    totals, weights = update._merge_across(*rank0, "dp")
    means = {k: totals[k] / weights[k] for k in totals}
    assert means == {
        "pg_loss": 10.0 / 4.0,         # (6 + 4) / (3 + 1): a mean over the 4 rows, not the mean of 2.0 and 4.0
        "self/clip_frac": 0.5,         # only rank 0 saw own answers: its mean, not diluted by rank 1
        "cross/ratio": 0.25,           # only rank 1 saw cross answers
        "count/own": 3.0,              # counts add up (weight 1, not 2)
        "grad_norm": 3.0,              # both ranks the same total over the same weight: the same ratio
    }
    assert weights["count/own"] == 1.0
    assert fake.sent == [rank0]  # this rank sent its own totals and weights, as plain dicts


def test_merged_ratios_hold_every_replicas_observations_under_their_source(monkeypatch):
    fake = TwoRanks({1: [0.5, 0.75], 2: [1.5]})
    monkeypatch.setattr(update, "dist", fake)
    mine = {1: [0.9]}
    update._merge_ratios(mine, "dp")
    assert mine == {1: [0.9, 0.5, 0.75], 2: [1.5]}
    assert fake.sent == [{1: [0.9]}]


def test_merging_on_one_replica_changes_nothing(monkeypatch):
    class OneRank(TwoRanks):
        def get_world_size(self, group):
            return 1

        def all_gather_object(self, out, obj, group):
            assert len(out) == 1
            out[0] = obj

    monkeypatch.setattr(update, "dist", OneRank(None))
    totals, weights = update._merge_across({"pg_loss": 6.0, "count/own": 2.0}, {"pg_loss": 3.0, "count/own": 1.0}, "dp")
    assert (dict(totals), dict(weights)) == ({"pg_loss": 6.0, "count/own": 2.0}, {"pg_loss": 3.0, "count/own": 1.0})
    ratios = {3: [1.0, 2.0]}
    update._merge_ratios(ratios, "dp")
    assert ratios == {3: [1.0, 2.0]}


@pytest.mark.parametrize("key", ["count/cross", "count/imitated"])
def test_every_count_keeps_weight_one(monkeypatch, key):
    monkeypatch.setattr(update, "dist", TwoRanks(({key: 5.0}, {key: 1.0})))
    totals, weights = update._merge_across({key: 2.0}, {key: 1.0}, "dp")
    assert totals[key] / weights[key] == 7.0
