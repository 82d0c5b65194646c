"""Y = 2·X after sleeping DELAY_MS per execution (a slow model with a small queue)."""
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.delay = float(params.get("DELAY_MS", {}).get("string_value", "20")) / 1000

    def execute(self, requests):
        time.sleep(self.delay)
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2.0)]))
        return out
