"""Triton Python-backend model `generate`: request-level (static) batched generation.

The code lives in `batchlab.models.generate` (shared by the course models, unit-tested).
"""

from batchlab.models.generate import TritonPythonModel  # noqa: F401
