import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            time.sleep(float(in0[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in0 + in1)]))
        return responses
