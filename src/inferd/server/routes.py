"""Every route of the V2 REST API, declared once.

Starlette's routing (server/rest/api.py), the fast inference path in front of it
(server/rest/fastpath.py), the ``path`` label of the REST metrics (the template of
the route a request matched) and the OpenAPI document (server/docs/openapi.py) all
read :data:`API_ROUTES`, so a route cannot be served without being documented
and counted, or documented without being served. Each route also names its API
group, which decides who may call it (``restricted_apis``, server/access.py).
"""

from __future__ import annotations

from dataclasses import dataclass

SPEC_FILE = "dataplane.json"
ASSETS_PATH = "/v2/docs/static"
# The Swagger UI files served under ASSETS_PATH (server/docs/pages.py), with their media types.
ASSET_TYPES = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
MODEL_PREFIX = "/v2/models/{name}"
VERSION_PREFIX = "/v2/models/{name}/versions/{version}"
# The operationId of a route under VERSION_PREFIX is its twin's plus this.
VERSION_SUFFIX = "_version"
# The API groups the routes belong to (restricted_apis names them).
HEALTH, METADATA, INFERENCE = "health", "metadata", "inference"
STATISTICS, MODEL_REPOSITORY = "statistics", "model_repository"
SHARED_MEMORY = "shared_memory"
MODEL_CONFIG, LOGGING, TRACE = "model_config", "logging", "trace"


@dataclass(frozen=True, slots=True)
class ApiRoute:
    method: str
    path: str  # a Starlette path template: the metrics' path label
    operation_id: str  # in the OpenAPI document, unique
    # What answers it: "infer", "infer_stream", "generate" and "generate_stream" are
    # ASGI endpoints of their own (server/rest/fastpath.py, server/rest/streaming.py);
    # any other names a method of RestEndpoints / DocsEndpoints.
    handler: str
    # Its API group (settings/security.py API_GROUPS), as Triton groups its routes.
    api: str

    @property
    def operation(self) -> str:
        """Which operation it documents: the operationId of a route and of its
        per-version twin name the same one."""
        return self.operation_id.removesuffix(VERSION_SUFFIX)


def _model_routes(prefix: str, suffix: str) -> tuple[ApiRoute, ...]:
    """The routes of one model, or (under VERSION_PREFIX) of one of its versions."""
    return (
        ApiRoute("GET", prefix, f"model_metadata{suffix}", "model_metadata", METADATA),
        ApiRoute("GET", f"{prefix}/ready", f"model_ready{suffix}", "model_ready", HEALTH),
        ApiRoute("POST", f"{prefix}/infer", f"model_infer{suffix}", "infer", INFERENCE),
        ApiRoute(
            "POST",
            f"{prefix}/infer_stream",
            f"model_infer_stream{suffix}",
            "infer_stream",
            INFERENCE,
        ),
        ApiRoute("POST", f"{prefix}/generate", f"model_generate{suffix}", "generate", INFERENCE),
        ApiRoute(
            "POST",
            f"{prefix}/generate_stream",
            f"model_generate_stream{suffix}",
            "generate_stream",
            INFERENCE,
        ),
        ApiRoute(
            "GET", f"{prefix}/stats", f"model_statistics{suffix}", "model_statistics", STATISTICS
        ),
        ApiRoute("GET", f"{prefix}/config", f"model_config{suffix}", "model_config", MODEL_CONFIG),
    )


def _model_docs_routes(prefix: str, suffix: str) -> tuple[ApiRoute, ...]:
    # The documents describe the model: they are its metadata.
    return (
        ApiRoute("GET", f"{prefix}/docs", f"model_docs_page{suffix}", "model_page", METADATA),
        ApiRoute(
            "GET",
            f"{prefix}/docs/{SPEC_FILE}",
            f"model_docs_spec{suffix}",
            "model_spec",
            METADATA,
        ),
    )


def _shared_memory_routes(kind: str, *handlers: str) -> tuple[ApiRoute, ...]:
    """Triton's shared memory extension: ``kind`` is "system" or "cuda"; ``handlers``
    answer status, register and unregister."""
    status, register, unregister = handlers
    prefix = f"/v2/{kind}sharedmemory"
    region = f"{prefix}/region/{{region}}"
    name = f"{kind}_shared_memory"
    return tuple(
        ApiRoute(method, path, operation_id, handler, SHARED_MEMORY)
        for method, path, operation_id, handler in (
            ("GET", f"{prefix}/status", f"{name}_status", status),
            ("GET", f"{region}/status", f"{name}_region_status", status),
            ("POST", f"{region}/register", f"{name}_register", register),
            ("POST", f"{prefix}/unregister", f"{name}_unregister", unregister),
            ("POST", f"{region}/unregister", f"{name}_region_unregister", unregister),
        )
    )


def _openai_routes() -> tuple[ApiRoute, ...]:
    """OpenAI's API (server/openai/): the models that serve it, completions, chat
    completions and embeddings. Each handler is an ASGI endpoint of its own."""
    return tuple(
        ApiRoute(method, path, name, name, group)
        for method, path, name, group in (
            ("GET", "/v1/models", "openai_models", METADATA),
            ("GET", "/v1/models/{model}", "openai_model", METADATA),
            ("POST", "/v1/completions", "openai_completions", INFERENCE),
            ("POST", "/v1/chat/completions", "openai_chat_completions", INFERENCE),
            ("POST", "/v1/embeddings", "openai_embeddings", INFERENCE),
        )
    )


# In matching order: Starlette takes the first route that fits.
API_ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute("GET", "/v2/health/live", "server_live", "live", HEALTH),
    ApiRoute("GET", "/v2/health/ready", "server_ready", "ready", HEALTH),
    ApiRoute("GET", "/v2", "server_metadata", "server_metadata", METADATA),
    # Before /v2/models/{name}, which would take it for a model called "stats".
    ApiRoute("GET", "/v2/models/stats", "statistics", "model_statistics", STATISTICS),
    *_model_routes(MODEL_PREFIX, ""),
    *_model_routes(VERSION_PREFIX, VERSION_SUFFIX),
    ApiRoute(
        "POST", "/v2/repository/index", "repository_index", "repository_index", MODEL_REPOSITORY
    ),
    ApiRoute(
        "POST",
        "/v2/repository/models/{name}/load",
        "repository_load",
        "repository_load",
        MODEL_REPOSITORY,
    ),
    ApiRoute(
        "POST",
        "/v2/repository/models/{name}/unload",
        "repository_unload",
        "repository_unload",
        MODEL_REPOSITORY,
    ),
    # Triton's logging extension.
    ApiRoute("GET", "/v2/logging", "log_settings", "log_settings", LOGGING),
    ApiRoute("POST", "/v2/logging", "update_log_settings", "update_log_settings", LOGGING),
    # Triton's trace extension (server/trace_api.py).
    ApiRoute("GET", "/v2/trace/setting", "trace_settings", "trace_settings", TRACE),
    ApiRoute("POST", "/v2/trace/setting", "update_trace_settings", "update_trace_settings", TRACE),
    ApiRoute(
        "GET",
        f"{MODEL_PREFIX}/trace/setting",
        "model_trace_settings",
        "trace_settings",
        TRACE,
    ),
    ApiRoute(
        "POST",
        f"{MODEL_PREFIX}/trace/setting",
        "update_model_trace_settings",
        "update_trace_settings",
        TRACE,
    ),
    ApiRoute("GET", "/v2/docs", "docs_page", "api_page", METADATA),
    ApiRoute("GET", f"/v2/docs/{SPEC_FILE}", "docs_spec", "api_spec", METADATA),
    ApiRoute("GET", f"{ASSETS_PATH}/{{file}}", "docs_asset", "asset", METADATA),
    *_model_docs_routes(MODEL_PREFIX, ""),
    *_model_docs_routes(VERSION_PREFIX, VERSION_SUFFIX),
    *_shared_memory_routes("system", "shm_status", "shm_register", "shm_unregister"),
    *_shared_memory_routes("cuda", "cuda_shm_status", "cuda_shm_register", "cuda_shm_unregister"),
    *_openai_routes(),
)

# The routes the fast path answers itself (RestApp), in front of Starlette.
INFER_ROUTES = tuple(route for route in API_ROUTES if route.handler == "infer")
# The routes of one model (version) its own OpenAPI document shows.
MODEL_DOCUMENT_OPERATIONS = ("model_metadata", "model_ready", "model_infer")
