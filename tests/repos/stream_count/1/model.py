"""Streams N responses TOKEN = START, START+1, ..., GAP_MS apart, then closes the request.

N < 0 answers with an error instead. Each request runs on its own thread, so many requests
stream at once (like Triton's decoupled `repeat` example).
"""
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self._threads = []

    def _stream(self, sender, n, start, gap):
        for k in range(n):
            if gap > 0:
                time.sleep(gap)
            out = pb_utils.Tensor("TOKEN", np.array([start + k], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy()[0])
            gap = float(pb_utils.get_input_tensor_by_name(request, "GAP_MS").as_numpy()[0]) / 1000
            sender = request.get_response_sender()
            if n < 0:
                err = pb_utils.TritonError(f"N must be >= 0, got {n}")
                sender.send(pb_utils.InferenceResponse(error=err),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            t = threading.Thread(target=self._stream, args=(sender, n, start, gap), daemon=True)
            t.start()
            self._threads.append(t)
            self._threads = [x for x in self._threads if x.is_alive()]
        return None

    def finalize(self):
        for t in self._threads:
            t.join(timeout=5)
