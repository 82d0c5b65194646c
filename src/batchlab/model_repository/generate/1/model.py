"""Triton Python-backend model `generate`: request-level (static) batched generation.

The code lives in `batchlab.lm.triton_models.generate` (shared by the course models, unit-tested).
"""

from batchlab.lm.triton_models.generate import TritonPythonModel  # noqa: F401
