"""The decode roofline measured on this CPU (numpy) or a CUDA GPU (torch, the ``[gpu]`` extra): peak
bandwidth and FLOP/s, and a sweep of one decode step over batch sizes.

    python -m batchlab.probe.roofline --device cuda        # prints one JSON object
    python -m batchlab.probe.roofline --device cpu --quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from batchlab._validate import positive
from batchlab.lm.config import LMConfig
from batchlab.theory.roofline import (CPU_SHAPE, GPU_SHAPE, DecodeShape, Hardware, knee_batch, ridge_batch,
                                      roofline_time, spec_for)


def toy_shape() -> DecodeShape:
    """The course LM's layer widths (`batchlab.lm.LMConfig` defaults)."""
    c = LMConfig()
    return DecodeShape("toy LM (batchlab.lm)", c.d_model, c.d_ff, c.n_layers)


def _timed(fn: Callable[[], Any], repeats: int, torch: Any = None) -> list[float]:
    """Seconds of each of `repeats` calls of `fn` after a warm-up call (CUDA events when `torch` is given)."""
    fn()
    if torch is not None:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        if torch is None:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        else:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
    return times


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def measure_cpu(array_mb: int = 128, matmul_n: int = 1024, repeats: int = 5) -> Hardware:
    """Bandwidth (the faster of a dot product and a copy of `array_mb` MiB) and float32 matmul
    FLOP/s (best of `repeats` `matmul_n`-square matmuls) of this CPU, measured with numpy."""
    n = int(positive("array_mb", array_mb) * 2**20 // 8)
    a = np.ones(n, dtype=np.float32)
    b = np.ones(n, dtype=np.float32)
    read = 2 * a.nbytes / min(_timed(lambda: a.dot(b), repeats))
    copy = 2 * a.nbytes / min(_timed(lambda: np.copyto(b, a), repeats))
    bandwidth = max(read, copy)
    a = b = None  # free the buffers before the matmul
    m = int(positive("matmul_n", matmul_n))
    x = np.random.default_rng(0).standard_normal((m, m), dtype=np.float32)
    y = np.random.default_rng(1).standard_normal((m, m), dtype=np.float32)
    flops = 2.0 * m**3 / min(_timed(lambda: x @ y, repeats))
    cores = os.cpu_count() or 1
    return Hardware(f"{cpu_name()} ({cores} cores)", bandwidth, flops, "float32", "measured here")


def torch_cuda() -> Any | None:
    """The torch module when it is installed and sees a CUDA GPU, else None."""
    try:
        import torch  # optional [gpu] extra: absent on CPU-only installs

        return torch if torch.cuda.is_available() else None
    except Exception:  # not installed, or a broken driver install: treat as no GPU
        return None


def measure_gpu(array_mb: int = 1024, matmul_n: int = 8192, repeats: int = 10) -> Hardware:
    """Bandwidth (a device-to-device copy) and bf16 matmul FLOP/s of CUDA device 0."""
    torch = torch_cuda()
    if torch is None:
        raise RuntimeError("no CUDA GPU visible to torch (install the [gpu] extra on a GPU machine)")
    dev = torch.device("cuda")
    n = int(array_mb * 2**20 // 2)
    a = torch.ones(n, dtype=torch.bfloat16, device=dev)
    b = torch.empty_like(a)
    bandwidth = 2 * a.numel() * 2 / min(_timed(lambda: b.copy_(a), repeats, torch))
    a = b = None  # free the buffers before the matmul
    x = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=dev)
    y = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=dev)
    flops = 2.0 * matmul_n**3 / min(_timed(lambda: torch.matmul(x, y), repeats, torch))
    return Hardware(torch.cuda.get_device_name(0), bandwidth, flops, "bf16", "measured here")


@dataclass
class SweepPoint:
    """One batch size of a decode sweep."""

    batch: int
    seconds: float
    tokens_per_s: float
    weight_gbps: float
    tflops: float


def _step_maker(shape: DecodeShape, seed: int, torch: Any = None, device: str = "cpu"
                ) -> tuple[Callable[[int], Callable[[], Any]], int]:
    """(batch -> one decode step's weight GEMMs (qkv, proj, up, down per layer) on random rows, bytes
    per parameter): numpy float32 without `torch`, else torch bf16 on `device`."""
    if torch is None:
        rng = np.random.default_rng(seed)
        randn, bpp = (lambda *dims: rng.standard_normal(dims, dtype=np.float32)), 4
    else:
        gen = torch.Generator(device=torch.device(device)).manual_seed(seed)
        randn, bpp = (lambda *dims: torch.randn(*dims, dtype=torch.bfloat16, device=device, generator=gen)), 2
    weights = [randn(r, c) / math.sqrt(r) for r, c in shape.matrices()]
    d = shape.d_model

    def make(batch: int) -> Callable[[], Any]:
        x0 = randn(batch, d)

        def step() -> Any:
            x = x0
            for i in range(0, len(weights), 4):
                qkv, proj, up, down = weights[i:i + 4]
                h = x @ qkv
                h = h[:, :d] @ proj  # attention over a short context is left out: weights dominate
                x = (h @ up) @ down
            return x

        return step

    return make, bpp


def decode_sweep(shape: DecodeShape, batches: Sequence[int], device: str = "cpu",
                 repeats: int = 5, seed: int = 0, budget_s: float | None = None) -> list[SweepPoint]:
    """Median time of one decode step's weight GEMMs at each batch size: numpy float32 on "cpu",
    torch bf16 on "cuda" or "torch-cpu" (that path without a GPU); with `budget_s`, larger batches
    are skipped once the sweep has used that many seconds."""
    sizes = [int(b) for b in batches]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"batch sizes must be positive ints, got {list(batches)}")
    if device not in ("cpu", "cuda", "torch-cpu"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'torch-cpu', not {device!r}")
    torch = None
    if device == "cuda":
        torch = torch_cuda()
        if torch is None:
            raise RuntimeError("device='cuda' but torch sees no CUDA GPU")
    elif device == "torch-cpu":
        try:
            import torch  # optional [gpu] extra
        except ImportError:
            raise RuntimeError("device='torch-cpu' needs torch (the [gpu] extra)") from None
    make, bpp = _step_maker(shape, seed, torch, "cuda" if device == "cuda" else "cpu")
    timer = torch if device == "cuda" else None  # CUDA events time the GPU
    start = time.perf_counter()
    points = []
    for b in sizes:
        if budget_s is not None and points and time.perf_counter() - start > budget_s:
            break
        times = _timed(make(b), repeats, timer)
        sec = sorted(times)[len(times) // 2]
        p = shape.n_params
        points.append(SweepPoint(b, sec, b / sec, p * bpp / sec / 1e9, 2.0 * p * b / sec / 1e12))
    return points


def report(device: str = "auto", shape: DecodeShape | None = None,
           batches: Sequence[int] | None = None, quick: bool = False) -> dict[str, Any]:
    """Measure this machine and sweep decode; the dict the CLI prints as JSON."""
    if device == "auto":
        device = "cuda" if torch_cuda() is not None else "cpu"
    if device == "cuda":
        measured = measure_gpu(array_mb=256 if quick else 1024, matmul_n=4096 if quick else 8192)
        spec = spec_for(measured.name)
        shape = shape or GPU_SHAPE
        bpp = 2
        batches = list(batches or [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
    else:
        measured = measure_cpu(array_mb=64 if quick else 128, matmul_n=768 if quick else 1024)
        spec = None
        shape = shape or CPU_SHAPE
        bpp = 4
        batches = list(batches or ([1, 4, 16, 64, 128] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256]))
    points = decode_sweep(shape, batches, device=device, repeats=3 if quick else 7)
    ref = spec or measured
    rows = []
    for p in points:
        floor = roofline_time(p.batch, shape.n_params, bpp, ref.bandwidth, ref.peak_flops)
        rows.append({**asdict(p), "roofline_s": floor, "fraction_of_roofline": floor / p.seconds})
    knee = knee_batch([p.batch for p in points], [p.seconds for p in points])
    out: dict[str, Any] = {
        "device": device,
        "measured": measured.as_dict(),
        "spec": spec.as_dict() if spec else None,
        "shape": shape.as_dict(),
        "bytes_per_param": bpp,
        "weight_bytes": shape.n_params * bpp,
        "memory_floor_s": shape.n_params * bpp / ref.bandwidth,
        "ridge_batch": ridge_batch(ref.bandwidth, ref.peak_flops, bpp),
        "ridge_batch_measured_hw": ridge_batch(measured.bandwidth, measured.peak_flops, bpp),
        "knee_batch_measured": None if math.isinf(knee) else knee,
        "sweep": rows,
    }
    if device == "cuda":
        torch = torch_cuda()
        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print one JSON object with the measured roofline and the decode sweep."""
    p = argparse.ArgumentParser(prog="python -m batchlab.probe.roofline", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes")
    p.add_argument("--preset", choices=["default", "toy", "cpu", "gpu"], default="default",
                   help="decoder shape: the toy LM, the CPU-sized one, Llama-7B widths")
    p.add_argument("--quick", action="store_true", help="fewer repeats and batch sizes")
    args = p.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")] if args.batches else None
        shape = {"default": None, "toy": toy_shape(), "cpu": CPU_SHAPE, "gpu": GPU_SHAPE}[args.preset]
        out = report(args.device, shape, batches, args.quick)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
