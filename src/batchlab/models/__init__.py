"""The Python-backend model classes of the course model repository.

Each `model_repository/<name>/1/model.py` only imports its `TritonPythonModel` from here, so the
models share one LM, one validation layer and one set of tests. Modules: `embed` (embed and its
variants), `noop`, `generate` (request-level batching), `lm_step` (sequence batcher),
`lm_iterative` (Triton's iterative sequences), `lm_stream` (in-model continuous batching),
`decode` (stateless decode step over a fixed KV context: the weight-bound regime).
They import `triton_python_backend_utils` only through `batchlab.models.triton_io.pb()`.
"""
