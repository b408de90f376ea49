"""What a JSON schema costs in decoding, measured interleaved: every prompt is run free and
constrained back to back (in alternating order), for baseline and, with a drafter, MTP auto, so
that the machine's drift (which `tandem bench --json-schema`, running all free rows before all
constrained ones, cannot cancel) falls on both alike. Prints decode speed free and constrained,
the ratio, and the time spent in the grammar itself (llguidance's mask and checks) per step.

    .venv/bin/python scripts/bench_grammar.py -m TARGET.gguf [-d DRAFTER.gguf] --json-schema S.json [S2.json ...]
        [--max-tokens 64] [--rounds 2] [--threads 2] [--json docs/figures/grammar_NAME.json]
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
from engine.local.runtime import LoadOptions  # noqa: E402
from scripts.figures import provenance, save  # noqa: E402

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


def markdown(data: dict) -> str:
    """The speed page's table of a run written with --json (tests/unit/test_figures.py checks it)."""
    lines = ["| model | schema | mode | free | constrained | ratio | in the grammar |", "|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        lines.append(f"| {data['model']} | `{row['schema']}` | {row['mode']} | {row['free']:.1f} tok/s | "
                     f"{row['constrained']:.1f} tok/s | **{row['constrained'] / row['free']:.2f}x** | "
                     f"{row['grammar_ms']:.2f} ms a step |")
    return "\n".join(lines)


def measure(e: Engine, toks: list, grammar, spec: str, spent: dict, args) -> dict:
    """Every prompt free and constrained back to back, alternating which goes first."""
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
    return {"free": free, "constrained": con, "grammar_ms": sum(spent.values()) * 1000 / max(sums[True][2], 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--drafter")
    ap.add_argument("--json-schema", nargs="+", required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    data = {**provenance("scripts/bench_grammar.py"), "model": Path(args.model).name, "rows": []}
    spent = timed_grammar()
    e = Engine.load(args.model, args.drafter, LoadOptions(n_threads=args.threads))
    toks = [prompt_tokens(e, p) for p in load_prompts()]
    modes = [("baseline", SPEC_NONE)] + ([("MTP auto", AUTO)] if e.has_mtp else [])  # (label, spec)
    for path in args.json_schema:
        grammar = G.from_json_schema(Path(path).read_text())
        for _, spec in modes:  # warm-up (allocations; the grammar's tokenizer is built once per model)
            for g in (None, grammar):
                e.reset()
                e.run(toks[0], GenerationConfig(max_tokens=8, spec=spec, draft_max=AUTO, grammar=g))
        print(f"{data['model']}{' + ' + Path(args.drafter).name if args.drafter else ''}: "
              f"{len(toks)} prompts x {args.rounds} rounds, max {args.max_tokens} tokens, greedy, free and "
              f"constrained to {path} back to back", flush=True)
        for label, spec in modes:
            data["rows"].append({"schema": Path(path).name, "mode": label, **measure(e, toks, grammar, spec, spent, args)})
    e.close()
    print(markdown(data))
    save(args.json, data)


if __name__ == "__main__":
    main()
