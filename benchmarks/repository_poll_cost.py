"""What one look at the model repository costs with ``repository_poll_secs`` on.

Builds a repository of ``--models`` model folders of ``--files`` files each (in a
temporary folder), then takes its fingerprint (stat calls only, as every poll does)
``--polls`` times per round and reports, as medians over rounds: the CPU and wall
time of one look, per look and per file; and how late a 1 ms ticker on the event
loop ran at most while the looks ran through ``asyncio.to_thread`` (as the server
runs them) against the same ticker with no looks: what polling does to requests.

    python -m benchmarks.repository_poll_cost [--models 200] [--files 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common.models import write_model_folder
from inferd.serving.repository_watch import fingerprint_repository

TICK = 0.001


def build(root: Path, models: int, files: int) -> None:
    for index in range(models):
        folder = write_model_folder(root, f"model-{index}", "runtime.Model", name=None)
        (folder / "weights").mkdir()
        for part in range(files - 1):
            (folder / "weights" / f"part-{part}.bin").write_bytes(b"w" * 1024)


def look(root: Path, polls: int) -> tuple[float, float]:
    """CPU and wall seconds of one look (the mean over ``polls`` looks)."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(polls):
        fingerprint_repository(root)
    return (time.process_time() - cpu) / polls, (time.perf_counter() - wall) / polls


async def worst_lateness(root: Path | None, polls: int, seconds: float) -> float:
    """The most a ticker sleeping TICK woke late, while looks run in a thread (or not)."""
    worst = 0.0
    done = asyncio.Event()

    async def looks() -> None:
        if root is not None:
            for _ in range(polls):
                await asyncio.to_thread(fingerprint_repository, root)
        else:
            await asyncio.sleep(seconds)
        done.set()

    task = asyncio.create_task(looks())
    while not done.is_set():
        before = time.perf_counter()
        await asyncio.sleep(TICK)
        worst = max(worst, time.perf_counter() - before - TICK)
    await task
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--files", type=int, default=10, help="files per model folder")
    parser.add_argument("--polls", type=int, default=10, help="looks per round")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        build(root, options.models, options.files)
        total = options.models * options.files
        cpu, wall, busy, idle = [], [], [], []
        for _ in range(options.rounds):
            round_cpu, round_wall = look(root, options.polls)
            cpu.append(round_cpu)
            wall.append(round_wall)
            busy.append(asyncio.run(worst_lateness(root, options.polls, 0)))
            idle.append(asyncio.run(worst_lateness(None, 0, round_wall * options.polls)))
    median_cpu, median_wall = statistics.median(cpu), statistics.median(wall)
    print(f"{options.models} model folders, {total} files; medians over {options.rounds} rounds")
    print(
        f"one look: {median_cpu * 1e3:.1f} ms CPU, {median_wall * 1e3:.1f} ms wall "
        f"({median_cpu / total * 1e6:.1f} us CPU per file)"
    )
    print(
        f"event loop, worst lateness of a {TICK * 1e3:.0f} ms sleep: "
        f"{statistics.median(busy) * 1e3:.1f} ms while looking, "
        f"{statistics.median(idle) * 1e3:.1f} ms without"
    )


if __name__ == "__main__":
    main()
