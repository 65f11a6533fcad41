"""MLflow's scoring-server routes on an MLflow model, as MLServer's MLflow runtime
serves them: ``POST /invocations`` (JSON ``dataframe_split`` / ``dataframe_records``
/ ``instances`` / ``inputs`` with optional ``params``, or CSV), ``GET /ping``,
``GET /health`` and ``GET /version``. They are custom routes (custom_calls.py):
the REST server sends them to the model's instance, in a worker too.
"""

from __future__ import annotations

import io
import json
from typing import Any

from inferd.custom_calls import HandlerCall, handler_response
from inferd.errors import InvalidRequest
from inferd.types import InferenceResponse

ROUTES = (
    ("POST", "/invocations", "invocations"),
    ("GET", "/ping", "ping"),
    ("GET", "/health", "health"),
    ("GET", "/version", "version"),
)


def answer(call: HandlerCall, pyfunc_model: Any) -> InferenceResponse:
    """The answer to one of ROUTES' handlers."""
    if call.handler in ("ping", "health"):
        return handler_response(json.dumps("\n").encode())
    if call.handler == "version":
        from mlflow.version import VERSION

        return handler_response(json.dumps(VERSION).encode())
    if call.handler == "invocations":
        return _invocations(call, pyfunc_model)
    raise InvalidRequest(f"No MLflow route {call.handler!r}")


def _invocations(call: HandlerCall, pyfunc_model: Any) -> InferenceResponse:
    from mlflow.exceptions import MlflowException
    from mlflow.pyfunc import scoring_server

    mime_type, charset = _content_type(call.headers.get("content-type", ""))
    if charset != "utf-8":
        raise InvalidRequest("The scoring server only supports UTF-8")
    body = call.body.decode("utf-8")
    schema = pyfunc_model.metadata.get_input_schema()
    params = None
    try:
        if mime_type == scoring_server.CONTENT_TYPE_CSV:
            data = scoring_server.parse_csv_input(csv_input=io.StringIO(body), schema=schema)
        elif mime_type == scoring_server.CONTENT_TYPE_JSON:
            raw, params = scoring_server._split_data_and_params(body)
            data = scoring_server.infer_and_parse_data(raw, schema)
        else:
            raise InvalidRequest(
                "This predictor only supports the following content types, "
                f"{scoring_server.CONTENT_TYPES}. Got '{mime_type}'."
            )
        predictions = pyfunc_model.predict(data, params=params)
    except MlflowException as error:
        raise InvalidRequest(error.message) from error
    out = io.StringIO()
    scoring_server.predictions_to_json(predictions, out)
    return handler_response(out.getvalue().encode())


def _content_type(header: str) -> tuple[str, str]:
    """The media type and charset (default utf-8) of a Content-Type header."""
    mime_type, *parameters = (part.strip() for part in header.split(";"))
    charset = "utf-8"
    for parameter in parameters:
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().lower()
        elif key.strip():
            raise InvalidRequest(f"Unrecognized content type parameters: {key.strip()}.")
    return mime_type, charset
