"""What memory this machine offers: system RAM and the devices llama.cpp reports."""

from __future__ import annotations

import ctypes
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


def physical_cores() -> int:
    """Physical cores (threads beyond them slow llama.cpp down); logical CPUs if unknown."""
    import os

    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def system_ram() -> tuple[int, int]:
    """(available, total) bytes of system memory, on every platform psutil supports."""
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


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
    from ..local.llama import ensure_backend

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


# Memory bandwidth of common GPUs (GB/s, the makers' figures): decoding reads every weight
# once per token, so this sets the speed. Matched on the device description, longest name first.
GPU_BANDWIDTH_GBS = {
    "RTX 5090": 1792, "RTX 5080": 960, "RTX 5070 Ti": 896, "RTX 5070": 672, "RTX 5060 Ti": 448, "RTX 5060": 448,
    "RTX 4090": 1008, "RTX 4080": 717, "RTX 4070 Ti": 504, "RTX 4070": 504, "RTX 4060 Ti": 288, "RTX 4060": 272,
    "RTX 3090": 936, "RTX 3080": 760, "RTX 3070": 448, "RTX 3060": 360, "RTX 2080": 448, "RTX 2070": 448,
    "RTX 2060": 336, "GTX 1080": 320, "GTX 1660": 192, "RTX A6000": 768, "RTX 6000 Ada": 960, "L40": 864,
    "L4": 300, "T4": 320, "A10": 600, "A100": 1555, "H100": 3350, "H200": 4800,
    "RX 7900 XTX": 960, "RX 7900 XT": 800, "RX 7800 XT": 624, "RX 7600": 288, "RX 6800 XT": 512, "RX 6700 XT": 384,
    "Apple M1 Ultra": 800, "Apple M1 Max": 400, "Apple M1 Pro": 200, "Apple M1": 68,
    "Apple M2 Ultra": 800, "Apple M2 Max": 400, "Apple M2 Pro": 200, "Apple M2": 100,
    "Apple M3 Ultra": 819, "Apple M3 Max": 400, "Apple M3 Pro": 150, "Apple M3": 100,
    "Apple M4 Max": 546, "Apple M4 Pro": 273, "Apple M4": 120,
}
UNKNOWN_GPU_GBS = 300  # a conservative guess for a discrete GPU not in the table


def gpu_bandwidth(description: str) -> tuple[float, bool]:
    """(bytes/s, known) for a GPU by its description."""
    desc = description.lower()
    for name in sorted(GPU_BANDWIDTH_GBS, key=len, reverse=True):
        if name.lower() in desc:
            return GPU_BANDWIDTH_GBS[name] * 1e9, True
    return UNKNOWN_GPU_GBS * 1e9, False


_cpu_bandwidth: float | None = None


def cpu_bandwidth() -> float:
    """Bytes/s the CPU streams through memory when decoding, estimated from a 0.1 s numpy
    read (the best of five sums over 256 MB) scaled by the cores llama.cpp uses: half the
    single-thread rate per core, up to four cores. Calibrated on a 2-core VM where this gives
    13 GB/s and llama.cpp's Q4_0 decode of a 1 B model ran at 13.2 GB/s of weights."""
    global _cpu_bandwidth
    if _cpu_bandwidth is None:
        import time

        import numpy as np

        a = np.ones(64 * 2**20, np.float32)
        best = 0.0
        for _ in range(5):
            t0 = time.perf_counter()
            a.sum()
            best = max(best, a.nbytes / max(time.perf_counter() - t0, 1e-9))
        _cpu_bandwidth = best * min(physical_cores(), 4) / 4
    return _cpu_bandwidth


@dataclass(frozen=True)
class Machine:
    """Where a model can run: the best GPU (if any) and system memory, with bandwidths."""

    ram_budget: int  # usable bytes of system memory
    cpu_bandwidth: float  # bytes/s
    gpu_name: str = ""
    gpu_budget: int = 0  # usable bytes of GPU memory; 0 = no GPU
    gpu_bandwidth: float = 0.0
    description: str = ""

    @property
    def device(self) -> str:
        return "GPU" if self.gpu_budget > 0 else "CPU"

    @property
    def budget(self) -> int:
        return self.gpu_budget if self.gpu_budget > 0 else self.ram_budget


def best_gpu() -> Device | None:
    """The GPU llama.cpp sees with the most free memory, if any."""
    return max((d for d in devices() if d.kind == "GPU"), key=lambda d: d.free, default=None)


def free_memory() -> tuple[int, str, int]:
    """(free bytes, name) of best_gpu() ((0, "") without one) and the system memory available:
    what engine/models/fit.py places a pair in."""
    g = best_gpu()
    return (g.free if g else 0, (g.description or g.name) if g else "", system_ram()[0])


def this_machine() -> Machine:
    """The GPU with the most free memory (a little kept back), else system RAM."""
    avail, total = system_ram()
    ram = int(avail * 0.8)
    cpu_bw = cpu_bandwidth()
    g = best_gpu()
    if g is not None:
        bw, known = gpu_bandwidth(g.description or g.name)
        name = g.description or g.name
        desc = (f"{name}: {g.free / 1e9:.1f} GB free of {g.total / 1e9:.1f} GB, "
                f"{'' if known else 'about '}{bw / 1e9:.0f} GB/s")
        return Machine(ram, cpu_bw, name, int(g.free * 0.9), bw, desc)
    return Machine(ram, cpu_bw, description=f"no GPU; system memory {avail / 1e9:.1f} GB available of "
                                            f"{total / 1e9:.1f} GB, about {cpu_bw / 1e9:.0f} GB/s for decoding")
