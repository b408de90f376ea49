"""The window on every size's shaped pair (tests/support/shaped.py): it loads with the context
and GPU layers chosen from the memory plan and says so, and Compare gives identical output from
baseline and MTP. Slow lane."""

from __future__ import annotations

import pytest

from ..support.shaped import SIZES, WAIT_AND_RUN, one_loaded, shaped_pair
from ..support.window import BIG_TIMEOUT, compare, make_window

pytestmark = [pytest.mark.slow, pytest.mark.timeout(WAIT_AND_RUN)]


@pytest.mark.parametrize("size", SIZES)
def test_each_size_loads_in_the_window_and_compares_identically(qtbot, tmp_path, size):
    target, drafter = shaped_pair(size)
    with one_loaded():
        _load_and_compare(qtbot, tmp_path, target, drafter)


def _load_and_compare(qtbot, tmp_path, target, drafter):
    w = make_window(qtbot, tmp_path, target, drafter, timeout=BIG_TIMEOUT, max_tokens=16, threads=2)
    try:
        info = w.session.model_info
        # 32768 where the memory holds it, less when it does not (the suite's other workers hold
        # big pairs too), and the window says which
        assert info.has_mtp and 4096 <= info.n_ctx <= 32768 and info.placement.startswith("Chose ")
        assert f"a context of {info.n_ctx:,} tokens" in info.placement
        page = compare(qtbot, w, "Write a Python function that reverses a list.", timeout=BIG_TIMEOUT)
        assert page.base.result.answer == page.mtp.result.answer != ""
        assert "identical output" in page.verdict.text()
        assert page.mtp.result.stats["draft_tokens"] > 0
    finally:
        w.close()
