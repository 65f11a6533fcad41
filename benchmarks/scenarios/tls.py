"""What TLS costs: inferd serving REST over TLS vs plain HTTP, in one run."""

from __future__ import annotations

import atexit
import json
import shutil
import ssl
import tempfile
import urllib.request
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from benchmarks.common.certs import Authority
from benchmarks.common.serverproc import ServerProcess

from ..loadgen import Target
from ..servers import BASELINE_SUFFIX, INFERD, Contender, baseline_pairs
from .base import Case, VerificationError
from .rest import REQUEST, Rest

TLS_ON, TLS_OFF = "tls-on", "tls-off"


class Tls(Rest):
    name = "tls"
    description = """What TLS costs: the rest scenario, inferd only, TLS on vs off.

Each round runs inferd twice on the same model and load: serving REST over TLS
(ssl_certfile / ssl_keyfile: a certificate made for the run, signed by a CA made
for the run) and over plain HTTP. wrk keeps its connections open, so the figures
are the steady request rate with every request and answer encrypted; the
handshakes happen once per connection, during the warm-up."""
    compares_mlserver = False

    @cached_property
    def authority(self) -> Authority:
        folder = Path(tempfile.mkdtemp(prefix="inferd-bench-tls-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return Authority(folder)

    def contenders(self) -> list[Contender]:
        pair = self.authority.server()
        tls = {"ssl_certfile": str(pair.certfile), "ssl_keyfile": str(pair.keyfile)}
        return [
            Contender(TLS_ON, INFERD, tls, ca_file=self.authority.certfile),
            Contender(TLS_OFF, INFERD),
        ]

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        tree_pairs = [(TLS_ON + tree, TLS_OFF + tree) for tree in ("", BASELINE_SUFFIX)]
        return [p for p in tree_pairs if set(p) <= set(labels)] + baseline_pairs(labels)

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        url = f"{server.url}/v2/models/{self.model_of(contender, case)}/infer"
        body = json.dumps(REQUEST).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        context = ssl.create_default_context(cafile=str(self.authority.certfile))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        with opener.open(request, timeout=30) as answer:
            status, output = answer.status, json.load(answer)["outputs"][0]
        data = np.asarray(output["data"]).ravel()
        if status != 200 or data.size != 1 or int(data[0]) != self.expected_class:
            raise VerificationError(f"POST {url}: expected [{self.expected_class}], got {output}")
        return Target(url, body)
