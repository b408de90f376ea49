"""`tandem serve`: the model as a local OpenAI-compatible API (engine.serve), after checking
the addresses and the port before loading anything."""

from __future__ import annotations

from ..generation import AUTO
from .loading import load

def cmd_serve(args) -> int:
    from pathlib import Path

    from ..serve import check_host, run

    hosts = list(dict.fromkeys(args.host))
    for host in hosts:  # before loading anything
        check_host(host, args.api_key, args.cors)
        _check_port_free(host, args.port)
    engine = load(args)
    try:
        engine.warm_up()
        name, *aliases = args.name or [Path(args.model).stem]
        where = " and ".join(f"http://{f'[{h}]' if ':' in h else h}:{args.port}/v1" for h in hosts)
        planned, allocated = engine.memory
        if engine.placement.note:
            left = [flag for flag, auto in (("--ctx", args.ctx is None), ("--gpu-layers", args.gpu_layers == AUTO))
                    if auto]
            hint = f" ({' and '.join(left)} to choose yourself)" if left and engine.placement.note.startswith("Chose") \
                else ""
            print(engine.placement.note + hint, flush=True)
        print(f"Memory: {planned.describe()} planned; llama.cpp allocated {allocated.total / 1e9:.2f} GB "
              "at load (its output buffer grows to the plan's on the first drafts)", flush=True)
        head = engine.draft_head
        loaded = engine.rt.drafter_info.path.name if head else ""
        copy = f" (as Tandem's copy {loaded})" if head and loaded != Path(args.drafter).name else ""
        mtp = f"MTP with {Path(args.drafter).name}{copy}, its head {head.label}" if head else "no drafter"
        print(f"Serving {name} ({mtp}) at {where}", flush=True)
        if head and head.note:
            print(f"Drafter: {head.note}", flush=True)
        run(engine, name, hosts, args.port, args.api_key, args.cors, args.queue, args.draft_max,
            aliases=aliases, tags=args.tags)
    finally:
        engine.close()
    return 0


def _check_port_free(host: str, port: int) -> None:
    """One line before loading anything, instead of 'Serving at …' and then uvicorn's error."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise ValueError(f"cannot listen on {host}: {e.strerror or e}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind(addr)
        except OSError as e:
            raise ValueError(f"cannot listen on {host}:{port}: {e.strerror or e} (another server there? "
                             "choose another --port)") from None
