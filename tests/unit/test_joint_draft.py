"""The joint MTP draft length of several sequences drafting with auto in one batch
(draft_control.joint_draft_length), on stand-in controllers and costs: a pure function of
their acceptance, the batch's costs and the rows it may hold."""

from __future__ import annotations

from engine.strategies.draft_control import AUTO_K_MAX, joint_draft_length


class Controller:
    """A stand-in controller: every draft accepted with the same chance `a`."""

    def __init__(self, a: float):
        self.a = a

    def acceptance(self) -> list[float]:
        return [self.a] * AUTO_K_MAX

    def expected_tokens(self, k: int, acceptance: list[float]) -> float:
        return sum(acceptance[0] ** i for i in range(k + 1))


class Costs:
    """Stand-in costs: a batch of n rows costs `per_batch + per_row * n` seconds; sizes above
    `measured_up_to` rows were never measured."""

    def __init__(self, per_batch: float, per_row: float, draft: float = 0.001, measured_up_to: int = 10_000,
                 ready: bool = True):
        self.per_batch, self.per_row, self.draft = per_batch, per_row, draft
        self.measured_up_to, self.is_ready = measured_up_to, ready

    def ready(self) -> bool:
        return self.is_ready

    def batch_cost(self, rows: int) -> float:
        return self.per_batch + self.per_row * rows

    def measured(self, rows: int) -> bool:
        return rows <= self.measured_up_to


GPU = dict(per_batch=0.010, per_row=0.00001)  # rows nearly free
CPU = dict(per_batch=0.0, per_row=0.030)  # every row costs a decode


def test_one_sequence_or_costs_not_measured_leave_each_to_choose_alone():
    assert joint_draft_length([Controller(0.9)], Costs(**GPU), 512) is None
    assert joint_draft_length([], Costs(**GPU), 512) is None
    assert joint_draft_length([Controller(0.9)] * 3, Costs(**GPU, ready=False), 512) is None


def test_rows_nearly_free_and_drafts_accepted_give_the_longest_draft():
    assert joint_draft_length([Controller(1.0)] * 4, Costs(**GPU), 512) == AUTO_K_MAX


def test_rows_that_cost_a_decode_each_give_no_joint_draft():
    """Drafting then never pays: None, so that each controller decides (and probes) alone."""
    assert joint_draft_length([Controller(0.9)] * 4, Costs(**CPU), 512) is None


def test_the_batch_never_holds_more_rows_than_it_may():
    """4 sequences beside 2 other rows in a batch of at most 14 rows: k + 1 rows each, k <= 2."""
    assert joint_draft_length([Controller(1.0)] * 4, Costs(**GPU), 14, others=2, others_tokens=2) == 2
    assert joint_draft_length([Controller(1.0)] * 4, Costs(**GPU), 7) is None  # room for plain rows only


def test_one_size_never_measured_is_tried_at_a_time():
    """The plain batch not measured: a plain step (0) measures it; the sizes measured and the
    next longer draft's batch are considered, no further."""
    assert joint_draft_length([Controller(1.0)] * 4, Costs(**GPU, measured_up_to=3), 512) == 0
    assert joint_draft_length([Controller(1.0)] * 4, Costs(**GPU, measured_up_to=8), 512) == 2


def test_the_length_with_the_most_tokens_per_second_of_the_whole_batch():
    """2 sequences, 80 % acceptance, a batch costing 10 ms + 2 ms a row, a draft step 1 ms:
    tokens / seconds for k = 0..3 are 2/14, 3.6/20, 4.88/26, 5.9/32 ms: k = 2. Beside 4 plain
    rows of other sequences (4 tokens), the same drafts add less than their rows cost:
    6/22 ms undrafted beats 7.6/28 and 8.88/34, so none (each chooses alone)."""
    costs = Costs(per_batch=0.010, per_row=0.002)
    assert joint_draft_length([Controller(0.8)] * 2, costs, 512) == 2
    assert joint_draft_length([Controller(0.8)] * 2, costs, 512, others=4, others_tokens=4) is None
