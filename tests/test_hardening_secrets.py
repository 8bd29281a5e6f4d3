"""Issue 8, findings 2 and 13: no secret and no terminal escape reaches a person.

Finding 2: bare provider keys, passwords, Bearer tokens and home directories in a
Run's words, in the user's words or in an executor's exception reach neither the
browser DTO (``show --json``), nor the default ``audit``, nor ``progress``, nor the
``worker``'s lines; a link hiding a secret-named parameter in an encoded value is
refused; closed-set fields (the budget stop code) are never masked.
Finding 13: control characters and rich markup in user text print visibly and
literally, never as terminal control or styling.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result
from conftest import (
    BOOT_ID,
    CRITERIA,
    FakeClock,
    action_spec,
    claim,
    create_dynamic,
    plan,
    report,
)

from workcenter.adapters.cli import cli
from workcenter.adapters.cli_outcome import refusal_line
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import InvalidInput
from workcenter.domain.evidence import normalize_outputs
from workcenter.projections.sanitize import (
    failure_reason,
    sanitize_diagnostic,
    sanitize_diagnostic_paths,
    sanitize_event_payload,
    sanitize_failure,
    sanitize_personal,
    sanitize_record,
    sanitize_waiting_reason,
)

WIDE = {"COLUMNS": "10000"}  # no wrapping: a secret split over two lines would hide a leak
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def invoke(db: Path, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], env=WIDE)
    assert result.exit_code == 0, result.output
    return result


def open_center(db: Path) -> WorkCenter:
    return WorkCenter.open(db, clock=FakeClock(), boot_id=BOOT_ID)


# --- finding 2: secrets ------------------------------------------------------------


def test_show_json_masks_bare_keys_in_the_content_summary_run_summary_and_evidence(
    db_path: Path,
) -> None:
    with open_center(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec(objective="Rotate ghp_PLANTEDobjective99"))
    before = invoke(db_path, "show", str(item.id), "--json").output
    assert "PLANTEDobjective99" not in before
    with open_center(db_path) as wc:
        wc.finish_run(
            claim(wc),
            report(
                summary="Used sk-PLANTEDsummary123 to call the API",
                evidence=[{"kind": "text", "label": "key AKIAPLANTEDLABEL1234"}],
            ),
        )
    after = invoke(db_path, "show", str(item.id), "--json").output
    assert "PLANTEDsummary123" not in after and "PLANTEDLABEL1234" not in after
    assert "Used *** to call the API" in after


def test_the_default_audit_masks_bare_keys_and_home_directories(db_path: Path) -> None:
    with open_center(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id)
        wc.finish_run(
            claim(wc), report(summary="Key sk-PLANTEDaudit1234 read from /home/alice/.env")
        )
    for args in (("--json",), ()):
        shown = invoke(db_path, "audit", str(item.id), *args).output
        assert "PLANTEDaudit1234" not in shown and "alice" not in shown
        assert "[path redacted]" in shown
    raw = invoke(db_path, "audit", str(item.id), "--json", "--raw").output
    assert "PLANTEDaudit1234" in raw  # --raw is the explicit way to see what was stored


def _stopped_item(db: Path) -> UUID:
    with open_center(db) as wc:
        item = wc.create_work_item(
            title="Small budget",
            goal="Stop",
            acceptance_criteria=list(CRITERIA),
            start=True,
            limits={"max_tokens": 100},
        )
        plan(wc, item.id)
        claimed = claim(wc)
        admission = wc.reserve_request(item.id, request={"max_tokens": 500}, run_id=claimed.run_id)
        assert admission.code == "work_item_tokens_exhausted"
    return item.id


def test_the_audit_never_masks_a_closed_set_stop_code(db_path: Path) -> None:
    item_id = _stopped_item(db_path)
    rows = json.loads(invoke(db_path, "audit", str(item_id), "--json").output)["events"]
    stops = {
        row["type"]: json.loads(row["summary"])
        for row in rows
        if row["type"] in ("ExecutionStopped", "BudgetStopRecorded")
    }
    assert stops["ExecutionStopped"]["code"] == "work_item_tokens_exhausted"
    assert stops["BudgetStopRecorded"] == {"code": "work_item_tokens_exhausted"}
    text = invoke(db_path, "audit", str(item_id)).output
    assert '"code":"work_item_tokens_exhausted"' in text and "***" not in text


def test_typed_records_keep_closed_set_values_and_mask_free_form_secrets() -> None:
    stopped = {
        "code": "work_item_tokens_exhausted",
        "details": {"run_id": "r1", "code": "oauth-code-1", "estimated_next_tokens": 5},
    }
    assert sanitize_event_payload("ExecutionStopped", stopped) == {
        "code": "work_item_tokens_exhausted",  # a Literal: never masked
        "details": {"run_id": "r1", "code": "***", "estimated_next_tokens": 5},
    }
    assert sanitize_event_payload("BudgetExtended", {"additions": {"max_tokens": 5}}) == {
        "additions": {"max_tokens": 5}
    }
    unknown = {"pin_password": 1234, "note": "sk-abcdefgh1234 in /home/al/x", "ok": True}
    assert sanitize_record(unknown) == {
        "pin_password": "***",
        "note": "*** in [path redacted]",
        "ok": True,
    }


def test_progress_masks_passwords_bearer_tokens_and_home_directories(db_path: Path) -> None:
    criteria = ("Log in with password=PLANTEDpassword1", "Docs updated")
    with open_center(db_path) as wc:
        item = create_dynamic(wc, criteria=criteria)
        plan(wc, item.id)
        wc.finish_run(
            claim(wc),
            report(
                "failed",
                criteria=criteria,
                error="401 with Authorization: Bearer PLANTEDbearer99 in /Users/bob/app",
            ),
        )
    for args in (("--json",), ()):
        shown = invoke(db_path, "progress", str(item.id), *args).output
        for secret in ("PLANTEDpassword1", "PLANTEDbearer99", "/Users/bob"):
            assert secret not in shown, (args, secret)
    data = json.loads(invoke(db_path, "progress", str(item.id), "--json").output)
    assert data["goal_progress"]["criteria"][0]["criterion"] == "Log in with password=***"
    assert data["goal_progress"]["blockers"][0]["status"] == "failed"  # closed set: as is


def test_list_masks_a_titles_secret_and_home_directory_in_text_and_json(db_path: Path) -> None:
    """ADR-0136: ``list --json`` printed titles as stored, where the table, ``show
    --json`` and the HTTP list mask them (found by acceptance testing)."""
    title = "Rotate password=PLANTEDtitle1 kept in /home/carol/.env"
    with open_center(db_path) as wc:
        create_dynamic(wc, title=title)
    for args in (("--json",), ()):
        shown = invoke(db_path, "list", *args).output
        for secret in ("PLANTEDtitle1", "/home/carol"):
            assert secret not in shown, (args, secret)
    (row,) = json.loads(invoke(db_path, "list", "--json").output)
    assert row["title"] == sanitize_personal(title)


LEAKY_ERROR = "login with password=PLANTEDworker1 from /home/alice/.netrc, key sk-PLANTEDworker2"


def leaky_executor(claim: Claim) -> Any:
    raise RuntimeError(LEAKY_ERROR)


def test_the_worker_neither_prints_nor_records_an_executor_exception_raw(db_path: Path) -> None:
    with open_center(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id)
    result = invoke(
        db_path,
        "worker",
        "--executor",
        f"{__name__}:leaky_executor",
        "--max-runs",
        "1",
        "--exit-when-idle",
    )
    assert "interrupted" in result.output and "RuntimeError" in result.output
    for secret in ("PLANTEDworker1", "PLANTEDworker2", "alice"):
        assert secret not in result.output
    with open_center(db_path) as wc:
        (action,) = wc.actions(wc.work_item(item.id)).values()
        reason = action.runs[0].end_reason or ""
    assert reason.startswith("executor raised RuntimeError: login with password=***")
    assert "PLANTEDworker2" not in reason and "alice" not in reason


@pytest.mark.parametrize(
    "ref",
    [
        "https://app.example/login?next=%2Fcb%3Faccess_token%3DPLANTED",
        "https://app.example/login?next=%252Fcb%253Faccess_token%253DPLANTED",
        "https://app.example/login#next=%2Fcb%3Fclient_secret%3DPLANTED",
        "https://app.example/login?next=/cb?token=PLANTED",
        "https://app.example/login?next=%2Fcb%3Fa%3D1%26api_key%3DPLANTED",
        # Still encoded after three rounds: what it hides cannot be told.
        "https://app.example/login?next=%25252525252Fcb",
    ],
)
def test_a_link_hiding_a_secret_named_parameter_in_an_encoded_value_is_refused(ref: str) -> None:
    assert normalize_outputs([{"kind": "link", "label": "callback", "ref": ref}]) == ()


def test_a_link_with_an_innocent_encoded_value_is_kept() -> None:
    ref = "https://app.example/login?next=%2Fdocs%3Fpage%3D2"
    (output,) = normalize_outputs([{"kind": "link", "label": "docs", "ref": ref}])
    assert output.ref == ref


def test_a_nested_credential_never_reaches_the_detail_dto(db_path: Path) -> None:
    nested = "https://app.example/cb?next=%252Fcb%253Faccess_token%253DPLANTEDnested"
    with open_center(db_path) as wc:
        item = create_dynamic(wc, delivery_target=None)
        plan(wc, item.id)
        wc.finish_run(
            claim(wc),
            report(
                summary=f"Callback at {nested}",
                evidence=[{"kind": "link", "label": "callback", "ref": nested}],
                outputs=[{"kind": "link", "label": "callback", "ref": nested}],
            ),
        )
        dto = json.dumps(wc.detail(item.id))
    assert "PLANTEDnested" not in dto and "next=***" in dto


def test_diagnostics_mask_bare_keys_and_credentials_nested_in_query_values() -> None:
    assert sanitize_diagnostic("use sk-abcdefgh12345 now") == "use *** now"
    assert sanitize_diagnostic("id AKIAIOSFODNN7EXAMPLE, ghp_abcdefgh1234") == "id ***, ***"
    assert sanitize_diagnostic("task-list ask-me") == "task-list ask-me"
    assert (
        sanitize_diagnostic("go https://h.example/p?next=%2Fcb%3Ftoken%3Dzz&page=2")
        == "go https://h.example/p?next=***&page=2"
    )
    assert sanitize_diagnostic_paths("see https://h.example/p?q=%2Fdocs") == (
        "see https://h.example/p?q=%2Fdocs"
    )


@pytest.mark.parametrize(
    "text",
    [
        "read </home/PLANTED/notes.txt>",  # (b) skipped paths after "<" (closing tags)
        "flag -/Users/PLANTED",
        "see -https://h.example/p?next=%2Fcb%3Ftoken%3DPLANTED",
        "aws_secret_access_key=PLANTED",
        "C:\\Users\\PLANTED\\x and ~/PLANTED",
    ],
)
def test_every_sanitiser_hides_home_directories_and_credentials_in_any_context(text: str) -> None:
    for sanitiser in (
        sanitize_diagnostic_paths,
        sanitize_personal,
        sanitize_failure,
        failure_reason,
        sanitize_waiting_reason,
    ):
        assert "PLANTED" not in sanitiser(text), sanitiser.__name__


def test_the_users_words_in_a_dto_lose_credentials_and_home_directories_only(
    db_path: Path,
) -> None:
    with open_center(db_path) as wc:
        item = create_dynamic(
            wc,
            title="Fix GET /api/users for /home/alice",
            goal="Deploy with api_key: PLANTEDgoal1",
            criteria=("Works without Bearer PLANTEDcrit1", "Docs updated"),
        )
        dto = wc.detail(item.id)
    assert dto["title"] == "Fix GET /api/users for [path redacted]"
    assert dto["goal"] == "Deploy with api_key: ***"
    assert dto["acceptanceCriteria"][0] == "Works without Bearer ***"
    assert "PLANTEDcrit1" not in json.dumps(dto["goalProgress"])


# --- finding 13: terminal escapes -----------------------------------------------------

HOSTILE = "A\x1b[31mred\x07bell\x00nul\x9bcsi\u202eevil [red]x[/red] [link=https://e.vil]go[/link]"


def _hostile_item(db: Path) -> UUID:
    with open_center(db) as wc:
        item = create_dynamic(
            wc, title=HOSTILE, criteria=("Crit \x1b]0;pwned\x07 [bold]b[/bold]", "Docs updated")
        )
    return item.id


@pytest.mark.parametrize("verb", ["list", "show", "progress", "history", "audit"])
def test_text_output_shows_control_characters_visibly_and_markup_literally(
    db_path: Path, verb: str
) -> None:
    item_id = _hostile_item(db_path)
    args = (verb,) if verb == "list" else (verb, str(item_id))
    output = invoke(db_path, *args).output
    assert not RAW_CONTROL.search(output), repr(output)
    assert "\\x1b" in output or "\\u001b" in output
    if verb in ("list", "show", "progress"):  # a table title may wrap at its spaces
        assert "A\\x1b[31mred\\x07bell\\x00nul\\x9bcsi\\u202eevil" in output
        assert "[link=https://e.vil]go[/link]" in output
    assert "[red]x[/red]" in output


def test_show_prints_criteria_literally(db_path: Path) -> None:
    output = invoke(db_path, "show", str(_hostile_item(db_path))).output
    assert "Crit \\x1b]0;pwned\\x07 [bold]b[/bold]" in output


def test_json_output_escapes_every_control_character_and_decodes_to_the_same_text(
    db_path: Path,
) -> None:
    item_id = _hostile_item(db_path)
    output = invoke(db_path, "list", "--json").output
    assert not RAW_CONTROL.search(output)
    assert "\\u009b" in output and "\\u202e" in output
    (row,) = json.loads(output)
    assert row["id"] == str(item_id) and row["title"] == HOSTILE


def test_a_refusal_line_shows_the_control_characters_it_quotes() -> None:
    line = refusal_line(InvalidInput("title 'a\x1b]0;pwned\x07b' is not allowed"))
    assert line == "InvalidInput: title 'a\\x1b]0;pwned\\x07b' is not allowed"


def markup_executor(claim: Claim) -> Any:
    raise RuntimeError("[red]boom[/red] \x1b[2J")


def test_the_worker_prints_an_exception_literally(db_path: Path) -> None:
    with open_center(db_path) as wc:
        plan(wc, create_dynamic(wc).id)
    output = invoke(
        db_path,
        "worker",
        "--executor",
        f"{__name__}:markup_executor",
        "--max-runs",
        "1",
        "--exit-when-idle",
    ).output
    assert "[red]boom[/red] \\x1b[2J" in output and not RAW_CONTROL.search(output)
