"""OUT = running sum of IN per sequence; START resets it, END forgets it."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        out = []
        for request in requests:
            x = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0] > 0
            end = pb_utils.get_input_tensor_by_name(request, "END").as_numpy().reshape(-1)[0] > 0
            cid = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0])
            total = (0 if start else self.sums.get(cid, 0)) + x
            if end:
                self.sums.pop(cid, None)
            else:
                self.sums[cid] = total
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([[total]], dtype=np.int64))]))
        return out
