"""A stateful Triton Python-backend model (``model.py``): OUTPUT is the running sum
of INPUT over the request's sequence (its correlation id) in this process, which
fails a request of a sequence this instance never started; PID says which process
answered."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        return [self._step(request) for request in requests]

    def _step(self, request):
        sequence = request.correlation_id()
        value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0])
        if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
            self.totals[sequence] = 0
        elif sequence not in self.totals:
            error = pb_utils.TritonError(f"sequence {sequence} was not started on this instance")
            return pb_utils.InferenceResponse(error=error)
        self.totals[sequence] += value
        total = pb_utils.Tensor("OUTPUT", np.array([self.totals[sequence]], dtype=np.int32))
        pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
        return pb_utils.InferenceResponse([total, pid])
