"""The decode roofline: a decode step at batch B reads every weight once (P parameters, s bytes each)
and does 2·P·B FLOP, so t(B) >= max(P·s / BW, 2·P·B / F); compute-bound from B* = (F/BW) · s / 2.
Spec-sheet hardware, decoder shapes and `knee_batch`; the measurements are `batchlab.probe.roofline`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from batchlab._validate import count, positive


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


def ridge_point(bandwidth: float, peak_flops: float) -> float:
    """FLOP/byte at the ridge: peak FLOP/s divided by bandwidth in bytes/s."""
    return positive("peak_flops", peak_flops) / positive("bandwidth", bandwidth)


def ridge_batch(bandwidth: float, peak_flops: float, bytes_per_param: float) -> float:
    """Batch size at which decode's intensity reaches the ridge: ridge · s / 2."""
    return ridge_point(bandwidth, peak_flops) * positive("bytes_per_param", bytes_per_param) / 2.0


def roofline_time(batch: float, n_params: float, bytes_per_param: float,
                  bandwidth: float, peak_flops: float) -> float:
    """Lower bound on one decode step: max(weight bytes / BW, 2·P·B / F) seconds."""
    p = positive("n_params", n_params)
    memory = p * positive("bytes_per_param", bytes_per_param) / positive("bandwidth", bandwidth)
    compute = 2.0 * p * positive("batch", batch) / positive("peak_flops", peak_flops)
    return max(memory, compute)


@dataclass(frozen=True)
class DecodeShape:
    """The weight matrices of a decoder stack: per layer qkv (d×3d), proj (d×d), up, down."""

    name: str
    d_model: int
    d_ff: int
    n_layers: int

    def __post_init__(self) -> None:
        for f in ("d_model", "d_ff", "n_layers"):
            count(f"DecodeShape.{f}", getattr(self, f))

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


#: ~25 M float32 weights (100 MB): larger than any CPU cache, small enough for a 2-core laptop.
CPU_SHAPE = DecodeShape("CPU-sized decoder (d=1024)", 1024, 4096, 2)
#: Llama-7B layer widths, 4 layers: ~0.63 G weights, 1.26 GB in bf16.
GPU_SHAPE = DecodeShape("Llama-7B widths, 4 layers", 4096, 11008, 4)


def knee_batch(batches: Sequence[float], seconds: Sequence[float], tail: int = 3) -> float:
    """Where the measured curve leaves its floor: t(smallest batch) / c, c the least-squares slope
    through the `tail` largest batches (a/c for t(B) = max(a, c·B) or a + c·B); infinity when the
    tail does not rise or the knee lies beyond the largest batch."""
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
