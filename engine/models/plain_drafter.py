"""A copy of a drafter without its clustered head, as llama.cpp's own build loads it: for
benchmarks against llama-server on the same weights (llama.cpp declares the clustered head's
tensors with an empty shape and fails to load a file that has them, engine/models/draft_head.py).

The copy has the file's metadata and tensors but those two (the tensor table and the data
laid out again, as llama.cpp wants them one after the other), and a head stored cluster by
cluster (masked_embd_ordered) put back in token order, as the full head reads it."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from .gguf_info import HEAD_TENSORS

ORDERED_KEY = "gemma4-assistant.masked_embd_ordered"
_CHUNK = 64 << 20


def _entry_bytes(field) -> int:
    return sum(int(p.nbytes) for p in field.parts)


def write_plain_drafter(src: str | Path, dst: str | Path) -> Path:
    """Write the copy of `src` to `dst` (src itself when it has no clustered head); return it."""
    import gguf

    src, dst = Path(src), Path(dst)
    r = gguf.GGUFReader(src)
    drop = [t for t in r.tensors if t.name in HEAD_TENSORS]
    if not drop:
        return src
    keep = [t for t in r.tensors if t.name not in HEAD_TENSORS]
    raw = np.memmap(src, dtype=np.uint8, mode="r")
    table_end = max(t.field.offset + _entry_bytes(t.field) for t in r.tensors)
    head = bytearray(raw[:table_end])
    struct.pack_into("<Q", head, 8, len(keep))  # the tensor count, after the magic and the version
    ordered = ORDERED_KEY in r.fields and bool(r.fields[ORDERED_KEY].contents())
    if ordered:  # its value, the field's last part (one byte), becomes false
        f = r.fields[ORDERED_KEY]
        head[f.offset + _entry_bytes(f) - 1] = 0
    # llama.cpp wants the tensors' data one after the other, in the table's order: new offsets
    at, pos = {}, 0
    for t in keep:
        at[t.name] = pos
        struct.pack_into("<Q", head, t.field.offset + _entry_bytes(t.field) - 8, pos)  # its last part
        pos += t.n_bytes + (-t.n_bytes % r.alignment)
    for t in sorted(drop, key=lambda t: -t.field.offset):
        del head[t.field.offset:t.field.offset + _entry_bytes(t.field)]
    head += bytes(-len(head) % r.alignment)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(head)
        for t in keep:
            data = raw[t.data_offset:t.data_offset + t.n_bytes]
            if ordered and t.name == "token_embd.weight":
                ids = next(d for d in drop if d.name == HEAD_TENSORS[1]).data.astype(np.int64)
                rows = data.reshape(len(ids), -1)
                data = np.empty_like(rows)
                data[ids] = rows  # row i of the file is token ids[i]'s
            out.seek(len(head) + at[t.name])
            for i in range(0, t.n_bytes, _CHUNK):
                out.write(data.reshape(-1)[i:i + _CHUNK].tobytes())
        out.truncate(len(head) + pos)
    tmp.replace(dst)
    return dst
