"""The course's headline benchmarks, each a bounded script that prints one JSON object:
``python -m batchlab.bench dynamic|continuous|fidelity|client`` (``--help`` describes each).
"""
