"""What a command costs a PostgreSQL server in round trips, counted on the connection:
the twin of ``sql_counts`` (which counts SQLite's statements), for issue 18's
"few round trips per command" (ADR-0051).

A round trip is one wait on the connection in which the client, having sent
something, waits for the server's reply: psycopg runs every exchange with the
server as a generator, which yields ``Wait.R`` when it must wait to read. One
statement outside a pipeline, a ``BEGIN`` or a ``COMMIT`` sent on its own, a
pipeline's sync (also the one that ends it) and a fetch that flushes a
pipeline are each one round trip, even when the reply was in before the client
asked (a pipeline may read while it sends); statements queued in a pipeline
and sent with the next sync are not. The
count is taken on every connection the store's pool hands out meanwhile, so
reads (loads, the work queue) are counted with the write.

``python -m workcenter.adapters.round_trips URL`` prints the round trips per
command kind on a fresh schema of the server at URL.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg.waiting import Wait

from workcenter.adapters.sql_counts import CRITERIA, REPORT, create
from workcenter.application import Claim, WorkCenter


@dataclass
class RoundTrips:
    """Round trips seen on the traced connections, in total and per label."""

    trips: int = 0
    by_label: Counter[str] = field(default_factory=Counter)
    label: str = ""

    def see(self) -> None:
        self.trips += 1
        self.by_label[self.label] += 1


# psycopg's pipeline exchanges that wait for the server's answers.
_PIPELINE_WAITS = frozenset({"_sync_gen", "_exit_gen", "_fetch_gen"})


def _counting(gen: Generator[Any, Any, Any], counts: RoundTrips) -> Generator[Any, Any, Any]:
    """``gen`` as it is, counting one round trip if it is a pipeline's wait for answers
    or if it ever waits to read."""
    waited = getattr(gen, "__name__", "") in _PIPELINE_WAITS
    if waited:
        counts.see()
    value: Any = None
    try:
        while True:
            state = gen.send(value)
            if not waited and state == Wait.R:
                waited = True
                counts.see()
            value = yield state
    except StopIteration as stop:
        return stop.value


@contextmanager
def traced(datastore: Any) -> Iterator[RoundTrips]:
    """Count the round trips of every connection ``datastore``'s pool hands out meanwhile."""
    counts = RoundTrips()
    pool = datastore.pool
    handed_out = pool.getconn
    seen: list[Any] = []

    def getconn(*args: Any, **kwargs: Any) -> Any:
        conn = handed_out(*args, **kwargs)
        if conn not in seen:
            waiting = conn.wait

            def wait(gen: Any, *a: Any, **k: Any) -> Any:
                return waiting(_counting(gen, counts), *a, **k)

            conn.wait = wait
            seen.append(conn)
        return conn

    pool.getconn = getconn
    try:
        yield counts
    finally:
        del pool.getconn
        for conn in seen:
            del conn.wait


# --- per command kind ----------------------------------------------------------------


def _command_kinds(wc: WorkCenter) -> dict[str, Callable[[], object]]:
    """One unit of each command kind a worker and its metered provider send, in order;
    each step runs on the state the steps before it left."""
    state: dict[str, Any] = {}

    def claim() -> None:
        found = wc.claim_next("counting-worker", lease_seconds=60)
        if not isinstance(found, Claim):
            raise RuntimeError("nothing was claimable")
        state["claim"] = found

    def reserve() -> None:
        claimed = state["claim"]
        admission = wc.reserve_request(
            claimed.work_item_id,
            request={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64},
            run_id=claimed.run_id,
        )
        if not admission.allowed:
            raise RuntimeError(f"the reservation was denied: {admission.code}")
        state["reservation"] = admission.request_id

    def settle() -> None:
        wc.settle_request(
            state["claim"].work_item_id,
            state["reservation"],
            usage={"input_tokens": 10, "output_tokens": 5},
        )

    return {
        "create": lambda: create(wc, 0),
        "claim": claim,
        "renew": lambda: wc.renew_lease(state["claim"], lease_seconds=60),
        "reserve": reserve,
        "settle": settle,
        "finish": lambda: wc.finish_run(state["claim"], REPORT),
    }


def per_command(wc: WorkCenter, rounds: int = 5) -> dict[str, float]:
    """Round trips per command kind, averaged over ``rounds`` after one warm-up round
    (the first round fills the caches a long-running worker has filled)."""
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    kinds = _command_kinds(wc)
    for work in kinds.values():
        work()
    with traced(datastore) as counts:
        for _ in range(rounds):
            for label, work in kinds.items():
                counts.label = label
                work()
    return {label: counts.by_label[label] / rounds for label in kinds}


def round_trips(url: str, rounds: int = 5) -> dict[str, float]:
    """``per_command`` on a fresh schema of the server at ``url``, dropped after."""
    import psycopg

    schema = f"workcenter_round_trips_{uuid.uuid4().hex[:8]}"
    wc = WorkCenter.open(f"{url}?schema={schema}")
    try:
        return per_command(wc, rounds)
    finally:
        wc.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


__all__ = ["CRITERIA", "RoundTrips", "per_command", "round_trips", "traced"]

if __name__ == "__main__":  # pragma: no cover
    target = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/test"
    print(json.dumps(round_trips(target), indent=2))
