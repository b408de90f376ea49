"""Side-by-side benchmark: baseline and MTP (for each draft length) on the same prompts,
in one run, with the same loaded models. Greedy, so outputs must match token for token;
a difference is classified as a near-tie when the baseline's top-2 logit gap at the first
differing token is below NEAR_TIE_GAP, or below twice what llama.cpp's batched decode moves
those logits from a one-row decode, measured there (its CPU kernels are not batch-invariant:
see Engine.batch_noise_at). Anything else is a mismatch: a bug.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..local.engine import Engine
from ..generation import AUTO, SERVER_DRAFT, SPEC_NONE, GenerationConfig, GenerationResult, choose_spec
from ..stats import GenerationStats, summed
from ..strategies.draft_control import AUTO_K_MAX, explain

# Batched vs one-row target logits differ by up to ~1.3e-2 here (FA on, F16 KV cache);
# tests/test_equivalence.py measures that noise on the synthetic models and checks that
# this gap stays well above it.
NEAR_TIE_GAP = 0.05


def load_prompts(path: str | Path | None = None) -> list[dict]:
    """JSONL, one {"prompt": str, "raw": bool?} or {"messages": [...]} per line."""
    if path is None:
        text = resources.files("resources").joinpath("prompts/bench.jsonl").read_text("utf-8")
        src = "built-in prompts"
    else:
        text = Path(path).read_text("utf-8")
        src = str(path)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{src}:{n}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not (isinstance(obj.get("prompt"), str) or _is_chat(obj.get("messages"))):
            raise ValueError(f'{src}:{n}: expected {{"prompt": "..."}} or {{"messages": [{{"role": '
                             f'"user", "content": "..."}}, ...]}}')
        out.append(obj)
    if not out:
        raise ValueError(f"{src}: no prompts")
    return out


def _is_chat(messages) -> bool:
    return (isinstance(messages, list) and bool(messages) and all(
        isinstance(m, dict) and m.get("role") in ("system", "user", "assistant") and isinstance(m.get("content"), str)
        for m in messages))


def prompt_tokens(engine: Engine, item: dict) -> list[int]:
    if "messages" in item:
        return engine.format_chat(item["messages"])
    if item.get("raw"):
        return engine.tokenize(item["prompt"], add_special=True, parse_special=False)
    return engine.format_chat([{"role": "user", "content": item["prompt"]}])


@dataclass
class Aggregate:
    """Sums over prompts; rates are computed from the sums (token-weighted)."""

    mode: str
    draft_max: int | str = 0
    runs: list[GenerationStats] = field(default_factory=list)
    identical: int = 0
    near_ties: int = 0
    mismatches: int = 0

    def _sum(self, name):
        return sum(getattr(r, name) for r in self.runs)

    def acceptance_where_drafted(self) -> list[float]:
        """Acceptance by draft position, for the positions that were drafted at all."""
        drafted, accepted = summed([r.drafted_at for r in self.runs]), summed([r.accepted_at for r in self.runs])
        return [a / n for n, a in zip(drafted, accepted) if n]

    def stats(self) -> dict:
        s = GenerationStats(mode=self.mode, draft_max=self.draft_max,
                            engine=self.runs[0].engine if self.runs else "llama.cpp")
        for name in ("prompt_tokens", "prefill_tokens", "prefill_s", "ttft_s", "decode_s",
                     "generated_tokens", "steps", "draft_tokens", "accepted_tokens", "llama_s",
                     "draft_llama_s", "undrafted_steps", "lookup_draft_tokens", "lookup_accepted_tokens"):
            setattr(s, name, self._sum(name))
        s.drafted_at = summed([r.drafted_at for r in self.runs])
        s.accepted_at = summed([r.accepted_at for r in self.runs])
        d = s.to_dict()
        d["ttft_s"] = s.ttft_s / max(1, len(self.runs))  # mean, not sum
        # each run's decode rate leaves out its first token (it comes with the prefill)
        decoded = sum(max(0, r.generated_tokens - 1) for r in self.runs)
        d["decode_tps"] = decoded / s.decode_s if s.decode_s > 0 else None
        d["prompts"] = len(self.runs)
        # per-token costs inside llama.cpp, for the ideal speed-up (not timed on a server)
        local = s.engine == "llama.cpp"
        if local and self.mode != "baseline" and s.steps:
            d["draft_step_ms"] = 1e3 * s.draft_llama_s / max(1, s.draft_tokens)
            d["verify_ms"] = 1e3 * (s.llama_s - s.draft_llama_s) / s.steps
        elif local and s.steps:
            d["decode_step_ms"] = 1e3 * s.llama_s / s.steps
        return d


def bench_rows(engine: Engine, draft_maxes: list, specs: list | None = None) -> list[tuple[str, int | str]]:
    """(draft source, draft length) per row after baseline. By default: MTP at each length if a
    drafter is loaded, lookup, and auto (both sources, chosen per step) when there are two."""
    if specs is None:
        rows = [("mtp", k) for k in draft_maxes] if engine.has_mtp else []
        return rows + [("lookup", AUTO)] + ([(AUTO, AUTO)] if engine.has_mtp else [])
    return [(s, k) for s in specs if s != "none" for k in draft_maxes]


def run_bench(engine: Engine, prompts: list[dict], draft_maxes: list, max_tokens: int = 128,
              progress=None, grammar: str | None = None, specs: list | None = None) -> dict:
    """Baseline, then each draft source at each draft length (bench_rows), on the same prompts
    (greedy); `grammar` constrains every run (what a JSON schema costs)."""
    rows = bench_rows(engine, draft_maxes, specs)
    if not engine.has_mtp and any(spec == "mtp" for spec, _ in rows):
        raise ValueError("bench needs a drafter (--drafter) to compare MTP against")
    toks = [prompt_tokens(engine, p) for p in prompts]
    # Warm-up (first decodes pay for allocations and page faults), not counted.
    for spec in ["none"] + sorted({spec for spec, _ in rows}):
        engine.reset()
        engine.run(toks[0], GenerationConfig(max_tokens=8, spec=spec, draft_max=AUTO, grammar=grammar))

    base = Aggregate("baseline")
    base_out: list[GenerationResult] = []
    for i, t in enumerate(toks):
        engine.reset()
        r = engine.run(t, GenerationConfig(max_tokens=max_tokens, spec=SPEC_NONE, grammar=grammar))
        base.runs.append(r.stats)
        base_out.append(r)
        if progress:
            progress(f"baseline {i + 1}/{len(toks)}")

    result = {"baseline": base.stats(), "mtp": []}  # "mtp": every drafting row (its "spec" says which)
    for spec, k in rows:
        agg = Aggregate(engine.strategy_for(spec), k)
        for i, t in enumerate(toks):
            engine.reset()
            r = engine.run(t, GenerationConfig(max_tokens=max_tokens, spec=spec, draft_max=k, grammar=grammar))
            agg.runs.append(r.stats)
            _compare(engine, agg, t, r.tokens, base_out[i].tokens)
            if progress:
                progress(f"{agg.mode} k={k} {i + 1}/{len(toks)}")
        d = agg.stats()
        b = result["baseline"]
        d["speedup"] = (d["decode_tps"] / b["decode_tps"]) if d["decode_tps"] and b["decode_tps"] else None
        d["identical"] = agg.identical
        d["near_ties"] = agg.near_ties
        d["mismatches"] = agg.mismatches
        # Ideal speed-up: tokens per step x one decode's cost / (k drafts + one verify),
        # all measured inside llama.cpp, i.e. with zero orchestration overhead.
        if b.get("decode_step_ms") and d.get("verify_ms") and d.get("mean_accepted_length"):
            cost = d["draft_step_ms"] * d["draft_tokens"] / max(1, d["steps"]) + d["verify_ms"]
            d["ideal_speedup"] = d["mean_accepted_length"] * b["decode_step_ms"] / cost
        d["spec"] = spec
        if k == AUTO and spec == "mtp":
            d["why"] = explain(engine.costs, agg.acceptance_where_drafted(), AUTO_K_MAX, d["mean_draft_length"])
        result["mtp"].append(d)
    engine.reset()
    return result


def _compare(engine: Engine, agg: Aggregate, prompt: list[int], got: list[int], ref: list[int]) -> None:
    """Count a drafting run against baseline's: identical, a near-tie, or a mismatch."""
    if got == ref:
        agg.identical += 1
        return
    j = next((n for n, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
    margin = engine.next_token_margin(prompt, ref[:j]) if j < len(ref) else 0.0
    # a near-tie: closer than the fixed gap, or than llama.cpp's batched kernels
    # move these logits here (measured at this position: not a decoding error)
    if margin < NEAR_TIE_GAP or margin < 2 * engine.batch_noise_at(prompt, ref[:j]):
        agg.near_ties += 1
    else:
        agg.mismatches += 1


def grammar_cost(free: dict, constrained: dict) -> str:
    """What a grammar costs, side by side: tok/s without and with it, baseline and each MTP
    length, and how much of MTP's speed-up it keeps."""
    rows = [("baseline", "-", free["baseline"], constrained["baseline"])]
    rows += [(m["mode"], m["draft_max"], m, c) for m, c in zip(free["mtp"], constrained["mtp"])]
    head = f"{'mode':<9}{'k':>5}{'free tok/s':>12}{'schema tok/s':>14}{'ratio':>8}{'speed-up kept':>15}"
    lines = ["with the JSON schema vs without:", head, "-" * len(head)]
    for mode, k, a, b in rows:
        ratio = b["decode_tps"] / a["decode_tps"] if a["decode_tps"] and b["decode_tps"] else None
        kept = (b["speedup"] - 1) / (a["speedup"] - 1) if mode != "baseline" and a.get("speedup") and b.get("speedup") \
            and a["speedup"] > 1.0 else None
        lines.append(f"{mode:<9}{k!s:>5}{_f(a['decode_tps'], '.1f'):>12}{_f(b['decode_tps'], '.1f'):>14}"
                     f"{_f(ratio, '.2f') + 'x':>8}{(_f(kept * 100, '.0f') + '%') if kept is not None else '-':>15}")
    lines.append("ratio: constrained / free decode speed; speed-up kept: MTP's gain over baseline with the schema "
                 "as a share of its gain without (shown where MTP gains without one).")
    return "\n".join(lines)


def _f(x, fmt):
    return "-" if x is None else format(x, fmt)


LEGEND = ("tok/s: decode tokens per second (prefill excluded); ideal: speed-up predicted from the "
          "measured decode, verify and draft-step costs with no Python overhead; step: llama.cpp's time "
          "per target step (a decode for baseline, a verify of the drafts otherwise); "
          "py: share of decode time outside llama.cpp; tok/step: tokens per target step.")


def format_table(res: dict, legend: bool = True) -> str:
    """One group's rows; `legend`: with the note on what the columns mean (once per output)."""
    b = res["baseline"]
    head = (f"{'mode':<9}{'k':>5}{'tok/s':>9}{'speed-up':>10}{'ideal':>8}{'accept':>8}"
            f"{'tok/step':>9}{'step':>9}{'draft':>8}{'py':>6}{'identical':>11}{'near-tie':>9}{'mismatch':>9}")
    lines = [head, "-" * len(head)]
    lines.append(f"{'baseline':<9}{'-':>5}{_f(b['decode_tps'], '.1f'):>9}{'1.00x':>10}{'':>8}{'-':>8}"
                 f"{'1.00':>9}{_f(b.get('decode_step_ms'), '.2f') + 'ms':>9}{'-':>8}"
                 f"{_f(b['python_share'] and b['python_share'] * 100, '.0f') + '%':>6}{'-':>11}{'-':>9}{'-':>9}")
    for m in res["mtp"]:
        n = m["prompts"]
        lines.append(
            f"{m['mode']:<9}{m['draft_max']:>5}{_f(m['decode_tps'], '.1f'):>9}"
            f"{_f(m['speedup'], '.2f') + 'x':>10}{_f(m.get('ideal_speedup'), '.2f') + 'x':>8}"
            f"{_f(m['acceptance_rate'] and m['acceptance_rate'] * 100, '.0f') + '%':>8}"
            f"{_f(m['mean_accepted_length'], '.2f'):>9}{_f(m.get('verify_ms'), '.2f') + 'ms':>9}"
            f"{_f(m.get('draft_step_ms'), '.2f') + 'ms':>8}"
            f"{_f(m['python_share'] and m['python_share'] * 100, '.0f') + '%':>6}"
            f"{str(m['identical']) + '/' + str(n):>11}{m['near_ties']:>9}{m['mismatches']:>9}")
    for m in res["mtp"]:
        if m.get("why"):
            lines.append(f"\nauto: {m['why']}")
    if legend:
        lines += ["", LEGEND]
    return "\n".join(lines)


def run_remote_bench(mtp, base, prompts: list[dict], max_tokens: int = 128, progress=None,
                     draft_max=AUTO) -> dict:
    """The same comparison against servers: `base` serves the model without a drafter, `mtp`
    with one. Greedy; outputs are compared as text (servers do not return token ids).
    `draft_max` reaches servers that take it per request (tandem serve)."""
    chats = [p["messages"] if "messages" in p else [{"role": "user", "content": p["prompt"]}] for p in prompts]

    def run(backend, msgs, n, drafting=True):
        # the drafting choice reaches servers that switch it per request (tandem serve); others ignore it
        text, ev = [], None
        spec = choose_spec(drafting=drafting)
        for ev in backend.chat(msgs, GenerationConfig(max_tokens=n, seed=0, spec=spec, draft_max=draft_max)):
            text.append(ev.answer)
        return "".join(text), ev.stats

    for b, on in ((base, False), (mtp, True)):  # warm-up: the first request pays for allocations
        run(b, chats[0], 8, on)
    base_agg, base_text = Aggregate("baseline"), []
    mtp_agg = Aggregate("mtp", draft_max if mtp.can_switch_mtp else SERVER_DRAFT)
    for i, msgs in enumerate(chats):
        text, s = run(base, msgs, max_tokens, drafting=False)
        base_agg.runs.append(s)
        base_text.append(text)
        if progress:
            progress(f"baseline {i + 1}/{len(chats)}")
    for i, msgs in enumerate(chats):
        text, s = run(mtp, msgs, max_tokens)
        mtp_agg.runs.append(s)
        if text == base_text[i]:
            mtp_agg.identical += 1
        else:
            mtp_agg.mismatches += 1  # no logits from a server: a near-tie cannot be told apart here
        if progress:
            progress(f"mtp {i + 1}/{len(chats)}")
    b, d = base_agg.stats(), mtp_agg.stats()
    d["speedup"] = (d["decode_tps"] / b["decode_tps"]) if d["decode_tps"] and b["decode_tps"] else None
    d.update(identical=mtp_agg.identical, near_ties=0, mismatches=mtp_agg.mismatches)
    if not all(r.drafts_reported for r in mtp_agg.runs):
        for k in ("acceptance_rate", "mean_accepted_length", "draft_tokens", "accepted_tokens"):
            d[k] = None  # the server did not say: unknown, not zero
    return {"baseline": b, "mtp": [d], "engine": mtp.engine_name, "baseline_engine": base.engine_name}
