"""Running statistics of one generation, and the JSON shape the CLI and bench print.

Definitions (the same for every strategy, so numbers compare):
  prefill: decoding the prompt tokens not already in the cache; it yields the first token;
  ttft_s: from the request to the first emitted token;
  decode_tps: tokens after the first / time from the first token to the last;
  acceptance_rate: accepted drafted tokens / drafted tokens, of every draft source (MTP and
    lookup): THE acceptance, the one number every surface (footer, stats strip, Compare, bench,
    /metrics) shows;
  mean_accepted_length: tokens emitted per verify step (accepted drafts + the target's own);
  per_position_acceptance[i]: the same ratio for the drafts at position i of their draft
    (drafted_at / accepted_at count them); weighted by drafted_at, the positions' ratios
    average to acceptance_rate;
  mean_draft_length: drafted tokens per MTP step (with auto, 0-length steps included);
  python_share: part of decode time spent outside llama.cpp's decode calls.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field


def summed(counts: list[list[int]]) -> list[int]:
    """Several runs' per-position counts (drafted_at, accepted_at) added position by position:
    runs draft to different lengths."""
    n = max((len(c) for c in counts), default=0)
    return [sum(c[i] for c in counts if i < len(c)) for i in range(n)]


@dataclass
class GenerationStats:
    mode: str = "baseline"
    draft_max: int | str = 0  # "auto": chosen every step
    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    media_s: float = 0.0  # of the prefill: encoding pictures and sounds (0 when they were cached)
    ttft_s: float = 0.0
    decode_s: float = 0.0
    generated_tokens: int = 0
    steps: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    llama_s: float = 0.0  # inside llama_decode during decode (target + drafter)
    draft_llama_s: float = 0.0
    lookup_draft_tokens: int = 0  # of draft_tokens: proposed by lookup (the text so far), not the drafter
    lookup_accepted_tokens: int = 0  # of accepted_tokens: lookup's
    undrafted_steps: int = 0  # MTP steps that drafted nothing (auto pausing; or the reply's last token)
    k_now: int = 0  # the draft length of the latest step
    paused: bool = False  # auto has not drafted for several steps
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    engine: str = "llama.cpp"  # what decoded: llama.cpp in this process, or a server (llama-server, vllm, ...)
    drafts_reported: bool = True  # False: a server that does not say what its drafter did
    draft_head: str = ""  # the drafter's head, as DraftHead.label says it ("" without a drafter)

    def snapshot(self) -> "GenerationStats":
        """A copy of the numbers as they are now: what an event carries, so that one kept while
        the generation goes on keeps the numbers it was made with."""
        snap = copy.copy(self)  # every event makes one: a shallow copy (half of dataclasses.replace's cost)
        snap.drafted_at, snap.accepted_at = list(self.drafted_at), list(self.accepted_at)
        return snap

    def count_positions(self, k: int, n_acc: int) -> None:
        while len(self.drafted_at) < k:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(k):
            self.drafted_at[i] += 1
            if i < n_acc:
                self.accepted_at[i] += 1

    @property
    def drafting(self) -> bool:
        """Drafts were made, or could have been (mtp, lookup, or both: hybrid)."""
        return self.mode != "baseline"

    @property
    def mtp_draft_tokens(self) -> int:
        return self.draft_tokens - self.lookup_draft_tokens

    @property
    def mtp_accepted_tokens(self) -> int:
        return self.accepted_tokens - self.lookup_accepted_tokens

    @property
    def prefill_tps(self) -> float | None:
        s = self.prefill_s - self.media_s  # tokens decoded per second; encoding media is apart
        return self.prefill_tokens / s if s > 0 and self.prefill_tokens else None

    @property
    def decode_tps(self) -> float | None:
        return (self.generated_tokens - 1) / self.decode_s if self.decode_s > 0 and self.generated_tokens > 1 else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens and self.drafts_reported else None

    @property
    def mean_accepted_length(self) -> float | None:
        if not self.drafting or not self.steps:
            return None
        return (self.accepted_tokens + self.steps) / self.steps

    @property
    def mean_draft_length(self) -> float | None:
        return self.draft_tokens / self.steps if self.drafting and self.steps else None

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def python_share(self) -> float | None:
        if self.engine != "llama.cpp":
            return None  # a server's decode calls are not timed here
        return max(0.0, 1.0 - self.llama_s / self.decode_s) if self.decode_s > 0 else None

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "draft_max": self.draft_max,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "generated_tokens": self.generated_tokens,
            "prefill_tps": self.prefill_tps,
            "media_s": self.media_s,
            "ttft_s": self.ttft_s,
            "decode_tps": self.decode_tps,
            "decode_s": self.decode_s,
            "steps": self.steps,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "lookup_draft_tokens": self.lookup_draft_tokens,
            "lookup_accepted_tokens": self.lookup_accepted_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "per_position_acceptance": self.per_position_acceptance,
            "drafted_at": list(self.drafted_at),
            "accepted_at": list(self.accepted_at),
            "mean_draft_length": self.mean_draft_length,
            "undrafted_steps": self.undrafted_steps,
            "k_now": self.k_now,
            "paused": self.paused,
            "python_share": self.python_share,
            "finish_reason": self.finish_reason,
            "engine": self.engine,
            "drafts_reported": self.drafts_reported,
            "draft_head": self.draft_head,
        }

    def source_label(self) -> str:
        return {"lookup": "Lookup", "hybrid": "MTP + lookup"}.get(self.mode, "MTP")  # as the window names them

    def k_label(self) -> str:
        """'MTP k=3', or for auto the mean length used and the steps taken without drafting;
        with lookup, how many of the accepted drafts were lookup's."""
        name = self.source_label()
        if self.draft_max == "server":
            return f"{name} (server's draft length)"
        if self.draft_max != "auto":
            s = f"{name} k={self.draft_max}"
        elif not self.steps:
            s = f"{name} k auto"
        else:
            s = f"{name} k auto (mean {self.mean_draft_length:.1f}"
            n = self.undrafted_steps
            s += (f", {n} step{'s' * (n != 1)} undrafted)" if n else ")")
        if self.mode == "hybrid" and self.lookup_accepted_tokens:
            s += f", {self.lookup_accepted_tokens * 100 // self.accepted_tokens} % lookup"
        return s

    def footer(self) -> str:
        """One line for the end of a message, e.g.
        '412 tokens in 6.8 s · 62.4 tok/s · TTFT 0.21 s · 78 % accepted · 2.9 tok/step · MTP k=3'."""
        n = self.generated_tokens
        parts = [f"{n} token{'' if n == 1 else 's'} in {self.ttft_s + self.decode_s:.1f} s"]
        if self.decode_tps is not None:
            parts.append(f"{self.decode_tps:.1f} tok/s")
        parts.append(f"TTFT {self.ttft_s:.2f} s")
        if not self.drafts_reported:
            parts.append(f"drafts not reported by {self.engine}")
        elif self.drafting:
            if self.acceptance_rate is not None:
                parts.append(f"{self.acceptance_rate * 100:.0f} % accepted")
            if self.mean_accepted_length is not None:
                parts.append(f"{self.mean_accepted_length:.1f} tok/step")
            parts.append(self.k_label())
        else:
            parts.append("baseline")
        if self.engine != "llama.cpp":
            parts.append(f"on {self.engine}")
        return " · ".join(parts)
