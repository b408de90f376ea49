"""The adaptive draft-length controller on simulated machines and texts (no llama.cpp here:
these are the controller's own decisions; the end-to-end tests are in test_auto_draft.py).

A simulated step draws acceptance per position from a seeded RNG and charges the time a
machine with the given costs would take; the controller sees only what the MTP strategy
would feed it (the measured times and how many drafts were accepted)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.strategies.draft_control import PROBE_FIRST, PROBE_MAX, CostModel, DraftController, joint_draft_length

MS = 1e-3
CPU = {"decode": 68 * MS, "row": 0.6 * 68 * MS, "draft": 5.3 * MS}  # the 2-core VM, E2B-shaped
GPU = {"decode": 8 * MS, "row": 0.03 * 8 * MS, "draft": 0.5 * MS}  # rows nearly free


def verify_cost(m, rows):
    return m["decode"] + m["row"] * (rows - 1)


def simulate(machine, accept, steps, k=None, costs=None, seed=0, stall=None):
    """Returns (tokens, seconds, chosen ks). `accept(step)` is the acceptance rate at that step;
    k None = the controller, else a fixed draft length. `stall(step)`: (slowdown, CPU share)
    of that step's verify on a busy machine (default (1, 1): a quiet one)."""
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
        slow, share = stall(step) if stall else (1.0, 1.0)
        cpu = 2 * t_verify * share  # two threads busy; a stalled step got a share of that
        t_verify *= slow
        costs.record_batch(kk + 1, t_verify, cpu)
        if kk:
            costs.record_draft(t_draft / kk)
        if ctl:
            ctl.observe(kk, n_acc, t_draft + t_verify)
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


# ---- robust costs: a busy desktop ------------------------------------------------------------
def test_one_stall_is_dropped_and_does_not_move_the_median():
    c = CostModel()
    for _ in range(6):
        c.record_batch(3, 0.060, 0.120)
    c.record_batch(3, 2.024, 0.120)  # 93 decodes' worth: another program took the CPU
    assert c.batch_cost(3) == pytest.approx(0.060) and c.dropped == 1
    c.record_batch(3, 0.070, 0.005)  # not much slower, but the process got a sliver of CPU
    assert c.batch_cost(3) == pytest.approx(0.060) and c.dropped == 2


def test_a_machine_that_really_got_slower_is_measured_anew():
    c = CostModel()
    for _ in range(6):
        c.record_batch(2, 0.050, 0.100)
    for _ in range(3):  # three slow ones in a row, with the CPU fully ours: the size costs more now
        c.record_batch(2, 0.200, 0.400)
    assert c.batch_cost(2) == pytest.approx(0.200)


@pytest.mark.parametrize("busy", [
    lambda step: (30.0, 0.05) if step % 7 == 3 else (1.0, 1.0),  # another program, every few steps
    lambda step: (60.0, 0.03) if step < 15 else (1.0, 1.0),  # several at once while the reply starts
], ids=["periodic", "at-the-start"])
def test_busy_machine_auto_stays_near_the_best_fixed_length(busy):
    """The issue's runs: verifies that stall for 30-60 decodes while other programs run (this
    process getting a sliver of the CPU meanwhile). Auto must stay within 10 % of the best
    fixed k on the same machine (without the stall filter it reached 0.66x and 0.79x)."""

    def run(k=None):
        t, s, _ = simulate(CPU, lambda step: 0.8, 600, k, stall=busy, seed=1)
        return t / s

    best_fixed = max(run(k) for k in range(0, 6))
    assert run() >= 0.9 * best_fixed, (run(), best_fixed)


def test_costs_that_promise_too_much_are_checked_against_what_drafting_achieves():
    """Costs claim verify rows are nearly free (as if on a GPU) and are never corrected; the
    machine is the CPU and drafts are accepted half of the time. The reality check sees what
    drafted steps achieve against plain ones and drafts far less than the costs alone would."""

    def run(check: bool) -> float:
        costs = CostModel(reality_check=check)
        for rows in range(1, 10):
            for _ in range(2):
                costs.record_batch(rows, verify_cost(GPU, rows))
        costs.record_draft(GPU["draft"])
        costs.record_batch = lambda *a: None  # the wrong costs stay
        ctl = DraftController(costs)
        rng = np.random.default_rng(0)
        ks = []
        for _ in range(300):
            k = ctl.choose()
            n_acc = 0
            while n_acc < k and rng.random() < 0.5:
                n_acc += 1
            ctl.observe(k, n_acc, k * CPU["draft"] + verify_cost(CPU, k + 1))
            ks.append(k)
        return float(np.mean(ks[-150:]))

    trusting, checked = run(False), run(True)
    assert trusting > 1.5 and checked < 0.4 * trusting, (trusting, checked)


def test_chooses_only_among_the_lengths_it_is_given():
    """Lookup's controller picks among a few lengths (each must be measured before it is known):
    the best of those, or the whole proposal when that is shorter."""
    costs = CostModel()
    for rows in range(1, 17):
        for _ in range(3):
            costs.record_batch(rows, verify_cost(GPU, rows))
    ctl = DraftController(costs, 15, free_drafts=True, lengths=(1, 3, 7))
    for _ in range(50):
        ctl.observe(7, 7)  # everything accepted: the longest allowed length pays most
    assert ctl.choose() == 7
    assert ctl.choose(limit=5) == 5  # a proposal of 5 tokens is checked whole
    assert DraftController(costs, 15, free_drafts=True).best_k(15) > 7  # without a list: any length


def _costs(batch_ms, draft_ms):
    """A CostModel that has measured these batch sizes (rows -> ms) and draft step."""
    c = CostModel()
    for rows, ms in batch_ms.items():
        for _ in range(4):  # the first sample of a size is dropped (it builds the graph)
            c.record_batch(rows, ms * MS)
    for _ in range(3):
        c.record_draft(draft_ms * MS)
    return c


def _joint_k(costs, n_seqs, acceptance=0.9):
    """The one MTP draft length for n sequences drafting with auto."""
    ctls = []
    for _ in range(n_seqs):
        ctl = DraftController(costs)
        ctl.accepted, ctl.seen = [acceptance * 100] * ctl.k_max, [100.0] * ctl.k_max
        ctls.append(ctl)
    return joint_draft_length(ctls, costs, 512)


def test_sequences_drafting_together_share_one_length_from_the_whole_batchs_cost():
    """Several sequences drafting with auto draft one length, chosen for the whole batch: on
    a GPU (rows nearly free) long drafts; on a CPU whose rows cost linearly, none (each then
    decides alone and probes); on a CPU whose kernels pay per row at 32 rows, the length that
    makes 8 sequences' batch 32 rows, though 9 to 31 rows cost more per row."""
    gpu = _costs({n: 8 + 0.05 * n for n in range(1, 80)}, 0.5)
    assert _joint_k(gpu, 4) >= 5
    linear = _costs({n: 30 * n for n in range(1, 80)}, 4)
    assert _joint_k(linear, 8) is None
    tiles = {n: 30 * n for n in range(1, 80)}
    tiles[32] = 400  # 8 sequences x (k=3 + 1): 12.5 ms a row instead of 30
    assert _joint_k(_costs(tiles, 4), 8) == 3
    assert _joint_k(gpu, 1) is None  # one sequence: its own controller


def test_batches_never_measured_are_tried_one_size_at_a_time():
    """8 sequences on a CPU where one client measured batches of 1-4 rows: their plain batch
    (8 rows) is measured first, by a plain step; then each longer draft's batch in turn, its
    cost taken at the nearest smaller size's (optimistic, so it is tried) — never 8 drafts each
    at once (72 rows: seconds on a CPU), which the cost of 4 rows would call nearly free."""
    small = {n: 150 + 5 * n for n in range(1, 5)}  # as measured here on the E2B-shaped pair
    assert _joint_k(_costs(small, 4), 8) == 0
    assert _joint_k(_costs({**small, 8: 200}, 4), 8) == 1  # 16 rows: the next size, tried
    # 16 rows measured: 24 tried at 16 rows' cost; 32 not yet
    assert _joint_k(_costs({**small, 8: 200, 16: 250}, 4), 8) == 2


# batch costs (ms) measured by `tandem serve --parallel 8` on the 26B-A4B-shaped pair (2 cores):
# one client's drafts measured 3 and 9 rows, four clients' plain and k=1 batches 4 and 8, eight
# clients' 16..64; a 9-row verify reads many more experts than 8 rows do
MOE = {1: 57.5, 3: 97.3, 4: 89.6, 7: 155.4, 8: 120.6, 9: 147.9, 16: 178.4, 24: 226.4, 32: 299.2}


def test_on_a_mixture_of_experts_four_sequences_draft_past_a_dear_odd_size():
    """Four sequences accepting 90 % of drafts: k=1 (8 rows) was measured, 12 rows never; the
    guess on from 8 and 9 rows' costs (27 ms a row) said 12 rows cost 209 ms, more than the 16
    measured, and auto kept drafting one token where three gave 1.3x more (measured: 66 vs
    82 tok/s). At 9 rows' cost, 12 is worth trying; once measured, the longer drafts whose
    batches were measured (16, 24 rows) count too."""
    assert _joint_k(_costs(MOE, 1.9), 4) >= 2
    assert _joint_k(_costs({**MOE, 12: 165.0}, 1.9), 4) >= 3
