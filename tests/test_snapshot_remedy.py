"""docs/deployment.md's remedy for a snapshot that is not its events' fold, run as
written on a SQLite store: the library stores a stream's id without dashes, but a row
stored by hand may carry them (`audit verify` reads it as the same stream and names it
BROKEN), and the statement the document gave named the undashed spelling only, so
such a row stayed and the verdict with it (ADR-0103's finding, ADR-0106)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from uuid import UUID

from conftest import action_spec, create_dynamic, plan

from workcenter.application import WorkCenter
from workcenter.service_layer.repository import SNAPSHOT_INTERVAL

DEPLOYMENT = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"


def documented_statement(stream: UUID) -> str:
    """The SQLite statement of the remedy, its placeholder filled as it asks."""
    match = re.search(r'^sqlite3 workcenter\.db "([^"]+)"$', DEPLOYMENT.read_text(), re.M)
    assert match is not None, "deployment.md gives no sqlite3 statement"
    statement = match.group(1)
    [placeholder] = re.findall(r"<stream id[^>]*>", statement)
    spelled = stream.hex if "without dashes" in placeholder else str(stream)
    return statement.replace(placeholder, spelled)


def snapshotted(db_path: Path) -> tuple[UUID, UUID]:
    """Two Actions whose streams were snapshotted."""
    with WorkCenter.open(db_path) as wc:
        plan(wc, create_dynamic(wc).id, action_spec(), action_spec("test", "Run it"))
        streams = []
        for _ in range(2):
            claimed = wc.claim_next("w", lease_seconds=3_600)
            assert claimed is not None
            while wc.action(claimed.action_id).version < SNAPSHOT_INTERVAL:
                assert wc.renew_lease(claimed)
            streams.append(claimed.action_id)
    return streams[0], streams[1]


def rows_of(con: sqlite3.Connection, stream: UUID) -> list[str]:
    return [
        spelled
        for (spelled,) in con.execute("SELECT originator_id FROM stored_snapshots")
        if UUID(spelled) == stream
    ]


def test_the_documented_statement_removes_a_streams_snapshots_however_spelled(
    db_path: Path,
) -> None:
    stream, other = snapshotted(db_path)
    con = sqlite3.connect(db_path)
    with con:
        # By hand, dashed, at versions the events never reached: not the fold.
        for spelled, version in ((str(stream), 9_001), (str(stream).upper(), 9_002)):
            con.execute(
                "INSERT INTO stored_snapshots SELECT ?, ?, topic, state FROM stored_snapshots"
                " WHERE originator_id = ?",
                (spelled, version, stream.hex),
            )
    assert len(rows_of(con, stream)) == 3
    with WorkCenter.open(db_path, create=False) as wc:
        named = {s.stream for s in wc.maintenance.verify_history().mismatched_snapshots}
        assert named == {stream}
    with con:
        con.execute(documented_statement(stream))
    assert rows_of(con, stream) == []
    assert rows_of(con, other) == [other.hex]  # another stream's are kept
    con.close()
    with WorkCenter.open(db_path, create=False) as wc:
        assert wc.maintenance.verify_history().ok
        assert wc.action(stream).version >= SNAPSHOT_INTERVAL  # replayed from its events
