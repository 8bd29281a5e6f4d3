"""What differs between a linear and a dynamic WorkItem, in one place.

A linear item follows its stage list: one current Action at a time, a stage
after each completed one, a replacement for a retried or guided Action. A
dynamic item is planned by Coordinator turns: its Actions are reset in place and
its status is derived from them after every change. Every command asks the
item's policy (``of(item)``) instead of branching on its mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from workcenter.domain import action as act
from workcenter.domain import action_generation as generation
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput
from workcenter.domain.unit import Unit
from workcenter.domain.workflow import Stage, parse_stages

StageInput = Sequence[str | Mapping[str, object] | Stage]
NextGeneration = Literal["guided", "retried"]


class NormalisedOutcome(Protocol):
    """What a mode reads of a Run's checked outcome (``outcome.NormalisedOutcome``),
    declared here because the outcome's rules ask the mode about stages."""

    @property
    def outcome(self) -> str: ...

    @property
    def result(self) -> act.RunResult: ...


class ModePolicy(Protocol):
    mode: wi.Mode
    # Coordinator turns plan Actions and complete the item (dynamic); a linear item
    # completes through its last stage.
    takes_plans: bool
    # A triage Run may refine the contract (linear); dynamic items take contract
    # changes from users only.
    takes_contract_patches: bool
    # Input, guidance and claims go to the current Action only (linear).
    current_action_only: bool
    # The item statuses in which an Action can be guided, and the Action statuses.
    guidance_item_statuses: tuple[str, ...]
    guidable_statuses: tuple[str, ...]
    # The item statuses in which a waiting or failed Action can be retried or answered:
    # with Actions side by side, also while another one is ready or running.
    retry_item_statuses: tuple[str, ...]
    # A retried or guided Action runs again as itself, on the attempts it has left
    # (dynamic); a linear item's replacement is a new Action with none used.
    next_generation_reuses_attempts: bool

    def workflow(self, stages: StageInput | None) -> tuple[Stage, ...]:
        """The item's stages, from the ones asked for at creation."""
        ...

    def wake(self, unit: Unit, kind: str, source_key: str, **trigger: object) -> None:
        """A cause that wakes the Coordinator (coordinator.md 2.1), if this mode has one."""
        ...

    def begin(self, unit: Unit) -> None:
        """The item has just started."""
        ...

    def restart(self, unit: Unit, item: wi.WorkItemState) -> None:
        """The contract changed and the open Actions were superseded."""
        ...

    def resume(self, unit: Unit, cancelled: Sequence[act.ActionState]) -> None:
        """The item resumed; ``cancelled`` are its cancelled Actions, oldest first."""
        ...

    def next_generation(
        self,
        unit: Unit,
        target: act.ActionState,
        reason: NextGeneration,
        entries: tuple[act.ContextEntry, ...],
    ) -> None:
        """A retried or guided Action's next attempt, with ``entries`` in its context."""
        ...

    def why_not_claimable(self, item: wi.WorkItemState, action: act.ActionState) -> str | None:
        """Why the item keeps a ready Action from being claimed, or None."""
        ...

    def after_run_ended(self, unit: Unit, action: act.ActionState) -> None:
        """A Run ended without an outcome (interrupted, deferred or recovered)."""
        ...

    def after_finish(
        self, unit: Unit, action: act.ActionState, normalised: NormalisedOutcome
    ) -> None:
        """A Run's outcome was recorded on ``action`` (its state after it)."""
        ...

    def after_stale_run_ended(self, unit: Unit) -> None:
        """Recovery ended a Run that no longer owned the current Action."""
        ...

    def is_last_stage(self, item: wi.WorkItemState, action: act.ActionState) -> bool:
        """An approved review with nothing downstream to deliver (the final gate)."""
        ...


def _asks_for_no_stage(stages: object) -> bool:
    """A dynamic item's stages left out, or an empty list. Any other value is given
    stages, refused: a falsy 0 or "" is not "no stages"."""
    return stages is None or (isinstance(stages, list | tuple) and not stages)


class Dynamic:
    mode: wi.Mode = "dynamic"
    takes_plans = True
    takes_contract_patches = False
    current_action_only = False
    guidance_item_statuses: tuple[str, ...] = tuple(wi.ACTIVE)
    guidable_statuses: tuple[str, ...] = ("ready", "running", "waiting")
    retry_item_statuses: tuple[str, ...] = tuple(wi.ACTIVE)
    next_generation_reuses_attempts = True

    def workflow(self, stages: StageInput | None) -> tuple[Stage, ...]:
        # Any stage given would be dropped without a word.
        if not _asks_for_no_stage(stages):
            raise InvalidInput(
                "stages are for linear WorkItems: a dynamic item's Actions are planned"
            )
        return ()

    def wake(self, unit: Unit, kind: str, source_key: str, **trigger: object) -> None:
        unit.wake(kind, source_key, **trigger)

    def begin(self, unit: Unit) -> None:
        unit.derive_status()

    def restart(self, unit: Unit, item: wi.WorkItemState) -> None:
        if item.status != "draft":
            unit.derive_status()

    def resume(self, unit: Unit, cancelled: Sequence[act.ActionState]) -> None:
        for action in cancelled:
            unit.apply_action(
                generation.supersede_cancelled(
                    action, reason="resumed after cancel", at=unit.at, by=unit.by
                )
            )
        unit.derive_status()

    def next_generation(
        self,
        unit: Unit,
        target: act.ActionState,
        reason: NextGeneration,
        entries: tuple[act.ContextEntry, ...],
    ) -> None:
        unit.apply_action(
            generation.reset(
                target,
                reason=reason,
                add_context=entries,
                contract_revision=unit.item.contract_revision,
                at=unit.at,
                by=unit.by,
            )
        )
        unit.derive_status()

    def why_not_claimable(self, item: wi.WorkItemState, action: act.ActionState) -> str | None:
        return None if item.status in wi.ACTIVE else f"WorkItem is {item.status}"

    def after_run_ended(self, unit: Unit, action: act.ActionState) -> None:
        unit.derive_status()
        if unit.action(action.id).status == "failed":  # interrupted and not retryable
            self._settled(unit, unit.action(action.id))

    def after_finish(
        self, unit: Unit, action: act.ActionState, normalised: NormalisedOutcome
    ) -> None:
        unit.derive_status()
        self._settled(unit, action)

    def _settled(self, unit: Unit, action: act.ActionState) -> None:
        """A Run outcome that leaves nothing ready or running: the Coordinator's turn."""
        if unit.item.entries("ready", "running") or not action.runs:
            return
        run_id = action.runs[-1].id
        unit.wake(
            "action_settled",
            f"dynamic:reconcile:{unit.item.id}:{run_id}",
            action_id=str(action.id),
            run_id=str(run_id),
            status=action.status,
            unfinished_action_ids=[str(e.action_id) for e in unit.item.entries(*act.OPEN_STATUSES)],
        )

    def after_stale_run_ended(self, unit: Unit) -> None:
        if unit.item.status in wi.ACTIVE:
            unit.derive_status()

    def is_last_stage(self, item: wi.WorkItemState, action: act.ActionState) -> bool:
        return not any(
            e.type == "deliver" and e.action_id != action.id
            for e in item.entries(*act.OPEN_STATUSES)
        )


class Linear:
    mode: wi.Mode = "linear"
    takes_plans = False
    takes_contract_patches = True
    current_action_only = True
    guidance_item_statuses: tuple[str, ...] = ("ready", "running")
    guidable_statuses: tuple[str, ...] = ("ready", "running")
    retry_item_statuses: tuple[str, ...] = ("waiting", "needs_attention")
    next_generation_reuses_attempts = False

    def workflow(self, stages: StageInput | None) -> tuple[Stage, ...]:
        # Only stages left out are the defaults: an empty list is refused, since a caller
        # whose list came out empty did not ask for four stages (ADR-0106).
        return parse_stages(wi.DEFAULT_STAGES if stages is None else stages)

    def wake(self, unit: Unit, kind: str, source_key: str, **trigger: object) -> None:
        return None  # a linear item follows its stages; no Coordinator is woken

    def begin(self, unit: Unit) -> None:
        add_stage_action(unit, unit.item.stages[0])

    def restart(self, unit: Unit, item: wi.WorkItemState) -> None:
        add_stage_action(unit, item.stages[0])

    def resume(self, unit: Unit, cancelled: Sequence[act.ActionState]) -> None:
        if not cancelled:
            add_stage_action(unit, unit.item.stages[0])
            return
        for action in cancelled:
            unit.apply_action(
                generation.reset(
                    action,
                    reason="resumed",
                    add_context=(),
                    contract_revision=unit.item.contract_revision,
                    at=unit.at,
                    by=unit.by,
                    keep_inputs=True,
                )
            )
        unit.set_status("ready", cancelled[-1].id)

    def next_generation(
        self,
        unit: Unit,
        target: act.ActionState,
        reason: NextGeneration,
        entries: tuple[act.ContextEntry, ...],
    ) -> None:
        # Superseded, the old Action can neither block nor be revived.
        unit.apply_action(
            generation.invalidate(
                target, status="superseded", reason=reason, at=unit.at, by=unit.by
            )
        )
        replacement = unit.plan_action(
            type=target.type,
            brief=target.brief,
            workspace_mode=target.workspace_mode,
            max_attempts=target.max_attempts,
            context=tuple(e for e in target.context if e.kind != "input") + entries,
        )
        unit.set_status("ready", replacement.id)

    def why_not_claimable(self, item: wi.WorkItemState, action: act.ActionState) -> str | None:
        if item.status != "ready" or item.current_action_id != action.id:
            return "Action is not the current Action of a ready WorkItem"
        if item.entries("failed"):
            return "WorkItem has a failed Action"
        return None

    def after_run_ended(self, unit: Unit, action: act.ActionState) -> None:
        after = unit.action(action.id)
        unit.set_status("ready" if after.status == "ready" else "needs_attention", action.id)

    def after_finish(
        self, unit: Unit, action: act.ActionState, normalised: NormalisedOutcome
    ) -> None:
        if normalised.outcome == "waiting":
            unit.set_status("waiting", action.id)
        elif action.status == "ready":
            unit.set_status("ready", action.id)
        elif action.status == "failed":
            unit.set_status("needs_attention", action.id)
        else:
            self._advance(unit, action, normalised)

    def _advance(self, unit: Unit, action: act.ActionState, normalised: NormalisedOutcome) -> None:
        stage = next_stage(unit.item, action, normalised.result.review_decision)
        if stage is None and unit.item.stopped:
            # While stopped an item only needs attention: done too (resource-ledger.md 3).
            unit.set_status("needs_attention", action.id)
            return
        if stage is None:
            unit.item_event(
                wi.WorkItemCompleted,
                final_result=wi.FinalResult(
                    summary=normalised.result.summary,
                    evidence_run_ids=(action.result_run_id,) if action.result_run_id else (),
                ),
            )
            return
        carried = tuple(e for e in action.context if e.kind != "input")
        entry = prior_result(action)
        add_stage_action(unit, stage, (*carried, entry) if entry else carried)

    def after_stale_run_ended(self, unit: Unit) -> None:
        return None  # the current Action, not this one, holds the item's status

    def is_last_stage(self, item: wi.WorkItemState, action: act.ActionState) -> bool:
        return action.type in item.stages and item.stages[-1] == action.type


DYNAMIC: ModePolicy = Dynamic()
LINEAR: ModePolicy = Linear()
POLICIES: dict[str, ModePolicy] = {"dynamic": DYNAMIC, "linear": LINEAR}


def policy(mode: wi.Mode) -> ModePolicy:
    return POLICIES[mode]


def of(item: wi.WorkItemState) -> ModePolicy:
    return POLICIES[item.mode]


# --- the stages of a linear item ------------------------------------------------


def stage_brief(stage: str, item: wi.WorkItemState) -> act.Brief:
    return act.Brief(
        objective=f"{stage.capitalize()}: {item.goal}"[:2_000],
        expected_outcome="Evidence and one acceptance check per criterion."[:2_000],
    )


def add_stage_action(
    unit: Unit, stage: str, context: tuple[act.ContextEntry, ...] = ()
) -> act.ActionState:
    """Insert the Action for ``stage``, with the stage's attempt limit, and make it the
    current one."""
    action = unit.plan_action(
        type=stage,
        brief=stage_brief(stage, unit.item),
        context=context,
        max_attempts=unit.item.max_attempts_for(stage) or act.DEFAULT_MAX_ATTEMPTS,
    )
    unit.set_status("ready", action.id)
    return action


def next_stage(item: wi.WorkItemState, action: act.ActionState, decision: str | None) -> str | None:
    stages = item.stages
    index = stages.index(action.type) if action.type in stages else len(stages) - 1
    if action.type == "review" and decision == "changes_requested":
        # The latest earlier stage that is neither review nor deliver, triage last;
        # create() guarantees there is one.
        earlier = [s for s in stages[:index] if s not in ("review", "deliver")]
        editable = [s for s in earlier if s != "triage"]
        return (editable or earlier)[-1]
    return stages[index + 1] if index + 1 < len(stages) else None


def prior_result(action: act.ActionState, answer: str = "") -> act.ContextEntry | None:
    """The context entry carrying an Action's latest ended Run to its next attempt."""
    run = next((r for r in reversed(action.runs) if r.result is not None), None)
    if run is None or run.result is None:
        return None
    return act.ContextEntry(
        kind="prior_result",
        text=run.result.summary or run.result.error or "",
        action_type=action.type,
        run_id=run.id,
        evidence=run.result.evidence,
        review_decision=run.result.review_decision,
        waiting_reason=(run.result.waiting_reason or "") + (f"\nAnswer: {answer}" if answer else "")
        or None,
    )
