"""``metrics_port`` when ``protocol_processes`` > 1: the protocol processes' metrics, summed.

Each protocol process serves its own Prometheus registry (observability/metrics.py)
on its private ``metrics-<i>.sock``; the supervisor serves ``metrics_endpoint`` on
the public ``metrics_port`` by asking every one of them and merging the answers
into one exposition (``exposition.py`` says how each sample is merged), so one
scrape gives the server's totals.

The scraper's ``Accept`` header and query string go to every process, so each
answers in the format the scraper negotiated (text or OpenMetrics) and keeps only
the ``name[]`` series it asked for, as one server's endpoint does; the sum is
gzipped here when the scraper accepts it.

A process that does not answer (restarting, or busier than ``SCRAPE_TIMEOUT_S``) is
left out and logged; the answer's ``protocol_processes_answered`` gauge says how
many are in it, beside ``protocol_processes``, how many there are. Its counts are
not left out: the counters stay whole while a process is missing and after it
restarted, see :class:`Totals`.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs

from prometheus_client.exposition import gzip_accepted
from starlette.datastructures import Headers

from inferd.observability.metrics import ASGIApp, Receive, Scope, Send, endpoint_app
from inferd.supervisor import exposition, process_memory
from inferd.supervisor.exposition import Exposition
from inferd.supervisor.fanout import Answer, fan_out
from inferd.supervisor.paths import PrivatePaths

logger = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 5.0  # a protocol process busier than this is left out of one answer
ANSWERED = "protocol_processes_answered"
EXPECTED = "protocol_processes"
START_TIME = "process_start_time_seconds"
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # what a process answers by default
OPENMETRICS = "application/openmetrics-text"


@dataclass
class _Seen:
    started: float | None
    counts: Exposition


class Totals:
    """Keeps the server's counters from going down when a protocol process restarts or
    misses a scrape: Prometheus reads any drop as a reset, and its ``rate`` would count
    the whole total again. A process that does not answer is counted with what it had
    at its last answer; one whose ``process_start_time_seconds`` changed (restarted,
    its counts from zero) has what it had before kept in ``retired``, added to every
    later answer. Counts since a process's last answer before it died are lost; so is
    this carrying where the process start time is not exported (not Linux)."""

    def __init__(self) -> None:
        self._seen: dict[int, _Seen] = {}
        self._retired: Exposition = {}

    def expositions(self, parsed: Sequence[Exposition | None]) -> list[Exposition]:
        """What to merge for one answer, from each process's families (None: no answer)."""
        merged: list[Exposition] = []
        for index, families in enumerate(parsed):
            seen = self._seen.get(index)
            if families is None:
                if seen is not None:
                    merged.append(seen.counts)
                continue
            started = exposition.first_value(families, START_TIME)
            if seen is not None and started is not None and started != seen.started:
                self._retired = exposition.merge([self._retired, seen.counts])
            self._seen[index] = _Seen(started, exposition.monotonic_part(families))
            merged.append(families)
        return [*merged, self._retired]


def parse(answer: Answer) -> Exposition | None:
    """One process's families, or None (logged) when it gave none."""
    if not answer.ok:
        why = answer.error or f"HTTP {answer.status}: {answer.body[:200]!r}"
        logger.warning("Protocol process metrics at %s left out: %s", answer.socket, why)
        return None
    try:
        return exposition.read(answer.body.decode())
    except (ValueError, UnicodeDecodeError) as error:
        logger.warning("Protocol process metrics at %s left out: %s", answer.socket, error)
        return None


def answered_gauges(answered: int, expected: int) -> list[exposition.Family]:
    """Whether this answer holds the whole server: how many processes it sums, of how many."""
    return [
        exposition.gauge(
            EXPECTED,
            "Processes the server runs its models in: the protocol processes, and the "
            "model host when one runs",
            expected,
        ),
        exposition.gauge(
            ANSWERED,
            "Protocol processes whose metrics this answer sums (fewer than "
            "protocol_processes: the others did not answer, their counters keep their "
            "last values)",
            answered,
        ),
    ]


def server_metrics(
    answers: Sequence[Answer], totals: Totals | None = None, names: frozenset[str] | None = None
) -> Exposition:
    """The merged families of ``answers`` (one per protocol process, in index order) and
    how many answered; with ``totals``, counters kept whole across restarts; with
    ``names`` (the scraper's ``name[]``), our own gauges only if named."""
    parsed = [parse(answer) for answer in answers]
    answered = sum(families is not None for families in parsed)
    if totals is None:
        expositions = [families for families in parsed if families is not None]
    else:
        expositions = totals.expositions(parsed)
    merged = exposition.merge(expositions)
    for family in answered_gauges(answered, len(answers)):
        if names is None or family.name in names:
            merged[family.name] = family
    return merged


def content_type(answers: Sequence[Answer]) -> str:
    """The format the processes answered in (they all negotiate alike)."""
    for answer in answers:
        if answer.ok and "content-type" in answer.headers:
            return answer.headers["content-type"]
    return TEXT_FORMAT


def build_metrics_app(
    paths: PrivatePaths,
    count: int | Callable[[], int],
    endpoint: str,
    pids: Callable[[], list[tuple[str, int]]] | None = None,
    timeout_s: float = SCRAPE_TIMEOUT_S,
) -> ASGIApp:
    """The app the supervisor serves on ``metrics_port``: ``endpoint`` answers the sum of
    processes 0 to ``count``-1 (a callable: how many now; the model host, process N,
    counts once it runs), each asked at the same ``endpoint`` on its
    ``metrics-<i>.sock``; any other path is a 404 that says where. ``pids``: the
    server's processes by role, whose memory each answer reports (process_memory.py)."""
    processes = count if callable(count) else lambda: count
    path = "/" + endpoint.strip("/")
    totals: dict[str, Totals] = {}  # by format: a counter's family is named per format

    async def scrape(scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        query = scope.get("query_string", b"").decode()
        asked = {"accept": headers.get("accept", ""), "accept-encoding": "identity"}
        target = f"{path}?{query}" if query else path
        sockets = [paths.metrics(index) for index in range(processes())]
        answers = await fan_out(sockets, "GET", target, headers=asked, timeout_s=timeout_s)
        kind = content_type(answers)
        names = parse_qs(query).get("name[]")
        # A filtered scrape holds some counts only: it neither updates nor uses the totals.
        keep = None if names else totals.setdefault(kind.partition(";")[0], Totals())
        merged = server_metrics(answers, keep, frozenset(names) if names else None)
        for family in process_memory.memory_families(pids()) if pids is not None else []:
            if not names or family.name in names:
                merged[family.name] = family
        body = exposition.write(merged.values(), kind.startswith(OPENMETRICS)).encode()
        await _answer(send, body, kind, gzip_accepted(headers.get("accept-encoding", "")))

    return endpoint_app(endpoint, scrape)


def _headers(scope: Scope) -> Mapping[str, str]:
    """The request's headers, a repeated one's values joined with commas (as HTTP
    reads them)."""
    headers = Headers(scope=scope)
    return {name: ",".join(headers.getlist(name)) for name in headers}


async def _answer(send: Send, body: bytes, kind: str, zipped: bool) -> None:
    headers = [(b"content-type", kind.encode())]
    if zipped:
        body = gzip.compress(body)
        headers.append((b"content-encoding", b"gzip"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
