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


class ModelNotFound(MLServerError):
    def __init__(self, name: str, version: str | None = None) -> None:
        if version is None:
            super().__init__(f"Model {name} not found", 404)
        else:
            super().__init__(f"Model {name} with version {version} not found", 404)


class ModelNotReady(MLServerError):
    def __init__(self, name: str, version: str | None = None) -> None:
        if version is None:
            super().__init__(f"Model {name} is not ready yet.", 400)
        else:
            super().__init__(f"Model {name} with version {version} is not ready yet.", 400)


class InferenceError(MLServerError):
    def __init__(self, msg: str) -> None:
        super().__init__(msg, 400)


class ModelParametersMissing(MLServerError):
    def __init__(self, model_name: str) -> None:
        super().__init__(f"Parameters missing for model {model_name}", 400)
