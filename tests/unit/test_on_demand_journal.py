"""The coordinator's journal leaves out loads on request (supervisor/journal.py)."""

from __future__ import annotations

import orjson

from inferd.supervisor.journal import Call, Journal

LOAD = "/v2/repository/models/m/load"


def test_a_load_on_request_is_not_replayed_to_a_process_that_starts() -> None:
    journal = Journal()
    on_request = orjson.dumps({"parameters": {"load_on_request": True, "evict": "x"}})
    journal.applied(Call("POST", LOAD, on_request), b"{}")
    assert journal.calls() == []
    pinned = Call("POST", LOAD, b"")
    journal.applied(pinned, b"{}")
    journal.applied(Call("POST", LOAD, on_request), b"{}")  # a no-op where it is pinned
    assert journal.calls() == [pinned]
