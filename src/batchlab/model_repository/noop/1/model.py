"""Triton Python-backend model `noop`: returns its input (client and server overhead).

The code lives in `batchlab.lm.triton_models.noop` (shared by the course models, unit-tested).
"""

from batchlab.lm.triton_models.noop import TritonPythonModel  # noqa: F401
