"""The course's headline benchmarks, each a bounded script that prints one JSON object.

``python -m batchlab.bench dynamic``      decode and embed without / with dynamic batching (speedup, p95, ceilings)
``python -m batchlab.bench continuous``   request-level (static) vs continuous batching (lm_iterative, lm_stream;
                                          lm_step with --lm-step), interleaved rounds, median speedup
``python -m batchlab.bench fidelity``     the simulator's predictions against the real server, each load measured
                                          twice: embed (dynamic batcher) and lm_stream (continuous batching)
``python -m batchlab.bench client``       the load generator's own capacity (it must not be the bottleneck)
"""
