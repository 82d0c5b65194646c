"""The decode roofline measured: `measure_cpu` / `measure_gpu` (bandwidth and peak FLOP/s),
`decode_sweep` (the weight GEMMs of one decode step per batch size: numpy on CPU, torch bf16 on
CUDA when the optional ``[gpu]`` extra is installed) and `report` (both, with the knee of the
measured curve). The bound itself is `batchlab.theory.roofline`.

    python -m batchlab.probe.roofline --device cuda        # prints one JSON object
    python -m batchlab.probe.roofline --device cpu --quick
"""

from __future__ import annotations

import argparse
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


# --------------------------------------------------------------------------- shapes


def toy_shape() -> DecodeShape:
    """The course LM's layer widths (`batchlab.lm.LMConfig` defaults)."""
    c = LMConfig()
    return DecodeShape("toy LM (batchlab.lm)", c.d_model, c.d_ff, c.n_layers)


# --------------------------------------------------------------------------- measuring


def _best(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure_cpu(array_mb: int = 128, matmul_n: int = 1024, repeats: int = 5) -> Hardware:
    """Read bandwidth and float32 matmul FLOP/s of this CPU, measured with numpy.

    Bandwidth: the faster of a dot product of two arrays of `array_mb` MiB in total (bytes read)
    and a copy (bytes read + written) — decode only reads its weights. Peak: the best of
    `repeats` `matmul_n`-square float32 matmuls (BLAS on every core numpy uses).
    """
    n = int(positive("array_mb", array_mb) * 2**20 // 8)
    a = np.ones(n, dtype=np.float32)
    b = np.ones(n, dtype=np.float32)
    a.dot(b)
    read = 2 * a.nbytes / _best(lambda: a.dot(b), repeats)
    copy = 2 * a.nbytes / _best(lambda: np.copyto(b, a), repeats)
    bandwidth = max(read, copy)
    a = b = None  # free the buffers before the matmul
    m = int(positive("matmul_n", matmul_n))
    x = np.random.default_rng(0).standard_normal((m, m), dtype=np.float32)
    y = np.random.default_rng(1).standard_normal((m, m), dtype=np.float32)
    x @ y
    t = _best(lambda: x @ y, repeats)
    flops = 2.0 * m**3 / t
    cores = os.cpu_count() or 1
    return Hardware(f"{cpu_name()} ({cores} cores)", bandwidth, flops, "float32", "measured here")


def torch_cuda() -> Any | None:
    """The torch module when it is installed and sees a CUDA GPU, else None."""
    try:
        import torch  # optional [gpu] extra: absent on CPU-only installs
    except ImportError:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:  # a broken driver install: treat as no GPU
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

    def timed(fn: Callable[[], None]) -> float:
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeats):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(stop) / 1e3)
        return best

    bandwidth = 2 * a.numel() * 2 / timed(lambda: b.copy_(a))
    a = b = None  # free the buffers before the matmul
    x = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=dev)
    y = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=dev)
    flops = 2.0 * matmul_n**3 / timed(lambda: torch.matmul(x, y))
    return Hardware(torch.cuda.get_device_name(0), bandwidth, flops, "bf16", "measured here")


@dataclass
class SweepPoint:
    """One batch size of a decode sweep."""

    batch: int
    seconds: float
    tokens_per_s: float
    weight_gbps: float
    tflops: float


def _numpy_step(shape: DecodeShape, seed: int) -> tuple[Callable[[int], Callable[[], Any]], int]:
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal((r, c), dtype=np.float32) * np.float32(1 / math.sqrt(r))
               for r, c in shape.matrices()]
    d = shape.d_model

    def make(batch: int) -> Callable[[], Any]:
        x0 = rng.standard_normal((batch, d), dtype=np.float32)

        def step() -> Any:
            x = x0
            for i in range(0, len(weights), 4):
                qkv, proj, up, down = weights[i:i + 4]
                h = x @ qkv
                h = h[:, :d] @ proj  # attention over a short context is left out: weights dominate
                x = (h @ up) @ down
            return x

        return step

    return make, 4


def _torch_step(shape: DecodeShape, seed: int, torch: Any, device: str = "cuda"
                ) -> tuple[Callable[[int], Callable[[], Any]], int]:
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    dtype = torch.bfloat16
    weights = [torch.randn(r, c, dtype=dtype, device=dev, generator=gen) / math.sqrt(r)
               for r, c in shape.matrices()]
    d = shape.d_model

    def make(batch: int) -> Callable[[], Any]:
        x0 = torch.randn(batch, d, dtype=dtype, device=dev, generator=gen)

        def step() -> Any:
            x = x0
            for i in range(0, len(weights), 4):
                qkv, proj, up, down = weights[i:i + 4]
                h = x @ qkv
                h = h[:, :d] @ proj
                x = (h @ up) @ down
            return x

        return step

    return make, 2


def decode_sweep(shape: DecodeShape, batches: Sequence[int], device: str = "cpu",
                 repeats: int = 5, seed: int = 0, budget_s: float | None = None) -> list[SweepPoint]:
    """Median time of one decode step's weight GEMMs at each batch size.

    `device` "cpu" runs numpy float32; "cuda" runs torch bf16 on the GPU (timed with CUDA events,
    after a warm-up); "torch-cpu" runs the torch bf16 code on the CPU (to test that path without
    a GPU). With `budget_s`, larger batches are skipped once the sweep has used that many seconds.
    """
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
        make, bpp = _torch_step(shape, seed, torch, "cuda")
    elif device == "torch-cpu":
        try:
            import torch as torch_mod  # optional [gpu] extra
        except ImportError:
            raise RuntimeError("device='torch-cpu' needs torch (the [gpu] extra)") from None
        make, bpp = _torch_step(shape, seed, torch_mod, "cpu")
    else:
        make, bpp = _numpy_step(shape, seed)
    start = time.perf_counter()
    points = []
    for b in sizes:
        if budget_s is not None and points and time.perf_counter() - start > budget_s:
            break
        step = make(b)
        step()  # warm-up
        if torch is not None:
            torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            if torch is not None:
                ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ev0.record()
                step()
                ev1.record()
                torch.cuda.synchronize()
                times.append(ev0.elapsed_time(ev1) / 1e3)
            else:
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
        sec = sorted(times)[len(times) // 2]
        p = shape.n_params
        points.append(SweepPoint(b, sec, b / sec, p * bpp / sec / 1e9, 2.0 * p * b / sec / 1e12))
    return points


# --------------------------------------------------------------------------- report


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
