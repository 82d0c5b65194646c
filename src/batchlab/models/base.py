"""`initialize` shared by the course LM models: config, BLAS threads, the LM."""

from __future__ import annotations

import json
from typing import Any

from batchlab.lm import blas
from batchlab.lm.config import LMConfig
from batchlab.lm.model import ToyLM
from batchlab.models.triton_io import int_param, parameters


class LMModelBase:
    """Base of the Python-backend model classes (not a model itself)."""

    def initialize(self, args: dict) -> None:
        """Read the config, set `blas_threads` (default 1) and build or reuse the LM; parameters
        `d_model` and `d_ff` (both or neither) build a wider one (the `decode` models)."""
        self.model_name: str = args.get("model_name", "?")
        self.model_config: dict[str, Any] = json.loads(args["model_config"])
        self.params = parameters(self.model_config)
        blas.set_num_threads(int_param(self.params, "blas_threads", 1, 1, 64))
        widths = [int_param(self.params, k, 0, 1, 4096) for k in ("d_model", "d_ff")]
        if any(widths) and not all(widths):
            raise ValueError("parameters d_model and d_ff go together: set both or neither")
        self.lm = ToyLM(LMConfig(d_model=widths[0], d_ff=widths[1])) if all(widths) else ToyLM.default()
        self.vocab_size = self.lm.config.vocab_size
        self.max_seq_len = self.lm.config.max_seq_len

    def input_dims(self, name: str) -> list[int]:
        """The `dims` of input `name` in the model config."""
        for item in self.model_config.get("input", []):
            if item.get("name") == name:
                return [int(d) for d in item.get("dims", [])]
        raise ValueError(f"model config has no input {name}")
