"""`tandem bench`: baseline and drafting side by side on the same prompts, locally; on servers
(--server, --baseline-server); or several clients at once (--concurrency)."""

from __future__ import annotations

import json
import sys

from ..bench.edit_suite import SUITE_CTX
from ..generation import AUTO
from .loading import load, output_constraint, remote

def cmd_bench(args) -> int:
    from ..bench.side_by_side import LEGEND, format_table, grammar_cost, load_prompts, run_bench

    if args.server:
        return _bench_remote(args)
    if args.concurrency:
        raise ValueError("--concurrency measures a server: give --server URL (start one with tandem serve)")
    constraint = output_constraint(args)
    if args.suite == "edits" and not args.prompts:
        from ..bench.edit_suite import edit_groups

        groups = edit_groups()
        prompts = [p for group in groups.values() for p in group]
        args.ctx = max(args.ctx or 0, SUITE_CTX)
    else:
        prompts = load_prompts(args.prompts)
        groups = {"": prompts}
    engine = load(args)
    try:
        t = engine.rt.target_info
        d = engine.rt.drafter_info
        print(f"target  {t.path.name} ({t.arch}, {t.file_size / 2**20:.1f} MiB)\n"
              + (f"drafter {d.path.name} ({d.arch}, {d.file_size / 2**20:.1f} MiB), "
                 f"head {engine.draft_head.label}\n" if d else
                 "drafter none: lookup is the draft source\n")
              + f"threads {engine.rt.n_threads}, ctx {engine.n_ctx}, {len(prompts)} prompts, "
              f"max {args.max_tokens} tokens, greedy\n", flush=True)

        def progress(s):
            print(f"\r  {s:<30}", end="", file=sys.stderr, flush=True)

        results = {}
        for title, group in groups.items():
            res = results[title or "all"] = run_bench(engine, group, args.draft_max, args.max_tokens,
                                                      progress=progress, specs=args.spec)
            print("\r", end="", file=sys.stderr)
            print((f"{title} ({len(group)} prompts):\n" if title else "") + format_table(res, legend=False) + "\n")
            if constraint:
                res["json_schema"] = run_bench(engine, group, args.draft_max, args.max_tokens, progress=progress,
                                               grammar=constraint["grammar"], specs=args.spec)
                print("\r", end="", file=sys.stderr)
                print("constrained to " + args.json_schema + ":\n" + format_table(res["json_schema"], legend=False)
                      + "\n\n"
                      + grammar_cost(res, res["json_schema"]))
        print(LEGEND)
        m = _peak_memory(engine)
        if m["peak_rss_mib"]:
            print(f"\nmemory: peak {m['peak_rss_mib']:.0f} MiB resident; model files {m['files_mib']:.0f} MiB; "
                  f"beyond the mapped files {m['anon_mib']:.0f} MiB (KV cache, compute buffers, "
                  "weights repacked for the CPU, Python)")
        if args.json:
            out = results["all"] if len(results) == 1 else results
            out["memory"] = m
            out["draft_head"] = engine.draft_head.as_dict() if engine.draft_head else None
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=2)
    finally:
        engine.close()
    return 0


def _bench_load(args) -> int:
    """Several clients at once: tandem serve with drafting on and off (per request), or a server
    and its --baseline-server."""
    from ..bench.load import load_table, measure_levels

    mtp = load(args)  # checks the server and finds its model
    try:
        model, engine_name, url, can_switch = mtp.model, mtp.engine_name, mtp.base_url, mtp.can_switch_mtp
    finally:
        mtp.close()
    sides = {f"{engine_name} drafting": (url, {"tandem": {"draft_max": args.draft_max[0]}} if can_switch else None)}
    if args.baseline_server:
        base = remote(args.baseline_server, args, model)
        sides[f"{base.engine_name} baseline server"] = (base.base_url, None)
        base.close()
    elif can_switch:
        sides[f"{engine_name} no drafting"] = (url, {"tandem": {"mtp": False}})
    print(f"{model} at {url}: {args.max_tokens} tokens per client, greedy\n", flush=True)
    rows = {}
    for name, (base, extra) in sides.items():
        if sys.stderr.isatty():  # progress for the one watching (a log would keep the carriage returns)
            print(f"\r  {name}{'':<20}", end="", file=sys.stderr, flush=True)
        rows[name] = measure_levels(base, args.concurrency, args.max_tokens, args.api_key, model, extra)
    if sys.stderr.isatty():
        print("\r", end="", file=sys.stderr)
    print(load_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({k: [{**vars(r), "tps": r.tps} for r in v] for k, v in rows.items()}, f, indent=2)
    return 0


def _bench_remote(args) -> int:
    """bench on servers: the MTP server (--server) against the same model served without a
    drafter (--baseline-server), since servers choose speculation per server."""
    from ..bench.side_by_side import format_table, load_prompts, run_remote_bench

    if args.concurrency:
        return _bench_load(args)

    if len(args.draft_max) > 1 and args.draft_max != [AUTO, 1, 2, 3, 4]:  # the default means "as the server does"
        raise ValueError("bench on a server compares one draft length: give one --draft-max (servers other "
                         "than tandem serve use the one they were started with)")
    prompts = load_prompts(args.prompts)
    mtp = load(args)
    try:
        if not args.baseline_server and not mtp.can_switch_mtp:
            raise ValueError("bench on a server needs --baseline-server URL: the same model served without a "
                             "drafter (servers cannot switch drafting per request; tandem serve can)")
        # tandem serve switches drafting per request: one server is both sides
        base = remote(args.baseline_server, args, args.model or mtp.model) if args.baseline_server else mtp
        try:
            print(f"MTP      {mtp.engine_name} at {mtp.base_url}, model {mtp.model}\n"
                  f"baseline {base.engine_name} at {base.base_url}, model {base.model}\n"
                  f"{len(prompts)} prompts, max {args.max_tokens} tokens, greedy\n", flush=True)
            # servers compare one draft length: the first given goes to tandem serve; other
            # servers use the one they were started with
            res = run_remote_bench(mtp, base, prompts, args.max_tokens,
                                   progress=lambda s: print(f"\r  {s:<30}", end="", file=sys.stderr, flush=True),
                                   draft_max=args.draft_max[0])
            print("\r", end="", file=sys.stderr)
            print(format_table(res))
            if args.json:
                with open(args.json, "w", encoding="utf-8") as f:
                    json.dump(res, f, indent=2)
        finally:
            if base is not mtp:
                base.close()
    finally:
        mtp.close()
    return 0


def _peak_memory(engine) -> dict:
    """Peak resident memory, and the part of it that is not the mapped model files (KV cache,
    compute buffers, weights repacked for the CPU, Python): Linux /proc figures."""
    status = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "RssAnon", "RssFile"):
                    status[k] = int(v.split()[0]) / 1024  # kB -> MiB
    except OSError:
        pass
    files = engine.rt.target_info.file_size + (engine.rt.drafter_info.file_size if engine.rt.drafter_info else 0)
    return {"peak_rss_mib": status.get("VmHWM", 0.0), "anon_mib": status.get("RssAnon", 0.0),
            "mapped_files_mib": status.get("RssFile", 0.0), "files_mib": files / 2**20}
