"""The one place that imports llama-cpp-python's low-level bindings.

`llama_cpp_ext` binds C++-mangled, explicitly unstable symbols, so the exact package
version is pinned and checked here, and the engine imports `lib` and `ext` from here. (Three
places reach the package beside them: media.py for mtmd's bindings, testmodels/writer.py for the
quantizer, models/hardware.py for the folder of its shared libraries.)
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading

from ..errors import EngineError

PINNED_VERSION = "0.3.36"

try:
    import llama_cpp as _pkg
    from llama_cpp import llama_cpp as lib
    from llama_cpp import llama_cpp_ext as ext
except Exception as e:  # ImportError, or OSError when libllama.so fails to load
    raise EngineError(
        f"llama-cpp-python {PINNED_VERSION} is not usable here ({e}); "
        f"reinstall it with: pip install llama-cpp-python=={PINNED_VERSION}"
    ) from None

__all__ = ["lib", "ext", "clustered_head_built", "ensure_backend", "recording_allocations", "system_info",
           "supports_gpu_offload", "version"]

if getattr(_pkg, "__version__", None) != PINNED_VERSION:
    raise EngineError(
        f"Tandem needs llama-cpp-python=={PINNED_VERSION} (found {_pkg.__version__}); "
        "its MTP bindings change between releases"
    )

_init_lock = threading.Lock()
_initialised = False
# ggml log levels: 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the previous line.
_min_level = [4]  # errors only, unless verbose


# What llama.cpp allocates it says only in its log (llama_get_memory_breakdown returns a C++
# map): "load_tensors: CPU_Mapped model buffer size = 97.00 MiB", "llama_kv_cache: CPU KV buffer
# size = ...", "llama_context: CPU compute buffer size = ...", "... output buffer size = ...".
_BUFFER_RE = re.compile(r"(\S+)\s+(model|KV|compute|output) buffer size =\s*([0-9.]+) MiB")
# the projector's (mtmd's clip): "load_hparams: model size: 0.26 MiB", its weights
_CLIP_RE = re.compile(r"load_hparams: model size:\s*([0-9.]+) MiB")
_recording = threading.local()  # the buffers llama.cpp allocates while this thread loads


@contextlib.contextmanager
def recording_allocations():
    """The buffers llama.cpp allocates on this thread inside the block, as (what, backend, bytes):
    what is "model" (weights), "KV", "compute" or "output" (logits); backend "CPU", "CUDA0" ...
    (the log is written on the thread that loads)."""
    rows: list[tuple[str, str, int]] = []
    outer, _recording.rows = getattr(_recording, "rows", None), rows
    try:
        yield rows
    finally:
        _recording.rows = outer  # a block inside another records for itself only


@lib.llama_log_callback
def _log_cb(level, text, _user):
    rows = getattr(_recording, "rows", None)
    if rows is not None and level == 2:
        line = text.decode("utf-8", "replace")
        m = _BUFFER_RE.search(line)
        if m:
            rows.append((m.group(2), m.group(1), int(float(m.group(3)) * 2**20)))
        elif m := _CLIP_RE.search(line):
            rows.append(("model", "clip", int(float(m.group(1)) * 2**20)))
    if level >= _min_level[0] and (level != 5 or _min_level[0] <= 2):
        try:
            import sys

            sys.stderr.write(text.decode("utf-8", "replace"))
        except Exception:
            pass


def ensure_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once per process and route its log through a filter."""
    global _initialised
    with _init_lock:
        _min_level[0] = 2 if verbose else 4
        if not _initialised:
            lib.llama_log_set(_log_cb, ctypes.c_void_p(0))
            import llama_cpp.mtmd_cpp as mtmd

            mtmd.mtmd_log_set(_log_cb, ctypes.c_void_p(0))  # the projector's log: filtered and recorded alike
            lib.llama_backend_init()
            _initialised = True


def system_info() -> str:
    return lib.llama_print_system_info().decode("utf-8", "replace").strip()


def supports_gpu_offload() -> bool:
    return bool(lib.llama_supports_gpu_offload())


def version() -> str:
    return _pkg.__version__


def clustered_head_built() -> bool:
    """Whether this libllama has Tandem's patch for the drafter's clustered head
    (packaging/llama-cpp/gemma4-clustered-head.patch, engine/models/draft_head.py)."""
    return hasattr(lib._lib, "tandem_clustered_head_version")
