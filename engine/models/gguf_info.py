"""Read a GGUF header and refuse files llama.cpp would choke on.

llama.cpp aborts the whole process on some malformed files (a GGML_ASSERT is not an
exception), so every file is checked here, in Python, before llama.cpp sees it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import gguf

from ..errors import DrafterMismatchError, ModelFileError

GGUF_MAGIC = b"GGUF"
TARGET_ARCH = "gemma4"
DRAFTER_ARCH = "gemma4-assistant"


@dataclass(frozen=True)
class GGUFInfo:
    """What Tandem needs to know about a GGUF file before loading it."""

    path: Path
    arch: str
    name: str
    file_size: int
    tensor_bytes: int  # the weights, without the header (Gemma 4's vocabulary alone is ~15 MB of it)
    n_vocab: int
    n_embd: int
    n_embd_out: int  # drafters: the target hidden size they read; 0 elsewhere
    n_layer: int
    context_length: int
    swa_pattern: tuple[bool, ...] = ()
    shared_kv_layers: int = 0
    chat_template: str | None = None
    n_tensors: int = 0
    n_head: tuple[int, ...] = ()  # per layer
    n_head_kv: tuple[int, ...] = ()  # per layer
    head_dim: tuple[int, int] = (0, 0)  # key length, value length (full-attention layers)
    head_dim_swa: tuple[int, int] = (0, 0)  # the same for sliding-window layers
    n_swa: int = 0
    file_type: int = -1  # general.file_type: llama.cpp's quantization of the file
    # drafters: the clustered head's tensors (engine/models/draft_head.py), by name: (dims, ggml
    # type, where its data starts in the file)
    head_tensors: dict = field(default_factory=dict)
    centroid_top_k: int = 0  # their clusters scored exactly, as the file says (0: it does not)
    head_ordered: bool = False  # the head's rows are stored in the clusters' order (masked_embd_ordered)

    @property
    def quant(self) -> str:
        """The quantization as people name it (Q4_K_M, Q8_0, F16), or '' if the file does not say."""
        from gguf import LlamaFileType

        try:
            return LlamaFileType(self.file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            return ""

    @property
    def is_gemma4_target(self) -> bool:
        return self.arch == TARGET_ARCH

    @property
    def is_drafter(self) -> bool:
        return self.arch == DRAFTER_ARCH


_SCALARS = {  # GGUFValueType -> struct format
    gguf.GGUFValueType.UINT8: "<B", gguf.GGUFValueType.INT8: "<b", gguf.GGUFValueType.UINT16: "<H",
    gguf.GGUFValueType.INT16: "<h", gguf.GGUFValueType.UINT32: "<I", gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.FLOAT32: "<f", gguf.GGUFValueType.BOOL: "<?", gguf.GGUFValueType.UINT64: "<Q",
    gguf.GGUFValueType.INT64: "<q", gguf.GGUFValueType.FLOAT64: "<d",
}
# Arrays longer than this (vocabularies: 262k strings) are skipped, only counted.
_KEEP_ARRAY = 4096
_MAX_NESTING = 4  # arrays of arrays: real files use none; a hostile one could nest thousands


class _Truncated(Exception):
    pass


class _Skipped(int):
    """Length of an array that was too long to keep."""


class _HeaderReader:
    """A forward-only reader of GGUF metadata and tensor infos.

    The gguf package's GGUFReader builds a Python object for every vocabulary entry, which
    takes tens of seconds for Gemma's 262k-token vocabulary; this uses the package's value
    types and block sizes but skips long arrays without materialising them.
    """

    def __init__(self, fh, size: int):
        self.fh = fh
        self.size = size

    def take(self, n: int) -> bytes:
        b = self.fh.read(n)
        if len(b) != n:
            raise _Truncated
        return b

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > self.size:
            raise ValueError("string length beyond the end of the file")
        return self.take(n).decode("utf-8", "replace")

    def value(self, vtype: int, depth: int = 0):
        if vtype == gguf.GGUFValueType.STRING:
            return self.string()
        if vtype == gguf.GGUFValueType.ARRAY:
            if depth >= _MAX_NESTING:
                raise ValueError("metadata arrays nested too deeply")
            itype = self.unpack("<I")
            n = self.unpack("<Q")
            if n > self.size:
                raise ValueError("array length beyond the end of the file")
            if n > _KEEP_ARRAY:
                self._skip_array(itype, n, depth)
                return _Skipped(n)
            return [self.value(itype, depth + 1) for _ in range(n)]
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self.unpack(fmt)

    def _skip_array(self, itype: int, n: int, depth: int = 0) -> None:
        if itype == gguf.GGUFValueType.STRING:
            for _ in range(n):
                self.fh.seek(self.unpack("<Q"), 1)
        elif itype in _SCALARS:
            self.fh.seek(n * struct.calcsize(_SCALARS[itype]), 1)
        else:
            for _ in range(n):
                self.value(itype, depth + 1)
        if self.fh.tell() > self.size:
            raise _Truncated


HEAD_TENSORS = ("masked_embd_centroids.weight", "masked_embd_ordering")  # a drafter's clustered head


def _read_header(fh, size: int) -> tuple[dict, int, int, int, dict]:
    """Returns (metadata, number of tensors, where the tensor data starts, where it ends, the
    HEAD_TENSORS there are: name -> (dims, ggml type, offset in the file))."""
    r = _HeaderReader(fh, size)
    r.take(4)  # magic, checked by the caller
    version = r.unpack("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    n_tensors = r.unpack("<Q")
    n_kv = r.unpack("<Q")
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise ValueError("implausible tensor or key count")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"))
    data_end = 0
    kept = {}
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        if n_dims > 8:
            raise ValueError("tensor with more than 8 dimensions")
        dims = [r.unpack("<Q") for _ in range(n_dims)]
        ttype = r.unpack("<I")
        offset = r.unpack("<Q")
        try:
            block, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise ValueError(f"unknown tensor type {ttype}") from None
        count = 1
        for d in dims:
            count *= d
        data_end = max(data_end, offset + count // block * nbytes)
        if name in HEAD_TENSORS:
            kept[name] = (tuple(dims), ttype, offset)
    align = meta.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise ValueError("invalid general.alignment")
    pos = fh.tell()
    start = pos + (-pos % align)
    return meta, n_tensors, start, start + data_end, {k: (d, t, start + o) for k, (d, t, o) in kept.items()}


def read_gguf_metadata(path: str | os.PathLike) -> dict:
    """The metadata of any GGUF file (a projector too), checked like read_gguf_info's."""
    return _read_checked(Path(path))[0]


def _read_checked(p: Path):
    """(metadata, tensor count, file size, bytes of tensor data) of a GGUF file, or ModelFileError
    in words."""
    if not p.exists():
        raise ModelFileError(f"{p}: no such file")
    if p.is_dir():
        raise ModelFileError(f"{p}: is a folder, not a GGUF file")
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            if fh.read(4) != GGUF_MAGIC:
                raise ModelFileError(f"{p.name}: not a GGUF model file (it does not start with 'GGUF')")
            fh.seek(0)
            meta, n_tensors, start, end, kept = _read_header(fh, size)
    except OSError as e:
        raise ModelFileError(f"{p}: cannot be read ({e.strerror or e})") from None
    except _Truncated:
        raise ModelFileError(f"{p.name}: file is truncated inside its header; the download was "
                             "probably interrupted") from None
    except (ValueError, OverflowError, struct.error) as e:
        raise ModelFileError(f"{p.name}: damaged GGUF header ({e})") from None
    if end > size:
        raise ModelFileError(f"{p.name}: file is truncated ({size:,} of {end:,} bytes); "
                             "the download was probably interrupted")
    return meta, n_tensors, size, end - start, kept


def read_gguf_info(path: str | os.PathLike) -> GGUFInfo:
    """Parse and sanity-check a GGUF header; raise ModelFileError with a plain message."""
    p = Path(path)
    meta, n_tensors, size, tensor_bytes, head_tensors = _read_checked(p)
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelFileError(f"{p.name}: GGUF has no general.architecture")

    def num(suffix):
        v = meta.get(f"{arch}.{suffix}", 0)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, _Skipped) else 0

    n_layer = num("block_count")

    def per_layer(suffix, default):
        """A key stored as one number or as one number per layer."""
        v = meta.get(f"{arch}.{suffix}", default)
        if isinstance(v, list) and len(v) == n_layer and all(isinstance(x, int) for x in v):
            return tuple(v)
        if isinstance(v, int) and not isinstance(v, _Skipped):
            return (v,) * n_layer
        return ()  # malformed: refused by the checks of the architectures that need it

    n_head = per_layer("attention.head_count", 0)
    n_head_kv = per_layer("attention.head_count_kv", list(n_head))
    n_embd = num("embedding_length")
    hd_full = num("attention.key_length") or (n_embd // max(n_head) if n_head and max(n_head) else 0)
    hd_full_v = num("attention.value_length") or hd_full
    hd_swa = num("attention.key_length_swa") or hd_full
    hd_swa_v = num("attention.value_length_swa") or hd_full_v
    tokens = meta.get("tokenizer.ggml.tokens", [])
    swa = meta.get(f"{arch}.attention.sliding_window_pattern", [])
    template = meta.get("tokenizer.chat_template")
    return GGUFInfo(
        path=p,
        arch=arch,
        name=str(meta.get("general.name", p.stem)),
        file_size=size,
        tensor_bytes=tensor_bytes,
        n_vocab=int(tokens) if isinstance(tokens, _Skipped) else len(tokens) if isinstance(tokens, list) else 0,
        n_embd=n_embd,
        n_embd_out=num("embedding_length_out"),
        n_layer=n_layer,
        context_length=num("context_length"),
        swa_pattern=tuple(bool(x) for x in swa) if isinstance(swa, list) else (),
        shared_kv_layers=num("attention.shared_kv_layers"),
        chat_template=template if isinstance(template, str) else None,
        n_tensors=n_tensors,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=(hd_full, hd_full_v),
        head_dim_swa=(hd_swa, hd_swa_v),
        n_swa=num("attention.sliding_window"),
        file_type=ft if isinstance((ft := meta.get("general.file_type")), int) and not isinstance(ft, _Skipped) else -1,
        head_tensors=head_tensors,
        centroid_top_k=num("centroid_intermediate_top_k"),
        head_ordered=meta.get(f"{arch}.masked_embd_ordered") is True,
    )


def check_target(info: GGUFInfo) -> None:
    """Refuse target files whose shape would trip an assertion inside llama.cpp."""
    if info.is_drafter or info.arch in ("gemma4_assistant",):
        raise ModelFileError(
            f"{info.path.name}: is an MTP drafter ({info.arch}), not a chat model; "
            "load it as the drafter"
        )
    if info.n_vocab == 0:
        raise ModelFileError(f"{info.path.name}: GGUF has no vocabulary")
    if info.is_gemma4_target:
        pat = info.swa_pattern
        if len(pat) != info.n_layer or info.n_layer < 2:
            raise ModelFileError(
                f"{info.path.name}: gemma4 sliding-window pattern has {len(pat)} entries "
                f"for {info.n_layer} layers"
            )
        if info.n_layer - info.shared_kv_layers < 2:
            raise ModelFileError(
                f"{info.path.name}: gemma4 file shares KV across too many layers "
                f"({info.shared_kv_layers} of {info.n_layer})"
            )
        check_attention_shape(info)


def check_attention_shape(info: GGUFInfo) -> None:
    """What llama.cpp's Gemma 4 graphs assert on (a process abort, not an exception):
    query heads a multiple of KV heads, even head dimensions (RoPE rotates pairs), equal K
    and V head sizes, and layers that share KV reusing a layer of their own kind."""
    name = info.path.name
    pat = info.swa_pattern
    if (info.n_embd <= 0 or len(info.n_head) != info.n_layer or len(info.n_head_kv) != info.n_layer
            or min(info.n_head) <= 0):
        raise ModelFileError(f"{name}: gemma4 file has malformed embedding width or attention head counts")
    kv_start = info.n_layer - info.shared_kv_layers
    for il in range(info.n_layer):
        src = il
        if il >= kv_start:  # a KV-sharing layer reads the last layer of its kind before them
            src = kv_start - (2 if pat[il] else 1)
            if pat[src] != pat[il]:
                raise ModelFileError(
                    f"{name}: layer {il} shares the KV cache of layer {src}, which is "
                    f"{'full' if pat[il] else 'sliding'}-attention; the sliding-window pattern does not fit")
        kv = info.n_head_kv[src]
        if kv <= 0 or info.n_head[il] % kv:
            raise ModelFileError(
                f"{name}: layer {il} has {info.n_head[il]} attention heads, not a multiple of "
                f"its {kv} KV heads")
    for kind, (k, v) in (("full", info.head_dim), ("sliding", info.head_dim_swa)):
        if k <= 0 or k % 2 or k != v:
            raise ModelFileError(f"{name}: {kind}-attention head size {k} (values {v}) is not "
                                 "an even size equal for keys and values")
    if any(pat) and info.n_swa <= 0:
        raise ModelFileError(f"{name}: sliding-window layers but no sliding window size")


def check_drafter(target: GGUFInfo, drafter: GGUFInfo) -> None:
    """Explain exactly why a drafter cannot serve a target, or return silently."""
    name = drafter.path.name
    if drafter.arch == "gemma4_assistant":
        raise DrafterMismatchError(
            f"{name}: architecture 'gemma4_assistant' (underscore) is a community conversion "
            "that llama.cpp cannot load; use a file whose architecture is 'gemma4-assistant'"
        )
    if not drafter.is_drafter:
        raise DrafterMismatchError(
            f"{name}: architecture '{drafter.arch}' is not an MTP drafter "
            f"(expected '{DRAFTER_ARCH}')"
        )
    if not target.is_gemma4_target:
        raise DrafterMismatchError(
            f"{name}: a Gemma 4 MTP drafter needs a '{TARGET_ARCH}' target, "
            f"but {target.path.name} is '{target.arch}'"
        )
    if drafter.n_embd_out != target.n_embd:
        raise DrafterMismatchError(
            f"{name}: drafter reads hidden states of width {drafter.n_embd_out}, "
            f"but {target.path.name} has width {target.n_embd}; it belongs to another Gemma 4 size"
        )
    if drafter.n_vocab != target.n_vocab:
        raise DrafterMismatchError(
            f"{name}: drafter vocabulary has {drafter.n_vocab} tokens, "
            f"target has {target.n_vocab}"
        )
    pat = drafter.swa_pattern
    if len(pat) != drafter.n_layer or not pat or pat[-1]:
        raise DrafterMismatchError(f"{name}: drafter sliding-window pattern is malformed")
    heads = list(zip(drafter.n_head, drafter.n_head_kv))
    if len(heads) != drafter.n_layer or any(kv <= 0 or h <= 0 or h % kv for h, kv in heads):
        raise DrafterMismatchError(f"{name}: drafter attention heads are not a multiple of its KV heads")
    tp = target.swa_pattern
    if len(tp) < 2 or tp[-1] or not tp[-2]:
        raise DrafterMismatchError(
            f"{target.path.name}: target's last two layers must be sliding then full "
            "for a drafter to share its KV cache"
        )
