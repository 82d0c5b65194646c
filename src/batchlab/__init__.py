"""batchlab: the course library of 一口锅推理批处理实验课.

Notebooks import from here instead of copying code: the batching mechanisms, each written once
(`batchlab.batching`: dynamic, slots, scheduler, blocks, policies, request, speculative), the
simulator that drives them (`batchlab.sim`), the toy LM and its continuous-batching engine
(`batchlab.lm`), the embedded Triton server (`batchlab.server`), the load generator
(`batchlab.load`), live measurements (`batchlab.probe`), one module per chapter's experiments
(`batchlab.course`), the lab checks (`batchlab.labs`), the quiz engine (`batchlab.quiz`) and the
plotting helpers (`batchlab.plotting`). README.md has the layer table.
"""

__version__ = "0.1.0"
