"""The Python-backend model classes of the course model repository (each
`model_repository/<name>/1/model.py` imports its `TritonPythonModel` from here) and their request builders.
"""
