"""The course's headline benchmarks, each a bounded script that prints one JSON object.

``python -m batchlab.bench dynamic``     embed without / with dynamic batching (speedup, p95)
``python -m batchlab.bench continuous``  request-level vs sequence vs iterative vs in-model continuous batching
``python -m batchlab.bench fidelity``    the simulator's predictions against the real server
``python -m batchlab.bench client``      the load generator's own capacity (it must not be the bottleneck)
"""
