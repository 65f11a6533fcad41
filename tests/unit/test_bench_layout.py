"""benchmarks/ as one tool: one table of commands, no import from the tests, and a
``__main__`` only where the table says a helper process needs one."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

from benchmarks import registry
from benchmarks.__main__ import main
from benchmarks.pertree import split_baseline, with_option
from benchmarks.plot import points

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
MODULES = sorted(BENCHMARKS.rglob("*.py"))


def imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def runs_as_main(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body
    )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_nothing_under_benchmarks_imports_the_tests(path: Path) -> None:
    names = imported(ast.parse(path.read_text()))
    assert not {name for name in names if name == "tests" or name.startswith("tests.")}


def test_only_the_entry_point_and_the_helper_processes_run_as_main() -> None:
    mains = {
        path.relative_to(BENCHMARKS).with_suffix("").as_posix()
        for path in MODULES
        if runs_as_main(ast.parse(path.read_text()))
    }
    assert mains <= {"__main__", *registry.HELPER_PROCESSES}, mains
    assert "__main__" in mains


def test_every_command_is_listed_once_and_has_a_main() -> None:
    names = [command.name for command in registry.COMMANDS]
    assert len(names) == len(set(names))
    for command in registry.COMMANDS:
        assert callable(importlib.import_module(command.module).main), command.name


def test_the_list_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [command.name for command in registry.COMMANDS]


def test_an_unknown_command_is_refused_with_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such"]) == 2
    assert "no command 'no-such'" in capsys.readouterr().out


def test_baseline_src_is_taken_out_of_a_command_s_options() -> None:
    assert split_baseline(["--rounds", "2", "--baseline-src", "/b", "--x"]) == (
        Path("/b"),
        ["--rounds", "2", "--x"],
    )
    assert split_baseline(["--rounds", "2"]) == (None, ["--rounds", "2"])


def test_an_option_is_replaced_where_given_and_added_elsewhere() -> None:
    assert with_option(["--json-out", "a.json", "-v"], "--json-out", "b") == [
        "--json-out",
        "b",
        "-v",
    ]
    assert with_option(["--json-out=a.json"], "--json-out", "b") == ["--json-out=b"]
    assert with_option(["-v"], "--inferd-src", "/s") == ["-v", "--inferd-src", "/s"]


def test_plot_draws_every_run_of_a_results_file(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    runs = [
        {"label": label, "case": "c2", "round": 0, "requests_per_s": rate, "p99_ms": p99}
        for label, rate, p99 in (("inferd", 900.0, 3.0), ("mlserver", 400.0, 9.0))
    ]
    results = tmp_path / "rest.json"
    results.write_text(json.dumps({"setup": {"scenario": "rest"}, "runs": runs}))
    assert main(["plot", str(results), str(tmp_path / "rest.png")]) == 0
    assert (tmp_path / "rest.png").stat().st_size > 0
    assert points(json.loads(results.read_text())) == [
        ("inferd c2", 900.0, 3.0),
        ("mlserver c2", 400.0, 9.0),
    ]


def test_plot_reads_each_tree_of_a_command_run_with_baseline_src() -> None:
    def record(rate: float) -> dict[str, object]:
        run = {"label": "admitted", "requests_per_s": rate, "p99_ms": 40.0}
        return {"setup": {"scenario": "restart-overload"}, "runs": [run]}

    both = {
        "command": "restart-overload",
        "figures": {"this": record(300.0), "baseline": record(250.0)},
    }
    assert points(both) == [("this admitted", 300.0, 40.0), ("baseline admitted", 250.0, 40.0)]


def test_plot_says_when_a_command_s_record_has_nothing_to_draw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "soak.json"
    results.write_text(json.dumps({"setup": {"scenario": "soak"}, "runs": []}))
    assert main(["plot", str(results), str(tmp_path / "soak.png")]) == 1
    assert "nothing to draw: no run of soak has" in capsys.readouterr().out
    assert not (tmp_path / "soak.png").exists()


def test_a_command_alternating_its_own_baseline_says_so_in_the_table() -> None:
    """A command whose parser takes --baseline-src (process-cpu alternates the trees in
    its rounds) is given the option; for the others pertree.py runs each tree."""
    for command in registry.COMMANDS:
        if command.module == registry.SIDE_BY_SIDE:
            continue
        module = importlib.import_module(command.module)
        source = Path(module.__file__ or "").read_text()
        assert ('"--baseline-src"' in source) == command.own_baseline, command.name
