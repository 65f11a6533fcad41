"""When the drain cuts what still runs, and when the servers stop waiting (shutdown.py)."""

from __future__ import annotations

import pytest

from inferd.server.shutdown import cut_after, servers_stop_after


@pytest.mark.parametrize(
    ("grace", "cut", "servers_stop"),
    [
        (25.0, 23.0, 24.0),  # the default: two seconds kept for the cut's answers and the exit
        (3.0, 2.0, 2.5),  # a short grace keeps a third of it
        (0.3, 0.2, 0.25),
    ],
)
def test_the_cut_and_the_servers_stop_come_before_the_grace_period_ends(
    grace: float, cut: float, servers_stop: float
) -> None:
    assert cut_after(grace) == pytest.approx(cut)
    assert servers_stop_after(grace) == pytest.approx(servers_stop)
