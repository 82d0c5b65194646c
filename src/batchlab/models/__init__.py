"""The Python-backend model classes of the course model repository.

Each `model_repository/<name>/1/model.py` imports its `TritonPythonModel` from here: `embed`
(and variants), `noop`, `generate`, `lm_step`, `lm_iterative`, `lm_stream`, `decode`; shared
parts in `base`, `triton_io`, `_gen_inputs`; client-side inputs in `requests`.
"""
