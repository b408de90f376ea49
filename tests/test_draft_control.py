"""The adaptive draft-length controller on simulated machines and texts (no llama.cpp here:
these are the controller's own decisions; the end-to-end tests are in test_auto_draft.py).

A simulated step draws acceptance per position from a seeded RNG and charges the time a
machine with the given costs would take; the controller sees only what the MTP strategy
would feed it (the measured times and how many drafts were accepted)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.strategies.draft_control import PROBE_FIRST, PROBE_MAX, CostModel, DraftController

MS = 1e-3
CPU = {"decode": 68 * MS, "row": 0.6 * 68 * MS, "draft": 5.3 * MS}  # the 2-core VM, E2B-shaped
GPU = {"decode": 8 * MS, "row": 0.03 * 8 * MS, "draft": 0.5 * MS}  # rows nearly free


def verify_cost(m, rows):
    return m["decode"] + m["row"] * (rows - 1)


def simulate(machine, accept, steps, k=None, costs=None, seed=0):
    """Returns (tokens, seconds, chosen ks). `accept(step)` is the acceptance rate at that step;
    k None = the controller, else a fixed draft length."""
    rng = np.random.default_rng(seed)
    costs = costs or CostModel()
    ctl = DraftController(costs) if k is None else None
    tokens = seconds = 0.0
    ks = []
    for step in range(steps):
        kk = ctl.choose() if ctl else k
        n_acc = 0
        while n_acc < kk and rng.random() < accept(step):
            n_acc += 1
        jitter = 1 + 0.05 * rng.standard_normal()
        t_draft, t_verify = kk * machine["draft"] * jitter, verify_cost(machine, kk + 1) * jitter
        costs.record_batch(kk + 1, t_verify)
        if kk:
            costs.record_draft(t_draft / kk)
        if ctl:
            ctl.observe(kk, n_acc)
        tokens += n_acc + 1
        seconds += t_draft + t_verify
        ks.append(kk)
    return tokens, seconds, ks


def rate(machine, accept, steps=600, k=None, seed=0):
    t, s, ks = simulate(machine, accept, steps, k, seed=seed)
    return t / s, ks


@pytest.mark.parametrize("machine,a", [(CPU, 0.35), (CPU, 0.0), (CPU, 0.6), (GPU, 0.1)])
def test_never_slower_than_plain_decoding(machine, a):
    auto, ks = rate(machine, lambda s: a)
    base, _ = rate(machine, lambda s: a, k=0)
    assert auto >= 0.95 * base, (auto / base, np.mean(ks))


@pytest.mark.parametrize("machine,a", [(CPU, 1.0), (CPU, 0.9), (GPU, 0.8), (GPU, 0.95), (GPU, 0.6)])
def test_close_to_the_best_fixed_length(machine, a):
    auto, ks = rate(machine, lambda s: a)
    best = max(rate(machine, lambda s: a, k=k)[0] for k in range(0, 9))
    assert auto >= 0.95 * best, (auto / best, np.mean(ks))


def test_finds_a_longer_draft_on_a_gpu_than_on_a_cpu():
    _, cpu_ks = rate(CPU, lambda s: 0.85)
    _, gpu_ks = rate(GPU, lambda s: 0.85)
    assert np.mean(gpu_ks[100:]) > np.mean(cpu_ks[100:]) + 1


def test_follows_the_text_when_acceptance_changes():
    """Prose (10 %) then a code block (95 %) then prose again."""
    a = lambda s: 0.95 if 300 <= s < 600 else 0.1  # noqa: E731
    ks = simulate(CPU, a, 900)[2]
    assert np.mean(ks[200:300]) < 0.3  # paused while nothing is accepted
    assert np.mean(ks[450:600]) > 2  # found the predictable part through a probe
    assert np.mean(ks[700:900]) < 0.3  # and paused again after it


def test_probes_back_off_while_drafts_keep_failing():
    ks = simulate(CPU, lambda s: 0.0, 1000)[2]
    probes = [i for i, k in enumerate(ks) if k > 0]
    assert 4 <= len(probes) <= 15
    gaps = np.diff(probes)
    assert gaps[0] <= PROBE_FIRST + 2 and max(gaps) <= PROBE_MAX + 2 and gaps[-1] > gaps[0]


def test_cost_model_by_hand():
    c = CostModel()
    c.record_batch(1, 99.0)  # the first batch of a size builds its graph: ignored
    assert c.batch_cost(1) is None and not c.ready()
    for s in (1.0, 1.1, 0.9, 50.0, 1.0):  # one spike among five: the median holds
        c.record_batch(1, s)
    assert c.batch_cost(1) == 1.0
    # a size never measured above the others: guessed at the largest measured one's cost
    # (optimistic, so that it gets tried and measured)
    assert c.batch_cost(3) == 1.0 and not c.measured(3)
    c.record_batch(4, 0.0)
    for s in (1.6, 1.6, 1.6):
        c.record_batch(4, s)
    # a size not measured: the nearest smaller measured size's cost
    assert c.batch_cost(2) == 1.0 and c.batch_cost(9) == pytest.approx(1.6)
    c.record_draft(0.1)
    assert c.ready()
    # every draft accepted: k + 1 tokens in 0.1 k + cost(k+1)
    assert c.ceiling(8) == pytest.approx(max((k + 1) / (0.1 * k + c.batch_cost(k + 1)) for k in range(1, 9)))
    assert c.ceiling(8) == pytest.approx(9 / (0.8 + 1.6))


def test_expected_rate_by_hand():
    c = CostModel()
    for n, s in ((1, 1.0), (2, 1.5), (3, 2.0), (4, 2.5)):
        c.record_batch(n, s)
        c.record_batch(n, s)
    c.record_draft(0.25)
    ctl = DraftController(c, k_max=3)
    rates = ctl.expected_rates(3, [0.5, 0.5, 0.5])
    assert rates[0] == pytest.approx(1.0)
    assert rates[1] == pytest.approx(1.5 / 1.75)
    assert rates[3] == pytest.approx((1 + 0.5 + 0.25 + 0.125) / (0.75 + 2.5))
    assert ctl.best_k(3) == 0  # at 50 % nothing pays here
    ctl.accepted, ctl.seen = [100.0] * 3, [100.0] * 3  # 100 % accepted
    assert ctl.best_k(3) == 3
    assert ctl.choose(limit=1) == 1  # capped by the budget
