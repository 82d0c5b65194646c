"""batchlab.theory: the course's formulas, as pure functions of numbers (no server, no simulator).

* `formulas` — the article's six formulas (T_total, speedup S, padding efficiency η, heavy-load
  wait, Amdahl, cost per request) and the affine batch-time model t(B) = a + b·B they rest on;
* `queueing` — batch-service queues: Little's law for batches, the Poisson collection window of
  `max_queue_delay`, Bailey's embedded chain, the unbounded-batch latency (chapter 04);
* `padding` — η of request-level batching for any length distribution, exact and Monte Carlo;
* `kv` — KV-cache bytes per token, the table of model shapes, KV planning for a GPU;
* `roofline` — hardware spec sheets, ridge point, roofline time.

Everything here imports only `batchlab._validate`; every other layer may import it.
"""
