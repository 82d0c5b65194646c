"""The decode roofline: measured decode-step time against the weight-bandwidth floor.

One decode step of a decoder-only LM at batch B reads every weight once and does about
2 FLOP per weight per sequence, so

    t(B) >= max(W·s / BW, 2·P·B / F)        (P parameters, s bytes each, W·s = P·s bytes)

Arithmetic intensity is 2·B/s FLOP per byte; decode turns compute-bound when it reaches the
ridge F/BW, i.e. at B* = ridge · s / 2 (bf16: B* = ridge; float32: B* = 2·ridge).

This module measures both sides on the machine it runs on:

* `measure_cpu()` — memory bandwidth (a numpy copy of a large array) and peak FLOP/s (a
  numpy float32 matmul) of this CPU; `measure_gpu()` the same on a CUDA GPU through torch;
* `decode_sweep(shape, batches)` — the weight GEMMs of one decode step at each batch size:
  numpy float32 on CPU, torch bf16 on CUDA when torch and a GPU are present (torch is the
  optional ``[gpu]`` extra; nothing here needs it on CPU);
* `knee_batch(batches, seconds)` — the batch size where the measured curve turns from flat
  (memory-bound) to linear (compute-bound).

Headless, for a GPU machine::

    python -m batchlab.theory.roofline --device cuda        # prints one JSON object
    python -m batchlab.theory.roofline --device cpu --quick
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


# --------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class Hardware:
    """Peak memory bandwidth (bytes/s) and peak dense FLOP/s of one device, for one dtype."""

    name: str
    bandwidth: float
    peak_flops: float
    dtype: str = "bf16"
    source: str = "spec sheet"

    @property
    def ridge(self) -> float:
        """FLOP per byte where the roofline's two roofs meet."""
        return ridge_point(self.bandwidth, self.peak_flops)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields plus the ridge."""
        return {**asdict(self), "ridge_flop_per_byte": self.ridge}


#: NVIDIA spec sheets (dense, no sparsity). H100 SXM5 80 GB and H200 SXM 141 GB share the compute.
H100_SXM = Hardware("NVIDIA H100 SXM", 3.35e12, 989e12, "bf16", "NVIDIA H100 datasheet")
H200 = Hardware("NVIDIA H200", 4.8e12, 989e12, "bf16", "NVIDIA H200 datasheet")
H100_PCIE = Hardware("NVIDIA H100 PCIe", 2.0e12, 756e12, "bf16", "NVIDIA H100 datasheet")
A100_SXM = Hardware("NVIDIA A100 SXM 80GB", 2.039e12, 312e12, "bf16", "NVIDIA A100 datasheet")
KNOWN_GPUS = (H200, H100_PCIE, H100_SXM, A100_SXM)

BYTES_PER_PARAM = {"float32": 4, "fp32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2,
                   "int8": 1, "fp8": 1}


def spec_for(gpu_name: str) -> Hardware | None:
    """The spec-sheet `Hardware` matching a CUDA device name, or None."""
    n = gpu_name.upper()
    if "H200" in n:
        return H200
    if "H100" in n:
        return H100_PCIE if "PCIE" in n else H100_SXM
    if "A100" in n and "80" in n:
        return A100_SXM
    return None


def _positive(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return v


def ridge_point(bandwidth: float, peak_flops: float) -> float:
    """FLOP/byte at the ridge: peak FLOP/s divided by bandwidth in bytes/s."""
    return _positive("peak_flops", peak_flops) / _positive("bandwidth", bandwidth)


def decode_intensity(batch: float, bytes_per_param: float) -> float:
    """FLOP per weight byte of a decode step at `batch` (2 FLOP per weight per sequence)."""
    return 2.0 * _positive("batch", batch) / _positive("bytes_per_param", bytes_per_param)


def ridge_batch(bandwidth: float, peak_flops: float, bytes_per_param: float) -> float:
    """Batch size at which decode's intensity reaches the ridge: ridge · s / 2."""
    return ridge_point(bandwidth, peak_flops) * _positive("bytes_per_param", bytes_per_param) / 2.0


def roofline_time(batch: float, n_params: float, bytes_per_param: float,
                  bandwidth: float, peak_flops: float) -> float:
    """Lower bound on one decode step: max(weight bytes / BW, 2·P·B / F) seconds."""
    p = _positive("n_params", n_params)
    memory = p * _positive("bytes_per_param", bytes_per_param) / _positive("bandwidth", bandwidth)
    compute = 2.0 * p * _positive("batch", batch) / _positive("peak_flops", peak_flops)
    return max(memory, compute)


# --------------------------------------------------------------------------- model shapes


@dataclass(frozen=True)
class DecodeShape:
    """The weight matrices of a decoder stack: per layer qkv (d×3d), proj (d×d), up, down."""

    name: str
    d_model: int
    d_ff: int
    n_layers: int

    def __post_init__(self) -> None:
        for f in ("d_model", "d_ff", "n_layers"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"DecodeShape.{f} must be a positive int, got {v!r}")

    def matrices(self) -> list[tuple[int, int]]:
        """(rows, cols) of every weight GEMM of one step, in order."""
        d, f = self.d_model, self.d_ff
        return [(d, 3 * d), (d, d), (d, f), (f, d)] * self.n_layers

    @property
    def n_params(self) -> int:
        """Weights read per step."""
        return sum(r * c for r, c in self.matrices())

    def as_dict(self) -> dict[str, Any]:
        """Fields plus the parameter count."""
        return {**asdict(self), "n_params": self.n_params}


def toy_shape() -> DecodeShape:
    """The course LM's layer widths (`batchlab.lm.LMConfig` defaults)."""
    from batchlab.lm.config import LMConfig

    c = LMConfig()
    return DecodeShape("toy LM (batchlab.lm)", c.d_model, c.d_ff, c.n_layers)


#: ~25 M float32 weights (100 MB): larger than any CPU cache, small enough for a 2-core laptop.
CPU_SHAPE = DecodeShape("CPU-sized decoder (d=1024)", 1024, 4096, 2)
#: Llama-7B layer widths, 4 layers: ~0.63 G weights, 1.26 GB in bf16.
GPU_SHAPE = DecodeShape("Llama-7B widths, 4 layers", 4096, 11008, 4)


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
    import numpy as np

    n = int(_positive("array_mb", array_mb) * 2**20 // 8)
    a = np.ones(n, dtype=np.float32)
    b = np.ones(n, dtype=np.float32)
    a.dot(b)
    read = 2 * a.nbytes / _best(lambda: a.dot(b), repeats)
    copy = 2 * a.nbytes / _best(lambda: np.copyto(b, a), repeats)
    bandwidth = max(read, copy)
    a = b = None  # free the buffers before the matmul
    m = int(_positive("matmul_n", matmul_n))
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
        import torch
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
    import numpy as np

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
            import torch as torch_mod
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


def knee_batch(batches: Sequence[float], seconds: Sequence[float], tail: int = 3) -> float:
    """Where the measured curve leaves its floor: t_min / c.

    t_min is the time at the smallest batch (the memory-bound floor); c is the least-squares
    slope (seconds per sequence) of a straight line through the `tail` largest batches. For
    t(B) = max(a, c·B) or a + c·B this gives a/c. If the tail does not rise (c <= 0), or the
    knee lies beyond the largest batch measured (still memory-bound there), returns infinity.
    """
    x = [float(b) for b in batches]
    y = [float(s) for s in seconds]
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("knee_batch needs at least two (batch, seconds) pairs of equal length")
    if min(x) <= 0 or min(y) <= 0:
        raise ValueError("batches and seconds must be positive")
    order = sorted(range(len(x)), key=lambda i: x[i])
    x, y = [x[i] for i in order], [y[i] for i in order]
    k = max(2, min(tail, len(x)))
    tx, ty = x[-k:], y[-k:]
    mx, my = sum(tx) / k, sum(ty) / k
    var = sum((a - mx) ** 2 for a in tx)
    if var == 0:
        raise ValueError("the largest batches must differ to fit a slope")
    c = sum((a - mx) * (b - my) for a, b in zip(tx, ty)) / var
    if c <= 0:
        return math.inf
    knee = y[0] / c
    if knee >= x[-1] * 0.999:
        return math.inf
    return max(knee, x[0])


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
    p = argparse.ArgumentParser(prog="python -m batchlab.theory.roofline", description=__doc__.splitlines()[0])
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
