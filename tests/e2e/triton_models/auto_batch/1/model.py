"""No config.pbtxt: auto_complete_config says everything. Answers how many requests
each execute received (every request of a dynamic batch arrives at once)."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.add_output(
            {"name": "REQUESTS", "data_type": "TYPE_INT64", "dims": [1]}
        )
        auto_complete_model_config.set_max_batch_size(16)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    async def execute(self, requests):
        await asyncio.sleep(0.2)  # lets the next requests gather into one batch
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            count = np.full((x.shape[0], 1), len(requests), dtype=np.int64)
            outputs = [pb_utils.Tensor("Y", x * 10), pb_utils.Tensor("REQUESTS", count)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
