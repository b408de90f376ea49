"""What a JSON schema costs in decoding, measured interleaved: every prompt is run free and
constrained back to back (in alternating order), for baseline and, with a drafter, MTP auto, so
that the machine's drift (which `tandem bench --json-schema`, running all free rows before all
constrained ones, cannot cancel) falls on both alike. Prints decode speed free and constrained,
the ratio, and the time spent in the grammar itself (llguidance's mask and checks) per step.

    .venv/bin/python scripts/bench_grammar.py -m TARGET.gguf [-d DRAFTER.gguf] --json-schema S.json
        [--max-tokens 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.local import grammar as G  # noqa: E402
from engine.bench.side_by_side import load_prompts, prompt_tokens  # noqa: E402
from engine.local.engine import Engine  # noqa: E402
from engine.generation import AUTO, SPEC_NONE, GenerationConfig  # noqa: E402

GRAMMAR_CALLS = ("allowed", "allows", "best", "valid_prefix", "forced", "clone", "accept")


def timed_grammar() -> dict:
    """Wrap the Grammar methods a step calls; the seconds spent in them, by name."""
    spent = dict.fromkeys(GRAMMAR_CALLS, 0.0)
    for name in GRAMMAR_CALLS:
        f = getattr(G.Grammar, name)

        def w(*a, _f=f, _n=name, **k):
            t = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                spent[_n] += time.perf_counter() - t
        setattr(G.Grammar, name, w)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--drafter")
    ap.add_argument("--json-schema", required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    spent = timed_grammar()
    e = Engine.load(args.model, args.drafter)
    grammar = G.from_json_schema(Path(args.json_schema).read_text())
    toks = [prompt_tokens(e, p) for p in load_prompts()]
    modes = [("baseline", SPEC_NONE)] + ([("MTP auto", AUTO)] if e.has_mtp else [])  # (label, spec)
    for _, spec in modes:  # warm-up (allocations; the grammar's tokenizer is built once per model)
        for g in (None, grammar):
            e.reset()
            e.run(toks[0], GenerationConfig(max_tokens=8, spec=spec, draft_max=AUTO, grammar=g))
    print(f"{Path(args.model).name}{' + ' + Path(args.drafter).name if args.drafter else ''}: "
          f"{len(toks)} prompts x {args.rounds} rounds, max {args.max_tokens} tokens, greedy, free and "
          f"constrained to {args.json_schema} back to back\n")
    print(f"{'mode':<10}{'free tok/s':>12}{'schema tok/s':>14}{'ratio':>8}{'grammar ms/step':>17}")
    for label, spec in modes:
        sums = {False: [0, 0.0, 0], True: [0, 0.0, 0]}  # tokens, decode seconds, steps
        for k in spent:
            spent[k] = 0.0
        for rnd in range(args.rounds):
            for i, t in enumerate(toks):
                for constrained in ((False, True) if (i + rnd) % 2 == 0 else (True, False)):
                    e.reset()
                    r = e.run(t, GenerationConfig(max_tokens=args.max_tokens, spec=spec, draft_max=AUTO,
                                                  grammar=grammar if constrained else None))
                    s = sums[constrained]
                    s[0] += len(r.tokens)
                    s[1] += r.stats.decode_s
                    s[2] += r.stats.steps
        free, con = (sums[c][0] / sums[c][1] for c in (False, True))
        # accept runs outside the step loop too; the rest is what a constrained step adds
        per_step = sum(spent.values()) * 1000 / max(sums[True][2], 1)
        print(f"{label:<10}{free:>12.1f}{con:>14.1f}{con / free:>7.2f}x{per_step:>17.2f}")
    e.close()


if __name__ == "__main__":
    main()
