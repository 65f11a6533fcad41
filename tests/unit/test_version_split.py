"""serving/version_split.py: requests that name no version, split by version_weights."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from inferd.context import RequestContext
from inferd.errors import ModelNotFound
from inferd.serving.version_split import VersionSplit
from inferd.settings import ModelSettings, ServerSettings


class Versions:
    """The two registry reads VersionSplit makes, over versions "1" and "2" ready."""

    def __init__(self, ready: list[str], **settings: Any) -> None:
        self.ready = ready
        self.default = type("Found", (), {"settings": ModelSettings(name="m", **settings)})

    def find(self, name: str, version: str | None = None) -> Any:
        if name != "m":
            raise ModelNotFound(name)
        return self.default

    def ready_versions(self, name: str) -> list[str]:
        return self.ready

    def versions_of(self, name: str) -> list[Any]:
        return [self.default] if name == "m" else []


def split(ready: list[str] | None = None, **settings: Any) -> VersionSplit:
    registry: Any = Versions(ready or ["1", "2"], **settings)
    return VersionSplit(registry, random.Random(7))


def test_ninety_ten_over_ten_thousand_requests() -> None:
    chooser = split(version_weights={"1": 90, "2": 10})
    landed = Counter(chooser.pick("m", RequestContext()) for _ in range(10_000))
    assert set(landed) == {"1", "2"}
    assert 8_800 <= landed["1"] <= 9_200
    assert 800 <= landed["2"] <= 1_200


def test_sticky_header_keeps_a_user_on_one_version() -> None:
    chooser = split(version_weights={"1": 50, "2": 50}, version_sticky_header="X-User")
    by_user = {}
    for user in range(200):
        context = RequestContext(headers={"x-user": f"user-{user}"})
        picks = {chooser.pick("m", context) for _ in range(5)}
        assert len(picks) == 1
        by_user[user] = picks.pop()
    assert set(by_user.values()) == {"1", "2"}  # and the users are spread over both
    # A request without the header is split at random.
    assert {chooser.pick("m", RequestContext(headers={})) for _ in range(100)} == {"1", "2"}


def test_only_ready_weighted_versions_take_a_share() -> None:
    chooser = split(ready=["1"], version_weights={"1": 10, "2": 90})
    assert {chooser.pick("m", RequestContext()) for _ in range(50)} == {"1"}
    assert split(ready=["3"], version_weights={"1": 1}).pick("m", RequestContext()) is None


def test_no_weights_or_no_model_means_the_default_version() -> None:
    assert split().pick("m", RequestContext()) is None
    assert split(version_weights={"1": 1}).pick("other", RequestContext()) is None


@pytest.mark.parametrize("weights", [{"1": -1}, {"1": 0, "2": 0}])
def test_weights_are_checked(weights: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="weight"):
        ModelSettings(name="m", version_weights=weights)


def test_load_on_request_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (ServerSettings().load_on_request, ServerSettings().max_loaded_models) == (False, 0)
    monkeypatch.setenv("INFERD_LOAD_ON_REQUEST", "true")
    monkeypatch.setenv("INFERD_MAX_LOADED_MODELS", "3")
    settings = ServerSettings()
    assert (settings.load_on_request, settings.max_loaded_models) == (True, 3)
    monkeypatch.setenv("INFERD_MAX_LOADED_MODELS", "-1")
    with pytest.raises(ValueError, match="max_loaded_models"):
        ServerSettings()
