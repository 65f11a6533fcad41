"""What a fork parent must not have done before it forks a model's workers.

``fork()`` copies the calling thread only. A Python thread running in the parent
(a runtime's background thread, an executor's worker) is missing in the child,
and a lock it held stays locked there forever; an event loop's selector and
wake-up pipe would be shared by every child; a CUDA context cannot be used in a
child at all; grpc's core, once a channel or server is made, keeps threads and
polling fds of its own (importing grpc alone starts nothing). So the parent
checks, right before each fork, that none of these happened while it imported
and loaded the model (:func:`fork_hazards`), and a model whose load did any of
them is loaded in each worker instead. Native threads are told apart by name:
libraries that keep threads of their own name them (grpc's do), while pools
that re-create themselves after a fork (OpenBLAS, through ``pthread_atfork``)
leave theirs unnamed.

A socket the load opened and kept (a runtime's connection to a database or a
feature store) would be one connection shared by every forked worker: their
requests and replies would interleave on it, and a worker could read another's
answer. So the parent notes its sockets before the load and refuses to fork if
the load left any open (:func:`sockets_left_open`).

GNU OpenMP (libgomp, which scikit-learn, XGBoost, LightGBM and torch wheels carry)
is not fork-safe: once a parallel region has run in a process, a child forked
from it hangs in its first parallel region. XGBoost's and LightGBM's model loading
runs such regions. That leaves no Python thread to see, so after the load the
parent forks a probe that runs one parallel region of two threads in each libgomp
it has loaded (:func:`openmp_hazard`); a probe that does not finish makes the
model unforkable. To keep such models forkable, a fork parent holds OpenMP to one
thread while it loads (:func:`hold_openmp`: ``OMP_NUM_THREADS=1`` for the
libraries loaded later, ``omp_set_num_threads(1)`` for those loaded already): a
team of one starts no pool, so nothing is left to hang. Each forked child gives
OpenMP its threads back (:func:`release_openmp`) and starts a pool of its own at
its first parallel region.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path

# The CUDA driver library: loaded by the first CUDA call (libcudart loads it lazily).
CUDA_DRIVER = "libcuda.so"
# GNU OpenMP's runtime, as its file names go (libgomp.so.1, libgomp-a34b3233.so.1.0.0).
GNU_OPENMP = "libgomp"
# How long the OpenMP probe may take; it takes milliseconds unless it hangs.
PROBE_TIMEOUT = 3.0
# The threads of the probe's parallel region: a team of more than one uses the pool.
PROBE_THREADS = 2
OMP_NUM_THREADS = "OMP_NUM_THREADS"


def fork_hazards() -> list[str]:
    """What in this process makes forking it unsafe, in words; [] when nothing does."""
    hazards = []
    main = threading.main_thread()
    others = [thread.name for thread in threading.enumerate() if thread is not main]
    if others or threading.active_count() != 1:
        hazards.append(f"threads are running ({', '.join(others) or 'unnamed'})")
    if asyncio._get_running_loop() is not None:
        hazards.append("an event loop is running")
    if cuda_initialized():
        hazards.append("CUDA is initialized")
    named = named_native_threads()
    if named:  # grpc's core once a channel or server is made, for one
        hazards.append(f"native threads are running ({', '.join(named)})")
    return hazards


def named_native_threads() -> list[str]:
    """The names of this process's OS threads named otherwise than its main thread.

    A thread inherits its creator's name; libraries that keep threads of their own
    and rely on them (grpc's core: ``grpc_global_tim``, ``event_engine``) name them.
    The unnamed ones are Python's (seen above) or pools that survive a fork
    (OpenBLAS) or are probed (OpenMP)."""
    try:
        main = Path("/proc/self/comm").read_text().strip()
        tasks = list(Path("/proc/self/task").iterdir())
    except OSError:  # not Linux
        return []
    names = set()
    for task in tasks:
        try:
            names.add((task / "comm").read_text().strip())
        except OSError:  # ended meanwhile
            continue
    return sorted(names - {main})


def open_sockets() -> set[str]:
    """The sockets this process holds, by inode (``socket:[1234]``); empty off Linux."""
    try:
        fds = list(Path("/proc/self/fd").iterdir())
    except OSError:
        return set()
    found = set()
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile (the listing's own descriptor, for one)
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def sockets_left_open(before: set[str]) -> str:
    """Why a child forked now would share a connection ("" when it would not): sockets
    open now that were not in ``before`` (taken before the model's load)."""
    left = open_sockets() - before
    if not left:
        return ""
    return (
        f"{len(left)} socket(s) it opened are still open, which every forked worker "
        "would share (their replies would mix)"
    )


def cuda_initialized() -> bool:
    """Whether this process has initialized CUDA (torch's flag, or the driver loaded)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: torch's flag is all there is
        return False
    return CUDA_DRIVER in maps


def _mapped_libraries(name: str) -> list[str]:
    """Paths of the loaded shared libraries whose file name starts with ``name``."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    paths = {line.split()[-1] for line in maps.splitlines() if f"/{name}" in line}
    return sorted(path for path in paths if Path(path).name.startswith(name))


def openmp_hazard(timeout: float = PROBE_TIMEOUT) -> str:
    """Why a child forked now would hang in OpenMP ("" when it would not): a probe
    child runs one parallel region in each libgomp loaded here."""
    libraries = _mapped_libraries(GNU_OPENMP)
    if not libraries:
        return ""
    pid = os.fork()
    if pid == 0:
        _run_parallel_regions(libraries)
    deadline = time.monotonic() + timeout
    while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return (
                f"an OpenMP thread pool ({', '.join(libraries)}) ran, which hangs forked children"
            )
        time.sleep(0.002)
    if os.waitstatus_to_exitcode(ended[1]) != 0:
        return "the OpenMP probe failed in a forked child"
    return ""


def hold_openmp() -> str | None:
    """Hold GNU OpenMP to one thread in this process (a fork parent, before it loads
    models): what ``OMP_NUM_THREADS`` was (None: unset), for :func:`release_openmp`."""
    before = os.environ.get(OMP_NUM_THREADS)
    os.environ[OMP_NUM_THREADS] = "1"  # read by each libgomp as it is loaded
    _set_openmp_threads(1)  # those loaded already read it before
    return before


def release_openmp(setting: str | None) -> None:
    """In a forked child of a parent that held OpenMP: the threads OpenMP would have
    had (``setting``, the user's ``OMP_NUM_THREADS``; unset: the usable cores)."""
    if setting is None:
        os.environ.pop(OMP_NUM_THREADS, None)
    else:
        os.environ[OMP_NUM_THREADS] = setting
    first = (setting or "").split(",")[0].strip()
    threads = int(first) if first.isdigit() and int(first) > 0 else _usable_cores()
    _set_openmp_threads(threads)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _set_openmp_threads(threads: int) -> None:
    for path in _mapped_libraries(GNU_OPENMP):
        try:
            ctypes.CDLL(path).omp_set_num_threads(threads)
        except (OSError, AttributeError):  # not a usable libgomp: the probe tells
            continue


def _run_parallel_regions(libraries: list[str]) -> None:
    """In the probe child: ``GOMP_parallel(free, NULL, 2, 0)`` in each libgomp (each
    of the team's 2 threads calls free(NULL), which does nothing), then exit. A team
    of one would not use a pool the parent left behind, so it would not tell."""
    code = 1
    try:
        free = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p)
        for path in libraries:
            parallel = ctypes.CDLL(path).GOMP_parallel
            parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
            parallel.restype = None
            parallel(free, None, PROBE_THREADS, 0)
        code = 0
    finally:
        os._exit(code)
