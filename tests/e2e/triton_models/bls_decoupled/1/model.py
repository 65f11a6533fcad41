"""BLS to a decoupled model: sums the responses repeat sends."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="repeat",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"],
            )
            total, count = 0, 0
            answers = list(call.exec(decoupled=True))
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is not None:
                    total += int(out.as_numpy()[0])
                    count += 1
            # As in Triton, the last response is an empty one: the final flag's.
            last_empty = not answers[-1].output_tensors()
            tensors = [
                pb_utils.Tensor("SUM", np.array([total], dtype=np.int32)),
                pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32)),
                pb_utils.Tensor("LAST_EMPTY", np.array([last_empty])),
            ]
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
