import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.config = json.loads(args["model_config"])
        out0 = pb_utils.get_output_config_by_name(self.config, "OUTPUT0")
        self.out0_dtype = pb_utils.triton_string_to_numpy(out0["data_type"])
        self.greeting = self.config["parameters"]["greeting"]["string_value"]
        pb_utils.Logger.log_info(f"add_sub initialized for {args['model_name']}")
        family = pb_utils.MetricFamily(
            name="add_sub_requests",
            description="Requests add_sub answered",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.requests = family.Metric(labels={"model": "add_sub", "version": "1"})
        sizes = pb_utils.MetricFamily(
            name="add_sub_batch",
            description="Requests per execute",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.batch = sizes.Metric(labels={"model": "add_sub"}, buckets=[1, 2, 4])

    def execute(self, requests):
        self.batch.observe(len(requests))
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if in0.shape != in1.shape:
                error = pb_utils.TritonError("INPUT0 and INPUT1 differ in shape")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.out0_dtype))
            # Declared FP32, answered INT32: a returned tensor keeps its own dtype.
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
            self.requests.increment(1)
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("add_sub finalized")
