"""Triton Python-backend model `embed`: stateless prefill + pooling, dynamic batching.

The code lives in `batchlab.lm.triton_models.embed` (shared by the course models, unit-tested).
"""

from batchlab.lm.triton_models.embed import TritonPythonModel  # noqa: F401
