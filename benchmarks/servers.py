"""The servers a scenario compares, and how each is started.

A :class:`Contender` is one server with its settings: inferd from a source tree,
MLServer from its own virtualenv, or a gRPC floor (the least a server can do).
Where the programs are comes from :class:`Programs` (command-line options or
environment variables), never from this file.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.common.serverproc import READY_PATH, ServerProcess, server_environment, spawn

INFERD = "inferd"
MLSERVER = "mlserver"
FLOOR = "floor"
ENVOY_FLOOR = "envoy-floor"
TRITON = "triton"
LITSERVE = "litserve"
VLLM = "vllm"
BASELINE_SUFFIX = "@baseline"
BENCHMARKS_DIR = Path(__file__).resolve().parent
CHECKOUT_SRC = BENCHMARKS_DIR.parent / "src"
# inferd's protocol_processes, set through the environment: a tree that does not know
# the setting ignores the variable and starts (its settings.json would refuse the key).
PROTOCOL_PROCESSES_ENV = "INFERD_PROTOCOL_PROCESSES"
# MLServer 1.7.1 has no ``python -m mlserver``; this is its console script's body.
# The folder, in a LitServe contender's repository, of the model it serves.
LITSERVE_MODEL = "litserve-model"
# The folder, in a vLLM contender's repository, of the model it serves (config,
# weights and tokenizer, as save_pretrained writes them).
VLLM_MODEL = "vllm-model"
MLSERVER_MAIN = "import sys; from mlserver.cli import main; sys.exit(main())"


AS_OPTION = 0  # Contender.protocol_processes: what --protocol-processes says


@dataclass(frozen=True)
class Contender:
    """One server in a comparison."""

    label: str  # its name in tables and ratios
    kind: str  # INFERD, MLSERVER, FLOOR, ENVOY_FLOOR, TRITON, LITSERVE or VLLM
    settings: Mapping[str, Any] = field(default_factory=dict)  # added to settings.json
    model: str | None = None  # the model its load targets (VLLM: serves); None: the scenario's
    source: Path | None = None  # inferd's source tree; None: Programs.inferd_src
    ca_file: Path | None = None  # it serves REST over TLS, with a certificate this CA signed
    # inferd's protocol_processes: a count, None (its default: the CPUs), or AS_OPTION.
    protocol_processes: int | None = AS_OPTION

    @property
    def slug(self) -> str:
        """The label as a folder name."""
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in self.label)


@dataclass(frozen=True)
class Programs:
    """Where the servers' programs are."""

    inferd_python: str
    inferd_src: Path = CHECKOUT_SRC
    mlserver_python: str | None = None
    pyvoy: str | None = None
    triton_python: str | None = None  # a Python with nvidia-pytriton (its tritonserver)
    litserve_python: str | None = None
    vllm_python: str | None = None


def resolve_source(path: Path) -> Path:
    """The folder to put on PYTHONPATH for an inferd checkout (its ``src``) or source
    folder; ValueError when neither holds the ``inferd`` package."""
    for candidate in (path / "src", path):
        if (candidate / "inferd" / "__init__.py").is_file():
            return candidate.resolve()
    raise ValueError(f"{path} holds no inferd sources (neither src/inferd nor inferd)")


def use_inferd_source(src: Path) -> None:
    """Measure ``src`` in this process too (in-process figures, worker processes it
    starts), whatever inferd the interpreter has installed."""
    if "inferd" in sys.modules:  # imported before this: it may be another tree
        raise RuntimeError("inferd was imported before its source tree was chosen")
    sys.path.insert(0, str(src))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(src), os.environ.get("PYTHONPATH")) if p
    )


def with_baseline(contenders: Sequence[Contender], baseline: Path | None) -> list[Contender]:
    """Each inferd contender followed by its twin running the ``baseline`` sources."""
    if baseline is None:
        return list(contenders)
    out: list[Contender] = []
    for contender in contenders:
        out.append(contender)
        if contender.kind == INFERD:
            twin = replace(contender, label=contender.label + BASELINE_SUFFIX, source=baseline)
            out.append(twin)
    return out


def baseline_pairs(labels: Sequence[str]) -> list[tuple[str, str]]:
    """(current, baseline) label pairs among ``labels``."""
    return [
        (label, label + BASELINE_SUFFIX) for label in labels if label + BASELINE_SUFFIX in labels
    ]


def command_and_env(
    contender: Contender,
    programs: Programs,
    repo: Path,
    grpc_port: int,
    protocol_processes: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """How to start ``contender`` on ``repo``, and its whole environment. PYTHONPATH is
    set explicitly: an inferd server runs exactly the tree it is given. inferd runs
    ``protocol_processes`` when given (None: its settings.json or its default, the
    CPUs it may use)."""
    source = str(contender.source or programs.inferd_src)
    env = server_environment()
    env.pop("PYTHONPATH", None)
    if contender.kind == INFERD:
        command = [programs.inferd_python, "-m", "inferd", "start", str(repo)]
        processes = (
            {} if protocol_processes is None else {PROTOCOL_PROCESSES_ENV: str(protocol_processes)}
        )
        return command, env | {"PYTHONPATH": source} | processes
    if contender.kind == MLSERVER:
        if programs.mlserver_python is None:
            raise ValueError("MLServer's Python is not known: pass --mlserver-python")
        return [programs.mlserver_python, "-c", MLSERVER_MAIN, "start", str(repo)], env
    if contender.kind == FLOOR:
        script = BENCHMARKS_DIR / "grpc_floor_server.py"
        return [programs.inferd_python, str(script), str(repo)], env | {"PYTHONPATH": source}
    if contender.kind == ENVOY_FLOOR:
        if programs.pyvoy is None:
            raise ValueError("pyvoy is not known: pass --envoy-floor PYVOY")
        command = [programs.pyvoy, "--address", "127.0.0.1", "--port", str(grpc_port),
                   "grpc_floor_asgi:app"]  # fmt: skip
        path = os.pathsep.join([str(BENCHMARKS_DIR), source])
        return command, env | {"PYTHONPATH": path, "INFERD_FLOOR_REPO": str(repo)}
    if contender.kind == TRITON:
        command = triton_command(programs, repo, grpc_port)
        return command, triton_environment(env, programs.triton_python or "")
    if contender.kind == LITSERVE:
        if programs.litserve_python is None:
            raise ValueError("LitServe's Python is not known: pass --litserve-python")
        script = BENCHMARKS_DIR / "litserve_chat.py"
        return [programs.litserve_python, str(script), str(repo / LITSERVE_MODEL),
                str(repo_http_port(repo))], env  # fmt: skip
    if contender.kind == VLLM:
        # A KV cache of 1 GiB (4M tokens of the tiny LM): without a size, vLLM's CPU
        # backend wants 92% of the machine's memory and refuses to start on a shared one.
        return vllm_command(contender, programs, repo), env | {"VLLM_CPU_KVCACHE_SPACE": "1"}
    raise ValueError(f"unknown server kind {contender.kind!r}")


def vllm_command(contender: Contender, programs: Programs, repo: Path) -> list[str]:
    """vLLM's OpenAI server on the repository's folder, named as the contender's
    model, in float32 as inferd runs it (its CPU default casts to bfloat16), without
    an access log line per request (inferd writes none)."""
    if programs.vllm_python is None:
        raise ValueError("vLLM's Python is not known: pass --vllm-python")
    if contender.model is None:
        raise ValueError("a vLLM contender names the model it serves (Contender.model)")
    return [programs.vllm_python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(repo / VLLM_MODEL), "--served-model-name", contender.model,
            "--host", "127.0.0.1", "--port", str(repo_http_port(repo)),
            "--dtype", "float32", "--disable-uvicorn-access-log"]  # fmt: skip


def triton_command(programs: Programs, repo: Path, grpc_port: int) -> list[str]:
    """Triton on the repository's model folders (settings.json is a file: it skips it),
    on the ports settings.json gives: the ``tritonserver`` nvidia-pytriton bundles in
    ``--triton-python``'s environment, its backends beside its binary."""
    if programs.triton_python is None:
        raise ValueError("Triton's Python is not known: pass --triton-python")
    home = pytriton_server_home(programs.triton_python)
    settings = json.loads((repo / "settings.json").read_text())
    return [str(home / "bin" / "tritonserver"), f"--model-repository={repo}",
            f"--backend-directory={home / 'backends'}", f"--http-port={settings['http_port']}",
            f"--grpc-port={grpc_port}", f"--metrics-port={settings['metrics_port']}",
            "--allow-metrics=false"]  # fmt: skip


def triton_environment(env: dict[str, str], python: str) -> dict[str, str]:
    """Its Python backend's stub finds its packages (numpy, the model's) in the first
    environment on PATH, as nvidia-pytriton starts it."""
    return env | {"PATH": os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])}


@functools.cache
def pytriton_server_home(python: str) -> Path:
    """The folder of the Triton server nvidia-pytriton installs (bin/, backends/)."""
    find = "import pathlib, pytriton; print(pathlib.Path(pytriton.__file__).parent)"
    package = subprocess.run([python, "-c", find], capture_output=True, text=True, check=True)
    return Path(package.stdout.strip()) / "tritonserver"


def repo_http_port(repo: Path) -> int:
    """The HTTP port settings.json gives: a server without settings.json listens there."""
    port: int = json.loads((repo / "settings.json").read_text())["http_port"]
    return port


def ready_path(contender: Contender) -> str:
    """The readiness poll's path: LitServe answers /health, vLLM lists its model at
    /v1/models once its engine is up, the others answer V2's ready."""
    return {LITSERVE: "/health", VLLM: "/v1/models"}.get(contender.kind, READY_PATH)


def ready_port(contender: Contender, ports: Sequence[int]) -> int:
    """The port answering the readiness poll: Envoy's floor has only the gRPC one."""
    return ports[1] if contender.kind == ENVOY_FLOOR else ports[0]


def start(
    contender: Contender,
    programs: Programs,
    repo: Path,
    ports: Sequence[int],
    protocol_processes: int | None = None,
    own_session: bool = True,
) -> ServerProcess:
    command, env = command_and_env(contender, programs, repo, ports[1], protocol_processes)
    return spawn(
        command,
        repository=repo,
        cwd=repo,
        log_path=repo / "server.log",
        ports=ports,
        env=env,
        ca_file=contender.ca_file,
        own_session=own_session,
    )


# --------------------------------------------------------------------------- CPU


def _cpu_ticks(stat_text: str) -> tuple[int, int]:
    """(process group id, user+system ticks) from a /proc/<pid>/stat line."""
    fields = stat_text.rsplit(")", 1)[1].split()  # past the command name, which may hold spaces
    return int(fields[2]), int(fields[11]) + int(fields[12])


def group_cpu_seconds(pgid: int) -> float | None:
    """User+system CPU seconds of every live process in the process group ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    ticks = 0
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                group, used = _cpu_ticks((entry / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue  # the process ended meanwhile
            ticks += used if group == pgid else 0
    return ticks / os.sysconf("SC_CLK_TCK")


def group_rss_bytes(pgid: int) -> int | None:
    """Resident memory, in bytes, of every live process in the process group ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    pages = 0
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                group, resident = int(fields[2]), int(fields[21])
            except (OSError, IndexError, ValueError):
                continue  # the process ended meanwhile
            pages += resident if group == pgid else 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def main_thread_cpu_seconds(pid: int) -> float | None:
    """User+system CPU seconds of the main thread of process ``pid``."""
    try:
        _, used = _cpu_ticks(Path(f"/proc/{pid}/task/{pid}/stat").read_text())
    except (OSError, IndexError, ValueError):
        return None
    return used / os.sysconf("SC_CLK_TCK")
