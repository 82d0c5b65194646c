"""Triton Python-backend model `embed_delay`: the embed model with a queue delay and preferred batch sizes.

The code lives in `batchlab.models.embed` (shared by the course models, unit-tested).
"""

from batchlab.models.embed import TritonPythonModel  # noqa: F401
