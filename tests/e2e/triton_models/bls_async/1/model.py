"""Asynchronous BLS: two calls to add_sub at once; answers the sum of both OUTPUT0."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            calls = [
                pb_utils.InferenceRequest(
                    model_name="add_sub", inputs=inputs, requested_output_names=["OUTPUT0"]
                ).async_exec()
                for _ in range(2)
            ]
            answers = await asyncio.gather(*calls)
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            total = sum(
                pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
                for answer in answers
            )
            # A decoupled model, awaited: an iterator of its responses (the last empty).
            values = inputs[0].as_numpy().astype(np.int32)
            repeat = pb_utils.InferenceRequest(
                model_name="repeat",
                inputs=[pb_utils.Tensor("IN", values)],
                requested_output_names=["OUT"],
            )
            repeated = [a for a in await repeat.async_exec(decoupled=True) if a.output_tensors()]
            count = np.array([len(repeated)], dtype=np.int32)
            outputs = [pb_utils.Tensor("OUTPUT0", total), pb_utils.Tensor("REPEATED", count)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
