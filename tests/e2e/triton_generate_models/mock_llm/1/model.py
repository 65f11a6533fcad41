"""Echoes PROMPT as TEXT: once, or with STREAM true REPETITION times (DELAY seconds
apart), then a final flag, or an error in its place with FAIL_LAST. The request
parameters say REPETITION, DELAY and FAIL_LAST; input_ids (optional) is not read."""

import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            self._answer(request)
        return None

    def _answer(self, request):
        settings = json.loads(request.parameters())
        prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
        stream = bool(pb_utils.get_input_tensor_by_name(request, "STREAM").as_numpy().flat[0])
        sender = request.get_response_sender()
        text = pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", prompt)])
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not stream:
            sender.send(text, flags=final)
            return
        for _ in range(settings.get("REPETITION", 1)):
            if settings.get("DELAY") is not None:
                time.sleep(settings["DELAY"])
            if sender.is_cancelled():
                break
            sender.send(text)
        last = None
        if settings.get("FAIL_LAST"):
            last = pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred"))
        sender.send(last, flags=final)
