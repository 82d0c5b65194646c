"""`initialize` shared by the course LM models: config, BLAS threads, the LM; the stateful ones' reaper."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from batchlab.lm import blas
from batchlab.lm.config import LMConfig
from batchlab.lm.model import ToyLM
from batchlab.models.triton_io import float_param, int_param, parameters, sequence_idle_seconds


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


class StatefulLMModelBase(LMModelBase):
    """Base of the models that keep a state per correlation id (`states`: id -> (state, last used)):
    a reaper frees those idle past `max_sequence_idle_microseconds` plus the `reap_margin_s`
    parameter (Triton sends no END for a sequence it times out)."""

    def initialize(self, args: dict) -> None:
        """`LMModelBase.initialize`, then the states, their lock and the reaper thread."""
        super().initialize(args)
        margin = float_param(self.params, "reap_margin_s", 0.5)
        self.reap_after = sequence_idle_seconds(self.model_config) + margin
        self.states: dict[int, tuple[Any, float]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.reaper = threading.Thread(target=self._reap_loop, name="kv-reaper", daemon=True)
        self.reaper.start()

    def _reap_loop(self) -> None:
        while not self.stop.wait(min(0.25, self.reap_after / 4)):
            self.reap(time.monotonic())

    def forget(self, state: Any) -> None:
        """Free what a dropped state holds (nothing by default: the cache goes with the state)."""

    def reap(self, now: float) -> int:
        """Free the states no execution touched for `reap_after` seconds; return how many."""
        with self.lock:
            dead = [c for c, (_, t) in self.states.items() if now - t > self.reap_after]
            for c in dead:
                self.forget(self.states.pop(c)[0])
        return len(dead)

    def finalize(self) -> None:
        """Stop the reaper and free every state."""
        self.stop.set()
        self.reaper.join(timeout=2)
        with self.lock:
            for state, _ in self.states.values():
                self.forget(state)
            self.states.clear()
