"""Every public command and read of ``WorkCenter`` (and the ledger's Coordinator side,
on the service layer's budget handler) under arbitrary and adversarial
arguments: each call succeeds or raises a ``WorkcenterError`` (never another
exception), and a refused call writes nothing."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

from conftest import (
    BOOT_ID,
    FakeClock,
    action_spec,
    budget_commands,
    claim,
    create_dynamic,
    create_linear,
    plan,
)
from conftest import report as good_report
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain import actor as actors
from workcenter.domain import resource_ledger as rl
from workcenter.domain.errors import WorkcenterError

SURROGATE = "\ud800"

ODD: list[Any] = [
    None, True, False, 0, -1, 1.5, math.nan, math.inf, 10**30, "", " ", SURROGATE,
    "x" * 10_001, b"bytes", [], {}, (1, 2), ["a", 2], {"a": SURROGATE}, object(),
]  # fmt: skip

odd = st.sampled_from(ODD)
texts = st.one_of(st.text(max_size=40), odd)
numbers = st.one_of(st.integers(-3, 60), st.floats(allow_nan=True), odd)
actor_args = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "user:alice",
            "coordinator",
            "operator:ops",
            "worker:w@boot",
            actors.user("bob"),
            actors.OPERATOR,
            "robot:r2",
            "user:",
            ":x",
            "unknown",
            "user:" + "x" * 201,
        ]
    ),
    texts,
)
json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), odd),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


# A report in which one field, at any depth, is any JSON value, the others well formed:
# each is normalised (dropped or ignored) or refused with a typed error. A list as a
# check's status once escaped as TypeError (unhashable) from a set lookup.
def _full_report() -> dict[str, Any]:
    """A report that carries every field and every field of its items."""
    return good_report(
        evidence=[
            {"kind": "test", "label": "pytest", "ref": "src/a.py", "status": "passed"},
            {"tool": "bash", "isError": False},
        ],
        outputs=[{"kind": "file", "label": "a", "ref": "src/a.py", "status": "passed"}],
        response="r",
        waitingReason="w",
        error="",
        failureKind="",
        failureCode="",
        reviewDecision="approved",
        contractPatch={
            "title": "t", "goal": "g", "acceptanceCriteria": ["c"], "deliveryTarget": "response",
        },
    )  # fmt: skip


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field and list entry of ``value``, the report itself left out."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*path, index))
    return found


def _replaced(path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    body = _full_report()
    parent: Any = body
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return body


REPORT_PATHS = _paths(_full_report())
report_fields = st.builds(_replaced, st.sampled_from(REPORT_PATHS), json_like)


class World:
    """A store with items in several states, and the ids and claims that name them."""

    def __init__(self, wc: WorkCenter) -> None:
        self.wc = wc
        dynamic = plan(wc, create_dynamic(wc).id, action_spec(), action_spec("test", "Run it"))
        linear = create_linear(wc)
        self.claim = claim(wc)
        self.items = [dynamic.id, linear.id]
        self.actions = [e.action_id for e in dynamic.plan]
        self.ledgers = [rl.ledger_id_for(i) for i in self.items]

    def ids(self) -> st.SearchStrategy[Any]:
        known = [*self.items, *self.actions, *self.ledgers, self.claim.run_id]
        return st.one_of(
            st.sampled_from(known),
            st.sampled_from(known).map(str),
            st.builds(uuid4),
            st.sampled_from(["abc", "", "not-a-uuid", 5, None, 1.5]),
        )

    def claims(self) -> st.SearchStrategy[Any]:
        ref = self.claim.ref
        swapped = ref.model_copy(update={"action_id": self.items[0]})
        return st.one_of(
            st.just(self.claim),
            st.just(ref),
            st.just(swapped),
            st.builds(
                act.RunRef,
                action_id=st.sampled_from(self.actions),
                run_id=st.builds(uuid4),
                boot_id=st.just(BOOT_ID),
                lease_epoch=st.integers(0, 3),
            ),
            odd,
        )


def _commands(world: World, data: st.DataObject) -> dict[str, Callable[[], Any]]:
    """One call per public command and read, each with drawn arguments."""
    wc = world.wc
    d = data.draw
    ids, claims = world.ids(), world.claims()
    version = st.one_of(st.integers(-1, 40), odd)
    payload = st.one_of(st.dictionaries(st.text(max_size=12), json_like, max_size=4), json_like)
    report = st.one_of(
        st.just(good_report()),
        st.builds(lambda p: {"outcome": "completed", "x": p}, json_like),
        json_like,
        report_fields,
    )
    return {
        "create_work_item": lambda: wc.create_work_item(
            title=d(texts),
            goal=d(texts),
            acceptance_criteria=d(st.one_of(st.lists(texts, max_size=3), odd)),
            delivery_target=d(st.one_of(st.sampled_from(["response", "merge"]), texts)),
            mode=d(st.one_of(st.sampled_from(["dynamic", "linear"]), odd)),
            stages=d(st.one_of(st.none(), st.lists(texts, max_size=3).map(tuple), odd)),
            start=d(st.one_of(st.booleans(), odd)),
            limits=d(
                st.one_of(
                    st.none(),
                    st.dictionaries(
                        texts.filter(lambda t: isinstance(t, str)), numbers, max_size=2
                    ),
                    odd,
                )
            ),
            actor=d(actor_args),
        ),
        "update_contract": lambda: wc.update_contract(
            d(ids),
            expected_version=d(version),
            title=d(st.one_of(st.none(), texts)),
            goal=d(st.one_of(st.none(), texts)),
            acceptance_criteria=d(st.one_of(st.none(), st.lists(texts, max_size=3), odd)),
            actor=d(actor_args),
        ),
        "start": lambda: wc.start(
            d(ids), expected_version=d(st.one_of(st.none(), version)), actor=d(actor_args)
        ),
        "cancel": lambda: wc.cancel(d(ids), reason=d(texts), actor=d(actor_args)),
        "resume": lambda: wc.resume(
            d(ids),
            expected_version=d(version),
            expected_ledger_version=d(version),
            actor=d(actor_args),
        ),
        "retry": lambda: wc.retry(
            d(ids),
            d(ids),
            expected_version=d(version),
            expected_generation=d(st.one_of(st.none(), version)),
            answer=d(texts),
            actor=d(actor_args),
        ),
        "guide": lambda: wc.guide(
            d(ids),
            d(ids),
            expected_version=d(version),
            expected_generation=d(st.one_of(st.none(), version)),
            guidance=d(texts),
            actor=d(actor_args),
        ),
        "plan_actions": lambda: wc.plan_actions(
            d(ids),
            expected_version=d(version),
            actions=d(
                st.one_of(st.lists(st.one_of(st.just(action_spec()), payload), max_size=3), odd)
            ),
            close_actions=d(st.one_of(st.just(()), json_like)),
            supersede_action_ids=d(st.one_of(st.just(()), st.lists(ids, max_size=2), odd)),
            goal_refs=d(st.one_of(st.none(), json_like)),
            rationale=d(texts),
            actor=d(actor_args),
        ),
        "complete": lambda: wc.complete(
            d(ids), expected_version=d(version), completion=d(payload), actor=d(actor_args)
        ),
        "claim_next": lambda: wc.claim_next(
            d(texts), lease_seconds=d(numbers), actor=d(actor_args)
        ),
        "renew_lease": lambda: wc.renew_lease(
            d(claims), lease_seconds=d(numbers), actor=d(actor_args)
        ),
        "finish_run": lambda: wc.finish_run(d(claims), d(report), actor=d(actor_args)),
        "worker_protocol.finish": lambda: wc.worker_protocol.finish(d(claims), d(report)),
        "interrupt": lambda: wc.interrupt(
            d(claims),
            reason=d(texts),
            progress=d(
                st.one_of(
                    st.none(),
                    st.fixed_dictionaries(
                        {"summary": texts},
                        optional={"response": texts, "stats": json_like},
                    ),
                    payload,
                )
            ),
            actor=d(actor_args),
        ),
        "add_input": lambda: wc.add_input(
            d(ids),
            d(ids),
            expected_version=d(version),
            expected_generation=d(version),
            text=d(texts),
            expected_run_id=d(st.one_of(st.none(), ids)),
            actor=d(actor_args),
        ),
        "defer": lambda: wc.defer(d(claims), actor=d(actor_args)),
        "pending_input": lambda: wc.pending_input(d(claims)),
        "consume_input": lambda: wc.consume_input(
            d(claims),
            d(st.one_of(st.lists(ids, max_size=3), odd)),
            actor=d(actor_args),
        ),
        "recover": lambda: wc.recover(actor=d(actor_args)),
        "extend_budget": lambda: wc.extend_budget(
            d(ids),
            expected_version=d(version),
            additions=d(
                st.one_of(
                    st.dictionaries(
                        st.sampled_from(["max_requests", "max_tokens", "bogus"]),
                        numbers,
                        max_size=2,
                    ),
                    odd,
                )
            ),
            actor=d(actor_args),
        ),
        "reserve_request": lambda: wc.reserve_request(
            d(ids),
            request=d(payload),
            kind=d(st.one_of(st.sampled_from(["action", "coordinator"]), odd)),
            run_id=d(st.one_of(st.none(), ids)),
            request_id=d(st.one_of(st.none(), texts)),
            actor=d(actor_args),
        ),
        "settle_request": lambda: wc.settle_request(
            d(ids),
            d(texts),
            usage=d(st.one_of(st.none(), payload)),
            complete=d(st.one_of(st.booleans(), odd)),
            actor=d(actor_args),
        ),
        "reserve_coordinator_request": lambda: budget_commands(wc).reserve_coordinator_request(
            d(ids),
            turn_id=d(texts),
            request=d(payload),
            actor=d(actor_args),
        ),
        "settle_coordinator_turn": lambda: budget_commands(wc).settle_coordinator_turn(
            d(ids),
            d(texts),
            usage=d(st.one_of(st.none(), payload)),
            complete=d(st.one_of(st.booleans(), odd)),
            actor=d(actor_args),
        ),
        "record_coordinator_failure": lambda: budget_commands(wc).record_coordinator_failure(
            d(ids),
            turn_id=d(texts),
            actor=d(actor_args),
        ),
        "can_coordinate_automatically": lambda: budget_commands(wc).can_coordinate_automatically(
            d(ids), user_message=d(st.one_of(st.booleans(), odd))
        ),
        "work_item": lambda: wc.work_item(d(ids)),
        "action": lambda: wc.action(d(ids)),
        "ledger": lambda: wc.ledger(d(ids)),
        "detail": lambda: wc.detail(d(ids)),
        "goal_progress": lambda: wc.goal_progress(d(ids)),
        "history": lambda: wc.history(d(ids)),
        "action_history": lambda: wc.action_history(d(ids)),
        "post_user_message": lambda: wc.post_user_message(
            d(ids),
            d(texts),
            client_message_id=d(st.one_of(st.none(), texts)),
            expected_version=d(st.one_of(st.none(), version)),
            actor=d(actor_args),
        ),
        "conversation": lambda: wc.conversation(d(ids)),
        "list_work_items": lambda: wc.list_work_items(
            d(st.one_of(st.none(), st.just("running"), texts))
        ),
        "audit": lambda: wc.audit(
            d(ids),
            limit=d(st.one_of(st.none(), version)),
            action_id=d(st.one_of(st.none(), ids)),
            run_id=d(st.one_of(st.none(), ids)),
            type=d(st.one_of(st.none(), texts)),
            until=d(st.one_of(st.none(), version)),
        ),
        "state_at": lambda: wc.state_at(
            d(ids),
            version=d(st.one_of(st.none(), version)),
            at=d(
                st.one_of(
                    st.none(), st.just(datetime(2026, 1, 1, 12, tzinfo=UTC)), st.datetimes(), odd
                )
            ),
        ),
        "rebuild_projection": lambda: wc.maintenance.rebuild_projection(
            d(st.one_of(texts, st.just("work_queue")))
        ),
    }


def test_every_command_succeeds_or_raises_a_typed_error_and_writes_nothing_when_refused(
    db_path: Path, clock: FakeClock
) -> None:
    with WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID) as wc:
        world = World(wc)

        @settings(
            max_examples=600,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(data=st.data())
        def call_one(data: st.DataObject) -> None:
            commands = _commands(world, data)
            name = data.draw(st.sampled_from(sorted(commands)), label="command")
            before = wc.event_count()
            try:
                commands[name]()
            except WorkcenterError as error:
                event(f"{name}: {type(error).__name__}")
                assert wc.event_count() == before, f"{name} refused ({error!r}) but wrote events"
            else:
                event(f"{name}: ok")

        call_one()


def test_a_report_with_any_json_in_any_field_is_normalised_or_refused_with_a_typed_error(
    db_path: Path, clock: FakeClock
) -> None:
    """The report alone, more often than the sweep above draws it: through ``finish_run``
    and the worker protocol's ``finish``, each on a live Run."""
    with WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID) as wc:
        finishes = {
            "finish_run": wc.finish_run,
            "worker_protocol.finish": lambda ref, body: wc.worker_protocol.finish(ref, body),
        }

        @settings(max_examples=300, deadline=None, database=None)
        @given(name=st.sampled_from(sorted(finishes)), body=report_fields)
        def finish_one(name: str, body: dict[str, Any]) -> None:
            live = wc.claim_next("fuzz-worker") or (create_linear(wc) and claim(wc))
            before = wc.event_count()
            try:
                finishes[name](live.ref, body)
            except WorkcenterError as error:
                event(f"{name}: {type(error).__name__}")
                assert wc.event_count() == before, f"{name} refused ({error!r}) but wrote events"
            else:
                event(f"{name}: ok")
            if wc.action(live.action_id).status == "running":
                wc.interrupt(live, reason="next example")

        finish_one()
