"""The dependency audit's gate (scripts/audit_dependencies.py), without the network."""

from __future__ import annotations

import importlib.util
import json
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
