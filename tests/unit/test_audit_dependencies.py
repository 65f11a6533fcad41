"""The dependency audit's gate (scripts/audit_dependencies.py), without the network:
PyPI is faked, or made unreachable (a closed port)."""

from __future__ import annotations

import importlib.util
import json
import socket
import urllib.error
from email.message import Message
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "audit_dependencies.py"


@pytest.fixture(scope="module")
def audit() -> ModuleType:
    spec = importlib.util.spec_from_file_location("audit_dependencies", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_exception_must_say_why(audit: ModuleType, tmp_path: Path) -> None:
    exceptions = tmp_path / "exceptions.txt"
    exceptions.write_text("# accepted\n\nPYSEC-1  # not reachable from inferd\nGHSA-2 # a reason\n")
    assert audit.read_exceptions(exceptions) == {"PYSEC-1", "GHSA-2"}
    exceptions.write_text("PYSEC-3\n")
    with pytest.raises(SystemExit, match="needs a comment saying why"):
        audit.read_exceptions(exceptions)


def test_the_project_file_is_valid(audit: ModuleType) -> None:
    audit.read_exceptions(audit.EXCEPTIONS)


def test_a_known_vulnerability_fails_the_audit(
    audit: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    vuln = {"id": "PYSEC-9", "aliases": ["CVE-1"], "fix_versions": ["2.0"]}
    assert audit.summarize(3, [({"name": "pkg", "version": "1.0"}, vuln)], []) == 1
    assert "VULNERABLE pkg 1.0: PYSEC-9 CVE-1 (fixed in 2.0)" in capsys.readouterr().out
    assert audit.summarize(3, [], [{"name": "old", "version": "0.1"}]) == 0
    assert "audited 2 of 3 packages: 0 known vulnerabilities" in capsys.readouterr().out


def test_auditing_none_of_the_packages_fails(
    audit: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    skipped = [{"name": "a", "version": "1"}, {"name": "b", "version": "2"}]
    assert audit.summarize(2, [], skipped) == audit.UNREACHABLE
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "NOT AUDITED: PyPI had vulnerability data for none of the packages"


def test_an_exception_matches_an_id_or_an_alias(audit: ModuleType) -> None:
    vuln = {"id": "GHSA-x", "aliases": ["CVE-2026-1", "PYSEC-7"]}
    assert audit._excepted(vuln, {"PYSEC-7"})
    assert audit._excepted(vuln, {"GHSA-x"})
    assert not audit._excepted(vuln, {"CVE-2026-2"})


def test_the_latest_release_list_is_used_only_for_the_latest_release(
    audit: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = {
        "info": {"version": "2.0"},
        "vulnerabilities": [{"id": "A"}, {"id": "B", "withdrawn": "x"}],
    }

    class Answer:
        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def read(self) -> bytes:
            return json.dumps(page).encode()

    monkeypatch.setattr(audit.urllib.request, "urlopen", lambda url, timeout: Answer())
    assert audit.latest_release_vulns("pkg", "2.0") == [{"id": "A"}]
    assert audit.latest_release_vulns("pkg", "1.0") is None


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def unreachable_pypi(audit: ModuleType, monkeypatch: pytest.MonkeyPatch, closed_port: int) -> None:
    monkeypatch.setattr(audit, "PYPI", f"http://127.0.0.1:{closed_port}/pypi")
    monkeypatch.delenv(audit.OFFLINE_VARIABLE, raising=False)

    def never(*args: object) -> None:  # nothing past the source check may run
        raise AssertionError("the audit went on without its source")

    monkeypatch.setattr(audit, "frozen", never)


@pytest.mark.usefixtures("unreachable_pypi")
def test_an_unreachable_source_fails_and_says_so_last(
    audit: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert audit.main([]) == audit.UNREACHABLE == 2
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("NOT AUDITED: PyPI's vulnerability data could not be reached (")
    assert "Connection refused" in last
    assert "--offline-ok" in last


@pytest.mark.usefixtures("unreachable_pypi")
def test_offline_ok_turns_the_failure_into_a_warning(
    audit: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert audit.main(["--offline-ok"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("WARNING: not audited, PyPI's vulnerability data could not be reached")
    monkeypatch.setenv(audit.OFFLINE_VARIABLE, "1")
    assert audit.main([]) == 0
    assert capsys.readouterr().out.startswith("WARNING: not audited")


def test_a_project_page_lost_mid_audit_makes_the_source_unreachable(
    audit: ModuleType, monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.setattr(audit, "PYPI", f"http://127.0.0.1:{closed_port}/pypi")
    with pytest.raises(audit.SourceUnreachable, match="Connection refused"):
        audit.latest_release_vulns("pkg", "1.0")


def test_a_package_pypi_does_not_know_is_only_not_audited(
    audit: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_found(url: str, timeout: float) -> None:
        raise urllib.error.HTTPError(url, 404, "Not Found", Message(), None)

    monkeypatch.setattr(audit.urllib.request, "urlopen", not_found)
    assert audit.latest_release_vulns("local-build", "1.0") is None

    def broken(url: str, timeout: float) -> None:
        raise urllib.error.HTTPError(url, 503, "Service Unavailable", Message(), None)

    monkeypatch.setattr(audit.urllib.request, "urlopen", broken)
    with pytest.raises(audit.SourceUnreachable, match="503"):
        audit.latest_release_vulns("pkg", "1.0")
