"""Audit the resolved environment for known vulnerabilities; fail on any not excepted.

Run by scripts/test.sh (so by CI) after the project venv is installed: every
package in it (inferd's core dependencies, every extra, the test tools) at the
version pip resolved is looked up in PyPI's vulnerability data with pip-audit
(``--vulnerability-service pypi``: CI reaches PyPI only). pip-audit runs from a
virtualenv of its own (``.audit-venv``), so it audits the project's packages, not
its own.

PyPI answers vulnerabilities per release (``/pypi/NAME/VERSION/json``). Where
that endpoint does not answer for a package (a mirror that serves only the
project pages), its project page (``/pypi/NAME/json``) still lists the
vulnerabilities of its latest release: they are used when the installed version
is the latest. A package neither can audit is listed as not audited.

Known vulnerabilities accepted for now are listed in
scripts/audit-exceptions.txt, one ID a line with a comment saying why.

Where PyPI's vulnerability data cannot be reached, nothing is audited: the last line
says so and the exit status is 2, unless ``--offline-ok`` (or INFERD_AUDIT_OFFLINE_OK=1)
asks for a warning instead (exit 0). Known vulnerabilities exit 1.

    python3 scripts/audit_dependencies.py [--python .venv/bin/python] [--offline-ok]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXCEPTIONS = ROOT / "scripts" / "audit-exceptions.txt"
# PyPI's JSON API: the vulnerability data pip-audit reads (it asks pypi.org itself).
PYPI = "https://pypi.org/pypi"
OFFLINE_VARIABLE = "INFERD_AUDIT_OFFLINE_OK"
UNREACHABLE = 2  # the exit status when nothing could be audited (1: vulnerabilities)
# A local version label (torch's "+cpu") names a build of the release it follows.
_LOCAL_LABEL = re.compile(r"\+[A-Za-z0-9.]+$")


class SourceUnreachable(Exception):
    """PyPI's vulnerability data could not be read: the audit cannot say anything."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--audit-venv", default=str(ROOT / ".audit-venv"))
    parser.add_argument(
        "--offline-ok",
        action="store_true",
        default=os.environ.get(OFFLINE_VARIABLE, "").lower() in ("1", "true", "yes"),
        help=f"only warn when PyPI cannot be reached (also {OFFLINE_VARIABLE}=1)",
    )
    args = parser.parse_args(argv)
    try:
        return audit(Path(args.python), Path(args.audit_venv))
    except SourceUnreachable as error:
        return unreachable(str(error), args.offline_ok)


def audit(python: Path, audit_venv: Path) -> int:
    accepted = read_exceptions(EXCEPTIONS)
    check_source()  # before anything else: pip-audit's own install needs the network too
    pinned = frozen(str(python))
    report = run_pip_audit(pip_audit(audit_venv), pinned, accepted)
    versions = {_canonical(line.split("==")[0]): line.split("==")[1] for line in pinned}
    found, skipped = [], []
    for dependency in report["dependencies"]:
        if "skip_reason" in dependency:
            # pip-audit names no version for what it skipped; pip freeze said which.
            dependency["version"] = versions.get(_canonical(dependency["name"]), "?")
            skipped.append(dependency)
        else:
            found += [(dependency, vuln) for vuln in dependency.get("vulns", [])]
    not_audited = []
    with ThreadPoolExecutor(8) as pool:  # one page per package: ask several at once
        pages = pool.map(lambda d: latest_release_vulns(d["name"], d["version"]), skipped)
        for dependency, latest in zip(skipped, pages, strict=True):
            if latest is None:
                not_audited.append(dependency)
            else:
                found += [(dependency, v) for v in latest if not _excepted(v, accepted)]
    return summarize(len(pinned), found, not_audited)


def check_source() -> None:
    """SourceUnreachable unless PyPI's JSON API answers (pip's own project page)."""
    try:
        with urllib.request.urlopen(f"{PYPI}/pip/json", timeout=30) as answer:
            if "info" not in json.load(answer):
                raise SourceUnreachable(f"{PYPI} answered something that is not PyPI's JSON")
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise SourceUnreachable(f"{PYPI}: {_reason(error)}") from None


def unreachable(reason: str, offline_ok: bool) -> int:
    """Say, on the last line, that nothing was audited; fail unless asked to warn."""
    if offline_ok:
        print(f"WARNING: not audited, PyPI's vulnerability data could not be reached ({reason})")
        return 0
    print(
        f"NOT AUDITED: PyPI's vulnerability data could not be reached ({reason}); "
        f"run where it can be, or pass --offline-ok ({OFFLINE_VARIABLE}=1) to only warn"
    )
    return UNREACHABLE


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        return str(error.reason)
    return str(error)


def read_exceptions(path: Path) -> set[str]:
    """The accepted vulnerability IDs; every line must say why after a ``#``."""
    accepted = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        entry, _, reason = line.partition("#")
        if not entry.strip():
            continue
        if not reason.strip():
            sys.exit(f"{path}:{number}: an exception needs a comment saying why it is accepted")
        accepted.add(entry.split()[0])
    return accepted


def frozen(python: str) -> list[str]:
    """``name==version`` of every installed package but inferd itself (editable)."""
    output = subprocess.run(
        [python, "-m", "pip", "freeze", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [_LOCAL_LABEL.sub("", line) for line in output.splitlines() if "==" in line]


def pip_audit(venv: Path) -> Path:
    """pip-audit's program, installed into ``venv`` first if it is not there."""
    program = venv / "bin" / "pip-audit"
    if not program.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "pip-audit"], check=True)
    return program


def run_pip_audit(program: Path, pinned: list[str], accepted: set[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        requirements, output = Path(folder) / "requirements.txt", Path(folder) / "audit.json"
        requirements.write_text("\n".join(pinned) + "\n")
        command = [
            str(program),
            "--vulnerability-service", "pypi",
            "--requirement", str(requirements),
            "--no-deps", "--disable-pip",  # the versions are pinned: nothing to resolve
            "--format", "json", "--output", str(output),
            "--progress-spinner", "off",
            *(argument for vuln in sorted(accepted) for argument in ("--ignore-vuln", vuln)),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode not in (0, 1) or not output.exists():  # 1: vulnerabilities found
            check_source()  # lost on the way: say that, not pip-audit's traceback
            sys.exit(f"pip-audit failed ({done.returncode}):\n{done.stderr}")
        report: dict[str, Any] = json.loads(output.read_text())
        return report


def latest_release_vulns(name: str, version: str) -> list[dict[str, Any]] | None:
    """The vulnerabilities PyPI's project page lists, if ``version`` is its latest
    release (the release that list is about); None when that cannot be told (no such
    page). SourceUnreachable when PyPI does not answer."""
    try:
        with urllib.request.urlopen(f"{PYPI}/{name}/json", timeout=30) as answer:
            project = json.load(answer)
    except urllib.error.HTTPError as error:
        if error.code == 404:  # not on PyPI (a local build): PyPI knows nothing of it
            return None
        raise SourceUnreachable(f"{PYPI}/{name}/json: {error}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise SourceUnreachable(f"{PYPI}/{name}/json: {_reason(error)}") from None
    if project.get("info", {}).get("version") != version:
        return None
    return [vuln for vuln in project.get("vulnerabilities", []) if not vuln.get("withdrawn")]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _excepted(vuln: dict[str, Any], accepted: set[str]) -> bool:
    return bool(accepted & {vuln.get("id"), *vuln.get("aliases", [])})


def summarize(
    total: int, found: list[tuple[dict[str, Any], dict[str, Any]]], not_audited: list[Any]
) -> int:
    for dependency, vuln in found:
        fixed = vuln.get("fix_versions") or vuln.get("fixed_in") or []
        print(
            f"VULNERABLE {dependency['name']} {dependency['version']}: {vuln.get('id')} "
            f"{' '.join(vuln.get('aliases', []))} (fixed in {', '.join(fixed) or 'no release'})"
        )
    if not_audited:
        names = ", ".join(f"{d['name']} {d['version']}" for d in not_audited)
        print(
            f"not audited ({len(not_audited)}: no answer for their release, and not the "
            f"latest): {names}"
        )
    audited = total - len(not_audited)
    print(f"audited {audited} of {total} packages: {len(found)} known vulnerabilities")
    if found:
        print(f"upgrade them, or accept each in {EXCEPTIONS.relative_to(ROOT)} with a reason")
        return 1
    if total and not audited:
        print("NOT AUDITED: PyPI had vulnerability data for none of the packages")
        return UNREACHABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
