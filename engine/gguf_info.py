"""Read a GGUF header with the `gguf` package and refuse files llama.cpp would choke on.

llama.cpp aborts the whole process on some malformed files (a GGML_ASSERT is not an
exception), so every file is checked here, in Python, before llama.cpp sees it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import gguf

from .errors import DrafterMismatchError, ModelFileError

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
    n_vocab: int
    n_embd: int
    n_embd_out: int  # drafters: the target hidden size they read; 0 elsewhere
    n_layer: int
    context_length: int
    swa_pattern: tuple[bool, ...] = ()
    shared_kv_layers: int = 0
    chat_template: str | None = None
    n_tensors: int = 0
    metadata: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_gemma4_target(self) -> bool:
        return self.arch == TARGET_ARCH

    @property
    def is_drafter(self) -> bool:
        return self.arch == DRAFTER_ARCH


def _scalar(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None or not f.data:
        return default
    v = f.contents()
    return v


def read_gguf_info(path: str | os.PathLike) -> GGUFInfo:
    """Parse and sanity-check a GGUF header; raise ModelFileError with a plain message."""
    p = Path(path)
    if not p.exists():
        raise ModelFileError(f"{p}: no such file")
    if p.is_dir():
        raise ModelFileError(f"{p}: is a folder, not a GGUF file")
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise ModelFileError(f"{p}: cannot be read ({e.strerror or e})") from None
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"{p.name}: not a GGUF model file (it does not start with 'GGUF')")

    try:
        reader = gguf.GGUFReader(str(p), "r")
    except Exception as e:  # the reader raises ValueError/IndexError/... on damaged headers
        raise ModelFileError(f"{p.name}: damaged or truncated GGUF header ({e})") from None

    try:
        # Data end = start of tensor data + the furthest end of any tensor.
        end = reader.data_offset
        for t in reader.tensors:
            end = max(end, int(t.data_offset) + int(t.n_bytes))
        if end > size:
            raise ModelFileError(
                f"{p.name}: file is truncated ({size:,} of {end:,} bytes); "
                "the download was probably interrupted"
            )
        arch = _scalar(reader, "general.architecture")
        if not isinstance(arch, str):
            raise ModelFileError(f"{p.name}: GGUF has no general.architecture")

        def k(suffix, default=None):
            return _scalar(reader, f"{arch}.{suffix}", default)

        tokens_field = reader.fields.get("tokenizer.ggml.tokens")
        n_vocab = len(tokens_field.data) if tokens_field is not None else 0
        swa = k("attention.sliding_window_pattern", ())
        if isinstance(swa, (bool, int)):
            swa = ()
        info = GGUFInfo(
            path=p,
            arch=arch,
            name=str(_scalar(reader, "general.name", p.stem)),
            file_size=size,
            n_vocab=n_vocab,
            n_embd=int(k("embedding_length", 0) or 0),
            n_embd_out=int(k("embedding_length_out", 0) or 0),
            n_layer=int(k("block_count", 0) or 0),
            context_length=int(k("context_length", 0) or 0),
            swa_pattern=tuple(bool(x) for x in swa),
            shared_kv_layers=int(k("attention.shared_kv_layers", 0) or 0),
            chat_template=_scalar(reader, "tokenizer.chat_template"),
            n_tensors=len(reader.tensors),
        )
    except ModelFileError:
        raise
    except Exception as e:
        raise ModelFileError(f"{p.name}: damaged GGUF metadata ({e})") from None
    finally:
        # Drop the memory map now; on Windows an open map blocks deleting the file.
        mm = getattr(reader, "data", None)
        if mm is not None and hasattr(mm, "_mmap") and mm._mmap is not None:
            try:
                mm._mmap.close()
            except (BufferError, ValueError):
                pass
    return info


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
    tp = target.swa_pattern
    if len(tp) < 2 or tp[-1] or not tp[-2]:
        raise DrafterMismatchError(
            f"{target.path.name}: target's last two layers must be sliding then full "
            "for a drafter to share its KV cache"
        )
