"""Triton Python-backend model `embed_queue`: the embed model with a bounded queue (overload tests).

The code lives in `batchlab.models.embed` (shared by the course models, unit-tested).
"""

from batchlab.models.embed import TritonPythonModel  # noqa: F401
