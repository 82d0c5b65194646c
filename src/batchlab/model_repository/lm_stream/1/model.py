"""Triton Python-backend model `lm_stream`: continuous batching inside the model (vLLM / TRT-LLM style).

The code lives in `batchlab.models.lm_stream` (shared by the course models, unit-tested).
"""

from batchlab.models.lm_stream import TritonPythonModel  # noqa: F401
