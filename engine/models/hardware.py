"""What memory this machine offers: system RAM and the devices llama.cpp reports."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

# ggml_backend_dev_type
_DEV_CPU, _DEV_GPU, _DEV_IGPU = 0, 1, 2


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    kind: str  # "CPU", "GPU" or "iGPU"
    free: int
    total: int


def system_ram() -> tuple[int, int]:
    """(available, total) bytes of system memory."""
    try:
        info = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                info[k] = int(v.split()[0]) * 1024
        return info.get("MemAvailable", info["MemFree"]), info["MemTotal"]
    except (OSError, KeyError, ValueError):
        pass
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total // 2, total
    except (ValueError, OSError, AttributeError):
        return 0, 0


def _ggml():
    """libggml from llama-cpp-python's own build (its device API is not bound in Python)."""
    import llama_cpp

    libdir = Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml.so", "libggml.dylib", "ggml.dll"):
        p = libdir / name
        if p.exists():
            lib = ctypes.CDLL(str(p))
            lib.ggml_backend_dev_count.restype = ctypes.c_size_t
            lib.ggml_backend_dev_get.restype = ctypes.c_void_p
            lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
            for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
                getattr(lib, fn).restype = ctypes.c_char_p
                getattr(lib, fn).argtypes = [ctypes.c_void_p]
            lib.ggml_backend_dev_type.restype = ctypes.c_int
            lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
            lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                                    ctypes.POINTER(ctypes.c_size_t)]
            return lib
    return None


def devices() -> list[Device]:
    """The compute devices llama.cpp sees, with their free and total memory."""
    from ..llama import ensure_backend

    ensure_backend()
    lib = _ggml()
    if lib is None:
        return []
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = {_DEV_CPU: "CPU", _DEV_GPU: "GPU", _DEV_IGPU: "iGPU"}.get(lib.ggml_backend_dev_type(dev), "other")
        out.append(Device((lib.ggml_backend_dev_name(dev) or b"").decode(),
                          (lib.ggml_backend_dev_description(dev) or b"").decode(), kind, free.value, total.value))
    return out


def memory_budget() -> tuple[int, str, str]:
    """(usable bytes, "GPU"/"CPU", description) for the best place to run a model: the GPU
    with the most free memory, else system RAM. A little is kept back for everything else."""
    gpus = [d for d in devices() if d.kind == "GPU"]
    if gpus:
        g = max(gpus, key=lambda d: d.free)
        return int(g.free * 0.9), "GPU", f"{g.description or g.name}: {g.free / 1e9:.1f} GB free of {g.total / 1e9:.1f} GB"
    avail, total = system_ram()
    return int(avail * 0.8), "CPU", f"system memory: {avail / 1e9:.1f} GB available of {total / 1e9:.1f} GB"
