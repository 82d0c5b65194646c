"""Triton Python-backend model `decode`: stateless decode step over a fixed KV context (code in batchlab.models.decode)."""
from batchlab.models.decode import TritonPythonModel  # noqa: F401
