"""Triton Python-backend model `embed`: stateless prefill + pooling, dynamic batching.

The code lives in `batchlab.models.embed` (shared by the course models, unit-tested).
"""

from batchlab.models.embed import TritonPythonModel  # noqa: F401
