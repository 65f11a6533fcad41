"""scripts/install_test_tools.sh: chromium and wrk installed where root can, one
``apt-get update`` for both; never a failure (their tests are skipped without them).

``id``, ``apt-get`` and the tools are fakes on a PATH of their own that log their calls."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_test_tools.sh"
BASH = shutil.which("bash") or "/bin/bash"


def fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{BASH}\n{body}\n")
    path.chmod(0o755)


def run_script(
    tmp_path: Path, uid: int = 0, present: tuple[str, ...] = (), failing: str = ""
) -> tuple[str, list[str]]:
    """The script's output and the apt-get calls it made."""
    folder = tmp_path / "bin"
    folder.mkdir()
    log = tmp_path / "apt.log"
    fake(folder, "id", f"echo {uid}")
    fake(
        folder,
        "apt-get",
        f'echo "$*" >> {log}\n[ "${{@: -1}}" != "{failing}" ] || exit 100',
    )
    for tool in present:
        fake(folder, tool, "exit 0")
    done = subprocess.run(
        [BASH, str(SCRIPT)],
        env={"PATH": str(folder)},  # builtins and the fakes only: the machine's tools unseen
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return done.stdout, calls


def test_root_installs_both_after_one_update(tmp_path: Path) -> None:
    output, calls = run_script(tmp_path)
    assert calls == ["update -qq", "install -y -qq chromium", "install -y -qq wrk"]
    assert "installing chromium wrk" in output


def test_only_what_is_missing_is_installed(tmp_path: Path) -> None:
    _, calls = run_script(tmp_path, present=("chromium",))
    assert calls == ["update -qq", "install -y -qq wrk"]


def test_nothing_happens_when_both_are_there(tmp_path: Path) -> None:
    output, calls = run_script(tmp_path, present=("chromium", "wrk"))
    assert (output, calls) == ("", [])


def test_a_package_that_fails_does_not_keep_the_other_out(tmp_path: Path) -> None:
    output, calls = run_script(tmp_path, failing="chromium")
    assert calls == ["update -qq", "install -y -qq chromium", "install -y -qq wrk"]
    assert "chromium could not be installed" in output
    assert "wrk could not" not in output


@pytest.mark.parametrize("uid", [1000])
def test_without_root_it_says_what_is_skipped(tmp_path: Path, uid: int) -> None:
    output, calls = run_script(tmp_path, uid=uid)
    assert calls == []
    assert "not installing chromium wrk (needs root and apt-get)" in output
