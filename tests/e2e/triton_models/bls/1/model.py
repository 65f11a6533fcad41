"""Synchronous BLS: calls the model named in MODEL_NAME with exec()."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            # The name as bytes, as Triton's own BLS example passes it.
            call = pb_utils.InferenceRequest(
                model_name=name, inputs=inputs, requested_output_names=["OUTPUT0"]
            )
            answer = call.exec()
            if answer.has_error():
                pb_utils.Logger.log_warn(
                    f"bls: the call failed (code {answer.error().code()}): "
                    f"{answer.error().message()}; cancelled: {request.is_cancelled()}"
                )
                error = np.array([answer.error().message().encode()], dtype=np.object_)
                out = np.zeros(4, dtype=np.float32)
            else:
                error = np.array([b""], dtype=np.object_)
                out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            tensors = [pb_utils.Tensor("OUTPUT0", out), pb_utils.Tensor("ERROR", error)]
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
