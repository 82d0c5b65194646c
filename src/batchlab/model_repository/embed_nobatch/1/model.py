"""Triton Python-backend model `embed_nobatch`: the embed model without dynamic batching.

The code lives in `batchlab.models.embed` (shared by the course models, unit-tested).
"""

from batchlab.models.embed import TritonPythonModel  # noqa: F401
