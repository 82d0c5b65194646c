"""Triton Python-backend model `decode_nobatch` (decode without dynamic batching): stateless decode step over a fixed KV context (code in batchlab.models.decode)."""
from batchlab.models.decode import TritonPythonModel  # noqa: F401
