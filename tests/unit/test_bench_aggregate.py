"""The bench's totals: rates from sums over runs, not means of per-run rates."""

from __future__ import annotations


def test_bench_aggregates_rates_from_sums():
    from engine.bench.side_by_side import Aggregate
    from engine.stats import GenerationStats

    a = Aggregate("mtp", 3)
    a.runs = [GenerationStats(mode="mtp", generated_tokens=11, decode_s=1.0, steps=4, draft_tokens=12,
                              accepted_tokens=6, llama_s=0.9, draft_llama_s=0.3, drafted_at=[4, 4, 4],
                              accepted_at=[3, 2, 1], ttft_s=0.2),
              GenerationStats(mode="mtp", generated_tokens=21, decode_s=3.0, steps=5, draft_tokens=15,
                              accepted_tokens=15, llama_s=2.9, draft_llama_s=0.9, drafted_at=[5, 5, 5],
                              accepted_at=[5, 5, 5], ttft_s=0.4)]
    d = a.stats()
    assert d["decode_tps"] == (10 + 20) / 4.0  # first tokens come with the prefill
    assert d["acceptance_rate"] == 21 / 27 and d["mean_accepted_length"] == (21 + 9) / 9
    assert d["per_position_acceptance"] == [8 / 9, 7 / 9, 6 / 9]
    assert abs(d["ttft_s"] - 0.3) < 1e-12 and abs(d["verify_ms"] - 1e3 * 2.6 / 9) < 1e-9
    assert abs(d["draft_step_ms"] - 1e3 * 1.2 / 27) < 1e-9
