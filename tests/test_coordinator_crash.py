"""A Coordinator step killed (SIGKILL, a real process) after its reservation and
before the response: the reservation stays charged, the turn is recovered, and
nothing is applied twice (coordinator.md 2.4, 3.3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import FakeClock
from domain_states import brief, decision

from workcenter.adapters.providers.scripted import ScriptedProvider
from workcenter.application import WorkCenter

TESTS = Path(__file__).parent

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from workcenter.application import WorkCenter

    class DiesMidCall:
        def answer(self, request, before_request):
            before_request()                      # reserved and dispatching: now die
            os.kill(os.getpid(), signal.SIGKILL)

    wc = WorkCenter.open(sys.argv[1], boot_id="doomed")
    item = wc.create_work_item(
        title="Crash", goal="Survive a crash", acceptance_criteria=["It recovers"],
        delivery_target="response", start=True,
    )
    print(item.id, flush=True)
    wc.coordinate_once(DiesMidCall())
    print("not killed", flush=True)
    """
)


def test_a_step_killed_mid_dispatch_leaves_the_reservation_charged(db_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(db_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    item_id = child.stdout.split()[0]
    assert "not killed" not in child.stdout

    # A new process, after the dead one's lease ran out.
    clock = FakeClock(datetime.now(UTC) + timedelta(minutes=5))
    with WorkCenter.open(db_path, clock=clock, boot_id="next") as wc:
        item = wc.work_item(item_id)  # type: ignore[arg-type]
        [reservation] = wc.ledger(item.id).reservations.values()
        assert reservation.status == "reserved" and reservation.charged_tokens > 0
        state = wc.conversation(item.id)
        assert state is not None
        assert [p.status for p in state.provider_turns] == ["dispatching"]

        assert wc.recover_coordinator(at_open=True) == 1
        [reservation] = wc.ledger(item.id).reservations.values()
        assert reservation.status == "unknown"  # charged, never refunded
        assert reservation.charged_tokens == reservation.estimated_tokens
        state = wc.conversation(item.id)
        assert state is not None
        assert [p.status for p in state.provider_turns] == ["unknown"]
        assert [t.status for t in state.turns.values()] == ["failed"]
        assert wc.ledger(item.id).coordinator_failures == 1

        # Nothing of the dead turn applies, now or later; the item is recoverable.
        plan = json.dumps(decision("create_actions", actions=[brief()]))
        provider = ScriptedProvider([plan, plan])
        assert wc.coordinate_once(provider) == []
        assert wc.work_item(item.id).plan == ()
        posted = wc.post_user_message(item.id, "Plan again please")
        [result] = wc.coordinate_once(provider)
        assert (result.turn_id, result.status) == (posted.turn_id, "decided")
        assert len(wc.work_item(item.id).plan) == 1
        assert len(wc.ledger(item.id).reservations) == 2
