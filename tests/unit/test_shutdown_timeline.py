"""When the drain cuts what still runs, and when the servers and the close stop
waiting (shutdown.py): all before the grace period ends, in that order."""

from __future__ import annotations

import pytest

from inferd.server.shutdown import close_ends_after, cut_after, servers_stop_after


@pytest.mark.parametrize(
    ("grace", "cut", "servers_stop", "close_ends"),
    [
        (25.0, 23.0, 23.5, 24.0),  # the default: two seconds kept after the cut
        (3.0, 2.0, 2.25, 2.5),  # a short grace keeps a third of it
        (0.3, 0.2, 0.225, 0.25),
    ],
)
def test_the_cut_the_servers_and_the_close_end_before_the_grace_period(
    grace: float, cut: float, servers_stop: float, close_ends: float
) -> None:
    assert cut_after(grace) == pytest.approx(cut)
    assert servers_stop_after(grace) == pytest.approx(servers_stop)
    assert close_ends_after(grace) == pytest.approx(close_ends)
