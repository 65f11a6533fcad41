"""An MLServer runtime that shows what reached it (copied into its model's folder).

``predict`` answers the request header ``x-tag`` (MLServer passes the headers in
``payload.parameters.headers``) as its output ``tag`` and sets the response header
``x-echo-tag`` to it; the custom route ``POST /tagged/tag`` answers ``{"tag": ...}``
from the same header. tests/integration/test_edges.py sends it the same request
through every entry point.
"""

from __future__ import annotations

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.handlers import custom_handler
from mlserver.types import InferenceRequest, InferenceResponse, Parameters


class Header:
    """FastAPI's ``Header`` marker, as inferd reads it (by its name and ``default``)."""

    def __init__(self, default: str = "") -> None:
        self.default = default


class Tagged(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        headers = (payload.parameters.headers if payload.parameters else None) or {}
        tag = headers.get("x-tag", "")
        return InferenceResponse(
            model_name=self.name,
            outputs=[StringCodec.encode_output("tag", [tag])],
            parameters=Parameters(headers={"x-echo-tag": tag}),
        )

    @custom_handler(rest_path="/tagged/tag", rest_method="POST")
    async def tag(self, x_tag: str = Header()) -> dict:  # type: ignore[assignment]
        return {"tag": x_tag}
