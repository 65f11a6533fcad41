"""What pools started later (per environment, per forked model) are told: the same
as the running ones, including what was sent while they were starting."""

from __future__ import annotations

import logging

from inferd.settings import ServerSettings
from inferd.triton.logsettings import SetLogLevel
from inferd.workers.base import Control
from inferd.workers.pool import ProcessPool
from inferd.workers.pool_defaults import LaterPools


class Told(ProcessPool):
    """A pool (never started) that notes the control messages it is given."""

    def __init__(self) -> None:
        super().__init__(ServerSettings(parallel_workers=1))
        self.told: list[Control] = []

    def control(self, message: Control) -> None:
        self.told.append(message)


def test_a_pool_starting_when_a_message_is_sent_is_told_it_too() -> None:
    # A pool is listed among the running ones only once it has started (its workers
    # up): a log level set meanwhile must still reach it, or its workers keep the old
    # level for good (their restarts repeat what they were told).
    later = LaterPools()
    before = SetLogLevel(logging.INFO)
    later.control(before, running=[])
    starting = Told()
    later.started(starting)
    assert starting.told == [before]
    meanwhile = SetLogLevel(logging.DEBUG)
    later.control(meanwhile, running=[])  # the caller does not list it yet
    assert starting.told == [before, meanwhile]


def test_a_running_pool_is_told_a_message_once() -> None:
    later = LaterPools()
    pool = Told()
    later.started(pool)
    message = SetLogLevel(logging.WARNING)
    later.control(message, running=[pool])
    assert pool.told == [message]
