"""Triton Python-backend model `lm_step`: one decode step per request, sequence batcher (direct).

The code lives in `batchlab.models.lm_step` (shared by the course models, unit-tested).
"""

from batchlab.models.lm_step import TritonPythonModel  # noqa: F401
