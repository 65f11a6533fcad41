"""Decoupled: one response per element of IN, sent from a thread after execute
returned, then the final flag alone. An empty IN sends no response at all."""

import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("repeat must be decoupled")
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            thread = threading.Thread(target=self.send, args=(request, values))
            thread.start()
            self.threads.append(thread)
        return None

    def send(self, request, values):
        sender = request.get_response_sender()
        for value in values:
            if request.is_cancelled():
                break
            out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
