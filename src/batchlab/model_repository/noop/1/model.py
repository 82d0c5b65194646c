"""Triton Python-backend model `noop`: returns its input (client and server overhead).

The code lives in `batchlab.models.noop` (shared by the course models, unit-tested).
"""

from batchlab.models.noop import TritonPythonModel  # noqa: F401
