"""MLServer's ``mlserver.errors``: an error with the HTTP status the client gets.

inferd turns an ``MLServerError`` raised by a runtime into a
:class:`~inferd.errors.StatusError` with the same message and status.
"""

from __future__ import annotations


class MLServerError(Exception):
    def __init__(self, msg: str, status_code: int = 400) -> None:
        super().__init__(msg)
        self.status_code = status_code


class InvalidModelURI(MLServerError):
    def __init__(self, name: str, model_uri: str | None = None) -> None:
        msg = f"Invalid URI specified for model {name}"
        if model_uri:
            msg += f" ({model_uri})"
        super().__init__(msg, 422)


def _model(name: str, version: str | None) -> str:
    return f"Model {name}" if version is None else f"Model {name} with version {version}"


class ModelNotFound(MLServerError):
    def __init__(self, name: str, version: str | None = None) -> None:
        super().__init__(f"{_model(name, version)} not found", 404)


class ModelNotReady(MLServerError):
    def __init__(self, name: str, version: str | None = None) -> None:
        super().__init__(f"{_model(name, version)} is not ready yet.", 400)


class InferenceError(MLServerError):
    def __init__(self, msg: str) -> None:
        super().__init__(msg, 400)


class ModelParametersMissing(MLServerError):
    def __init__(self, model_name: str) -> None:
        super().__init__(f"Parameters missing for model {model_name}", 400)
