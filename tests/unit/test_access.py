"""Restricted API groups: the settings, the key check, the groups of routes and methods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.routing import Route

from inferd.errors import ConfigurationError, PermissionDenied
from inferd.server import filewatch
from inferd.server.access import AcceptedKeys, ClosedApi, GuardedRoute, KeyGuard, api_guards
from inferd.server.filewatch import WatchedFiles
from inferd.server.grpc.access import METHOD_GROUPS, RestrictedMethods, access_interceptors
from inferd.server.grpc.registration import SERVICE
from inferd.server.routes import API_ROUTES
from inferd.settings import ServerSettings
from inferd.settings.loader import load_server_settings
from inferd.settings.security import API_GROUPS, RestrictedApiSettings


def restriction(**fields: object) -> RestrictedApiSettings:
    values = {"apis": ["model_repository"], "header": "admin-key", "values_from_env": "KEYS"}
    return RestrictedApiSettings.model_validate(values | fields)


def load(tmp_path: Path, settings: dict[str, object]) -> ServerSettings:
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    return load_server_settings(tmp_path)


# ---- settings ---------------------------------------------------------------------------


def test_header_is_lowered_and_triton_group_names_are_accepted() -> None:
    settings = restriction(apis=["model-repository", "shared-memory"], header="Admin-Key")
    assert (settings.apis, settings.header) == (["model_repository", "shared_memory"], "admin-key")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"values_from_file": "/keys"}, "set exactly one of values_from_env"),
        ({"values_from_env": None}, "set exactly one of values_from_env"),
        ({"header": "Bad Header"}, "must be a header name"),
        ({"header": "grpc-timeout"}, "must be a header name"),
        ({"header": "content-type"}, "read by the server itself"),
        ({"apis": []}, "name at least one API group"),
        ({"apis": ["everything"]}, "Input should be 'health'"),
    ],
)
def test_a_restriction_that_cannot_work_is_refused(
    tmp_path: Path, fields: dict[str, object], expected: str
) -> None:
    base = {"apis": ["statistics"], "header": "k", "values_from_env": "KEYS"}
    with pytest.raises(ConfigurationError, match=expected):
        load(tmp_path, {"restricted_apis": [base | fields]})


def test_a_group_restricted_twice_is_refused(tmp_path: Path) -> None:
    twice = [
        {"apis": ["statistics", "inference"], "header": "a", "values_from_env": "A"},
        {"apis": ["inference"], "header": "b", "values_from_env": "B"},
    ]
    with pytest.raises(ConfigurationError, match="'inference' is in two restrictions"):
        load(tmp_path, {"restricted_apis": twice})


def test_tls_settings_go_together(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ssl_certfile and ssl_keyfile go together"):
        load(tmp_path, {"ssl_certfile": "c.pem"})
    with pytest.raises(ConfigurationError, match="ssl_ca_certs needs TLS"):
        load(tmp_path, {"ssl_ca_certs": "ca.pem"})
    with pytest.raises(ConfigurationError, match="metrics_ssl needs TLS"):
        load(tmp_path, {"metrics_ssl": True})


def test_relative_files_are_relative_to_the_settings_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load(
        tmp_path,
        {
            "ssl_certfile": "tls/tls.crt",
            "ssl_keyfile": "tls/tls.key",
            "restricted_apis": [{"apis": ["logging"], "header": "k", "values_from_file": "k"}],
        },
    )
    assert settings.ssl_certfile == str(tmp_path / "tls" / "tls.crt")
    assert settings.restricted_apis[0].values_from_file == str(tmp_path / "k")
    monkeypatch.chdir(tmp_path / "..")
    monkeypatch.setenv("INFERD_SSL_KEYFILE", "from-env.key")
    settings = load(tmp_path, {"ssl_certfile": "c.pem", "ssl_keyfile": "ignored.key"})
    assert settings.ssl_keyfile == str(tmp_path.parent / "from-env.key")


def test_by_default_every_group_is_open() -> None:
    settings = ServerSettings()
    assert (settings.restricted_apis, settings.model_repository_api) == ([], True)
    assert api_guards(settings) == {}
    assert access_interceptors({}) == []


# ---- keys -------------------------------------------------------------------------------


def test_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS", " old , new ,")
    keys = AcceptedKeys(restriction())
    assert keys.accepts(b"old") and keys.accepts(b"new")
    assert not keys.accepts(b"") and not keys.accepts(b"ol") and not keys.accepts(b"old,new")


@pytest.mark.parametrize(("value", "expected"), [(None, "is not set"), (" , ", "holds no value")])
def test_keys_that_cannot_be_read_are_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    if value is None:
        monkeypatch.delenv("KEYS", raising=False)
    else:
        monkeypatch.setenv("KEYS", value)
    with pytest.raises(ConfigurationError, match=f"environment variable KEYS {expected}"):
        AcceptedKeys(restriction())


def test_a_keys_file_is_read_again_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filewatch, "CHECK_INTERVAL", 0.0)
    path = tmp_path / "keys"
    path.write_text("old\n")
    keys = AcceptedKeys(restriction(values_from_env=None, values_from_file=str(path)))
    assert keys.accepts(b"old") and not keys.accepts(b"new")
    path.write_text("old\nnew\n")
    assert keys.accepts(b"new") and keys.accepts(b"old")
    path.unlink()  # a rotation half done: the keys read before stay
    assert keys.accepts(b"new")
    path.write_text("new")
    assert keys.accepts(b"new") and not keys.accepts(b"old")


def test_a_missing_keys_file_stops_the_start(tmp_path: Path) -> None:
    missing = restriction(values_from_env=None, values_from_file=str(tmp_path / "none"))
    with pytest.raises(ConfigurationError, match="restricted_apis \\(model_repository\\)"):
        AcceptedKeys(missing)


def test_file_changes_are_looked_for_at_most_once_an_interval(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("1")
    now = [0.0]
    watch = WatchedFiles([str(path)], interval=1.0, clock=lambda: now[0])
    path.write_text("22")
    assert not watch.changed()  # too soon
    now[0] = 1.0
    assert watch.changed()
    assert not watch.changed()  # told once
    path.write_text("333")
    now[0] = 1.5
    assert not watch.changed()
    now[0] = 2.0
    assert watch.changed()


# ---- guards -----------------------------------------------------------------------------


def test_a_key_guard_reads_the_header_and_the_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS", "k1,k2")
    guard = KeyGuard("statistics", "admin-key", AcceptedKeys(restriction()))
    guard.check_headers({b"admin-key": b"k2"})
    guard.check_metadata((("user-agent", "grpc"), ("admin-key", "k1")))
    with pytest.raises(PermissionDenied, match="send the header 'admin-key'"):
        guard.check_headers({b"other": b"k1"})
    with pytest.raises(PermissionDenied, match="value of header 'admin-key' is not accepted"):
        guard.check_metadata((("admin-key", "k3"),))
    with pytest.raises(PermissionDenied, match="The statistics API is restricted"):
        guard.check_metadata(None)


def test_the_repository_api_turned_off_refuses_even_with_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEYS", "k")
    settings = ServerSettings(restricted_apis=[restriction()], model_repository_api=False)
    guard = api_guards(settings)["model_repository"]
    assert isinstance(guard, ClosedApi)
    with pytest.raises(PermissionDenied, match="model_repository_api: false"):
        guard.check_headers({b"admin-key": b"k"})


def test_one_guard_per_restricted_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS", "k")
    settings = ServerSettings(restricted_apis=[restriction(apis=["statistics", "health"])])
    guards = api_guards(settings)
    assert set(guards) == {"statistics", "health"}
    methods = RestrictedMethods(guards)._guards
    assert set(methods) == {m for m, group in METHOD_GROUPS.items() if group in guards}


# ---- which group each route and method belongs to -----------------------------------


def test_every_route_and_method_has_a_known_group() -> None:
    assert {route.api for route in API_ROUTES} <= set(API_GROUPS)
    assert set(METHOD_GROUPS.values()) <= set(API_GROUPS)
    served = {f"/{SERVICE.full_name}/{method.name}" for method in SERVICE.methods}
    assert served <= set(METHOD_GROUPS)
    groups = {route.path: route.api for route in API_ROUTES}
    assert groups["/v2/repository/models/{name}/unload"] == "model_repository"
    assert groups["/v2/models/{name}/versions/{version}/infer"] == "inference"
    assert groups["/v2/health/ready"] == groups["/v2/models/{name}/ready"] == "health"
    assert METHOD_GROUPS["/grpc.health.v1.Health/Check"] == "health"
    assert METHOD_GROUPS["/inference.GRPCInferenceService/RepositoryModelLoad"] == (
        "model_repository"
    )


def guarded_routes(tmp_path: Path, settings: ServerSettings) -> tuple[set[str], bool]:
    """The paths whose Starlette route has a guard, and whether the fast path has one."""
    from inferd.observability.stats import ModelStatsTable
    from inferd.server.rest.api import build_rest_app
    from inferd.serving.dataplane import DataPlane
    from inferd.serving.registry import Registry
    from inferd.serving.repository import ModelRepository
    from inferd.workers.inprocess import InProcessPool

    registry = Registry(InProcessPool(), ModelStatsTable(observe=False))
    app = build_rest_app(DataPlane(settings, registry, ModelRepository(tmp_path)), settings)
    routes = [route for route in app.app.routes if isinstance(route, Route)]  # type: ignore[attr-defined]
    assert len(routes) == len(API_ROUTES)
    return {r.path for r in routes if isinstance(r.app, GuardedRoute)}, app.infer.guard is not None


def test_an_unrestricted_rest_app_checks_nothing(tmp_path: Path) -> None:
    """No guard on the fast path and no middleware on any route: nothing to pay."""
    assert guarded_routes(tmp_path, ServerSettings()) == (set(), False)


def test_a_restricted_group_guards_its_routes_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYS", "k")
    settings = ServerSettings(restricted_apis=[restriction(apis=["statistics", "inference"])])
    paths, infer_guarded = guarded_routes(tmp_path, settings)
    assert infer_guarded
    expected = {r.path for r in API_ROUTES if r.api in ("statistics", "inference")}
    # The infer routes are checked by their endpoint, which the fast path calls too; the
    # OpenAI-compatible routes check access themselves (a Bearer key, OpenAI's errors).
    checked_by_endpoint = {r.path for r in API_ROUTES if r.handler == "infer"}
    checked_by_endpoint |= {r.path for r in API_ROUTES if r.handler.startswith("openai_")}
    assert paths == expected - checked_by_endpoint
