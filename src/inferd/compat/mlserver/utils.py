"""MLServer's ``mlserver.utils`` helpers that runtimes use."""

from __future__ import annotations

import os
import urllib.parse
import uuid
from typing import Any

from inferd.compat.mlserver.errors import InvalidModelURI
from inferd.compat.mlserver.types import InferenceRequest, InferenceResponse, Parameters


async def get_model_uri(settings: Any, wellknown_filenames: list[str] | None = None) -> str:
    """The model's artifact path: ``parameters.uri`` resolved against the folder of
    ``model-settings.json``; in a folder, the first of ``wellknown_filenames`` found
    there (else the folder). Non-file URIs (``s3://...``) are returned as they are."""
    parameters = settings.parameters
    uri = parameters.uri if parameters else None
    if not uri:
        raise InvalidModelURI(settings.name)
    parsed = urllib.parse.urlparse(uri, scheme="file")
    if parsed.scheme != "file":
        return uri
    path = to_absolute_path(settings, parsed.path)
    if os.path.isfile(path):
        return path
    if os.path.isdir(path):
        for filename in wellknown_filenames or []:
            candidate = os.path.join(path, filename)
            if os.path.isfile(candidate):
                return candidate
        return path
    raise InvalidModelURI(settings.name, path)


def to_absolute_path(settings: Any, uri: str) -> str:
    """``uri`` relative to the folder of the model's settings file."""
    if os.path.isabs(uri):
        return uri
    return os.path.normpath(os.path.join(str(settings.folder), uri))


def generate_uuid() -> str:
    return str(uuid.uuid4())


def insert_headers(request: InferenceRequest, headers: dict[str, str]) -> InferenceRequest:
    if request.parameters is None:
        request.parameters = Parameters()
    request.parameters.headers = headers
    return request


def extract_headers(response: InferenceResponse) -> dict[str, str] | None:
    """The response's ``parameters.headers``, taken out of the response."""
    if response.parameters is None or response.parameters.headers is None:
        return None
    headers = response.parameters.headers
    response.parameters.headers = None
    return headers
