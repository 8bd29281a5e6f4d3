"""Sixteen worker processes on one PostgreSQL store (issue 18, ADR-0054).

16 processes run the library's worker loop over 160 claimable Actions, with the
read models kept inline (the default deployment). No Action is claimed twice (one
Run each, every claim a worker saw a different Action), every Action completes
once, the hash chain verifies and the views equal a rebuild. The claims do not
herd: the candidates a claim tried (``Claim.candidates_tried``, counted, not
timed) average at most 1.5; before claims held their candidates, 4 workers
averaged 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import postgres
import pytest
from test_restart import (
    POOL,
    WORKER,
    all_completed,
    check_no_loss,
    read_records,
    seed,
    stop_when_ready,
)
from test_restart import views_equal_a_rebuild as rebuilt_views_equal

from workcenter.application import WorkCenter

WORKERS = 16
ITEMS = 160
TRIED_AT_MOST = 1.5


@pytest.fixture
def pg_url() -> Iterator[str]:
    with postgres.fresh_schema("wc16") as url:
        yield url


def test_sixteen_workers_claim_each_action_once_without_herding(
    pg_url: str, tmp_path: Path
) -> None:
    items = seed(pg_url, ITEMS)
    log = tmp_path / "workers.jsonl"
    env = os.environ | POOL
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), pg_url, f"w{k}", str(log), "0.02", "60"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / f"w{k}.err", "wb"),  # noqa: SIM115
        )
        for k in range(WORKERS)
    ]
    try:
        with WorkCenter.open(pg_url, boot_id="controller", create=False) as wc:
            deadline = time.monotonic() + 150
            while not all_completed(wc, items):
                assert time.monotonic() < deadline, "the workers did not drain the queue"
                assert all(w.poll() is None for w in workers), "a worker died"
                time.sleep(0.5)
            stop_when_ready(workers, log)
            stats = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
            assert [w.returncode for w in workers] == [0] * WORKERS
            records = read_records(log)
            claims = [r for r in records if r[1] == "claimed"]
            actions = [r[3].split()[0] for r in claims]
            # No double claim: each Action claimed once, by one worker, with one Run.
            assert len(claims) == len(set(actions)) == ITEMS
            assert sum(s["claimed"] for s in stats) == ITEMS
            for item_id in items:
                [entry] = wc.work_item(item_id).plan
                assert len(wc.action(entry.action_id).runs) == 1
            check_no_loss(wc, items, records)
            assert wc.maintenance.verify_history().ok
            rebuilt_views_equal(wc)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    # More than a few workers took part, and the claims did not herd.
    assert len({r[0] for r in claims}) >= WORKERS // 2
    tried = [int(r[3].split()[1]) for r in claims]
    assert sum(tried) / len(tried) <= TRIED_AT_MOST, sorted(tried)[-10:]
