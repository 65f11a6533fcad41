"""A module's server run two ways: as the e2e fixture starts it, and with two
protocol processes.

What holds for the whole server (shared memory registered through one
connection, statistics, the repository API, metrics, access rules, TLS files
read again) must hold whichever process a client's connection lands on; the
modules that check such behaviour parametrise their server fixture with
:data:`BOTH_WAYS` and add ``request.param`` to its settings.
"""

from __future__ import annotations

import pytest

TWO_PROTOCOL_PROCESSES = {"protocol_processes": 2}

# Settings added to a server's: none (the fixture's default, one protocol process
# unless $INFERD_TEST_PROTOCOL_PROCESSES says), or two protocol processes.
BOTH_WAYS = [
    pytest.param({}, id="default"),
    pytest.param(TWO_PROTOCOL_PROCESSES, id="2-protocol-processes"),
]
