"""A drafter GGUF written again with or without its clustered head (engine/models/draft_head.py):

* `write_clustered_drafter`: a drafter from the Hub (llama.cpp's converter drops the clustered
  head's tensors) with the centroids and ordering of its published checkpoint added, and its
  head's rows stored cluster by cluster (masked_embd_ordered), as Tandem's patched graph reads
  them fastest (each cluster's rows one block);
* `write_plain_drafter`: the same weights without them, as llama.cpp's own build loads them
  (it fails on a file that has them): for benchmarks against llama-server on the same weights.

Both copy the file's metadata and tensors byte for byte but for what changes, the tensor table
and the data laid out again as llama.cpp wants them: one after the other, in the table's order."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np

from .gguf_info import HEAD_TENSORS

ORDERED_KEY = "gemma4-assistant.masked_embd_ordered"
TOP_K_KEY = "gemma4-assistant.centroid_intermediate_top_k"
_CHUNK = 64 << 20
_U32, _BOOL = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.BOOL
_F32, _I32 = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.I32


def _entry_bytes(field) -> int:
    return sum(int(p.nbytes) for p in field.parts)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _tensor_entry(name: str, dims: tuple[int, ...], ttype: int) -> bytes:
    """A tensor table entry, its offset 0 (set where the data is laid out)."""
    return (_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<IQ", ttype, 0))


def _rewrite(src: Path, dst: Path, keys: list[bytes], tensors: list[tuple[str, bytes, np.ndarray]],
             rows: np.ndarray | None, to_cluster_order: bool) -> Path:
    """`src` without the clustered head's tensors and keys, with `keys` (metadata entries, each
    serialized) and `tensors` ((name, table entry, data)) added after its own; `rows`: the
    ordering the head's rows go into (`to_cluster_order`) or come out of (None: as they are)."""
    import gguf

    r = gguf.GGUFReader(src)
    raw = np.memmap(src, dtype=np.uint8, mode="r")
    keep = [t for t in r.tensors if t.name not in HEAD_TENSORS]
    table_at = min(t.field.offset for t in r.tensors)  # the tensor table follows the metadata
    meta = bytearray(raw[:table_at])
    gone = sorted((r.fields[k] for k in (ORDERED_KEY, TOP_K_KEY) if k in r.fields), key=lambda f: -f.offset)
    n_keys = struct.unpack_from("<Q", meta, 16)[0]
    struct.pack_into("<QQ", meta, 8, len(keep) + len(tensors), n_keys - len(gone) + len(keys))  # after magic, version
    for f in gone:
        del meta[f.offset:f.offset + _entry_bytes(f)]
    table = bytearray()
    datas, pos = [], 0
    for entry, data in [(bytes(raw[t.field.offset:t.field.offset + _entry_bytes(t.field)]),
                         raw[t.data_offset:t.data_offset + t.n_bytes]) for t in keep] + [(e, d) for _, e, d in tensors]:
        entry = bytearray(entry)
        struct.pack_into("<Q", entry, len(entry) - 8, pos)  # its offset, the entry's last part
        table += entry
        datas.append((pos, data))
        pos += data.nbytes + (-data.nbytes % r.alignment)
    head = bytes(meta) + b"".join(keys) + bytes(table)
    head += bytes(-len(head) % r.alignment)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    embd = next(i for i, t in enumerate(keep) if t.name == "token_embd.weight")
    with open(tmp, "wb") as out:
        for i, (at, data) in enumerate(datas):
            if i == embd and rows is not None:
                stored = data.reshape(len(rows), -1)
                data = stored[rows] if to_cluster_order else np.empty_like(stored)
                if not to_cluster_order:
                    data[rows] = stored  # row i of the file is token rows[i]'s
            out.seek(len(head) + at)
            flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            for j in range(0, flat.nbytes, _CHUNK):
                out.write(flat[j:j + _CHUNK].tobytes())
        out.seek(0)
        out.write(head)
        out.truncate(len(head) + pos)
    tmp.replace(dst)
    return dst


def write_plain_drafter(src: str | Path, dst: str | Path) -> Path:
    """The copy of `src` without its clustered head, its rows in token order, at `dst` (src
    itself when it has no clustered head); return it."""
    import gguf

    src, dst = Path(src), Path(dst)
    r = gguf.GGUFReader(src)
    names = {t.name for t in r.tensors}
    if not names & set(HEAD_TENSORS):
        return src
    ordered = ORDERED_KEY in r.fields and bool(r.fields[ORDERED_KEY].contents())
    rows = next(t for t in r.tensors if t.name == HEAD_TENSORS[1]).data.astype(np.int64) if ordered else None
    del r
    return _rewrite(src, dst, [], [], rows, False)


def write_clustered_drafter(src: str | Path, dst: str | Path, centroids: np.ndarray, ordering: np.ndarray,
                            top_k: int) -> Path:
    """`src` (a drafter without a clustered head) with `centroids` [clusters, width] and
    `ordering` (the tokens, cluster by cluster) added, scoring `top_k` clusters, its head's rows
    stored cluster by cluster, at `dst`; return it."""
    import gguf

    src, dst = Path(src), Path(dst)
    r = gguf.GGUFReader(src)
    if {t.name for t in r.tensors} & set(HEAD_TENSORS):
        raise ValueError(f"{src.name} has a clustered head already")
    del r
    centroids = np.ascontiguousarray(centroids, dtype=np.float32)
    ordering = np.ascontiguousarray(ordering, dtype="<i4")
    keys = [_string(TOP_K_KEY) + struct.pack("<II", _U32, top_k), _string(ORDERED_KEY) + struct.pack("<I?", _BOOL, True)]
    tensors = [(HEAD_TENSORS[0], _tensor_entry(HEAD_TENSORS[0], centroids.shape[::-1], _F32), centroids),
               (HEAD_TENSORS[1], _tensor_entry(HEAD_TENSORS[1], ordering.shape, _I32), ordering)]
    return _rewrite(src, dst, keys, tensors, ordering.astype(np.int64), True)
