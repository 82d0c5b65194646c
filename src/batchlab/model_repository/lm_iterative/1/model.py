"""Triton Python-backend model `lm_iterative`: Triton's iterative sequence scheduling (continuous batching).

The code lives in `batchlab.models.lm_iterative` (shared by the course models, unit-tested).
"""

from batchlab.models.lm_iterative import TritonPythonModel  # noqa: F401
