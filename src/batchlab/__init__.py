"""batchlab: the course library of 一口锅推理批处理实验课.

Notebooks import from here instead of copying code: the simulator (`batchlab.sim`), the toy LM
(`batchlab.lm`), the embedded Triton server (`batchlab.server`), the load generator
(`batchlab.load`), the quiz engine (`batchlab.quiz`) and the plotting helpers
(`batchlab.plotting`).
"""

__version__ = "0.1.0"
