"""Triton Python-backend model `embed_2inst`: the embed model with two instances.

The code lives in `batchlab.models.embed` (shared by the course models, unit-tested).
"""

from batchlab.models.embed import TritonPythonModel  # noqa: F401
