"""What a fork parent must not have done before it forks a model's workers.

``fork()`` copies the calling thread only. A Python thread running in the parent
(a runtime's background thread, an executor's worker) is missing in the child,
and a lock it held stays locked there forever; an event loop's selector and
wake-up pipe would be shared by every child; a CUDA context cannot be used in a
child at all; grpc's core keeps threads and polling fds of its own. So the
parent checks, right before each fork, that none of these happened while it
imported and loaded the model (:func:`fork_hazards`), and a model whose load did
any of them is loaded in each worker instead. Native thread pools that re-create
themselves after a fork (OpenBLAS, through ``pthread_atfork``) are not Python
threads and are allowed.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

# The CUDA driver library: loaded by the first CUDA call (libcudart loads it lazily).
CUDA_DRIVER = "libcuda.so"


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
    if "grpc" in sys.modules:
        hazards.append("grpc is imported (its core keeps threads of its own)")
    return hazards


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
