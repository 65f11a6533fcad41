"""A Triton Python-backend model (``model.py``) answering each input as an output of
the same name: its config.pbtxt, written by the test, declares what it takes."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor(tensor.name(), tensor.as_numpy()) for tensor in request.inputs()]
            )
            for request in requests
        ]
