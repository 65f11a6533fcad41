"""Asynchronous BLS: two calls to add_sub at once; answers the sum of both OUTPUT0."""

import asyncio

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
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
        return responses
