"""A Python client generated from the live server's OpenAPI document (by
openapi-python-client, at test time) runs an item end to end (ADR-0068): create it,
claim and finish each of its Runs through the worker protocol, cancel another with
If-Match from its ETag, and read the detail and the goal progress, every answer
parsed into the client's typed models."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import environment, serving

TOKEN = "generated-client-token-not-secret"
BIN = Path(sys.executable).parent


@pytest.fixture
def generated(db_path: Path, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """The server's URL and the client package generated from its document."""
    with serving(db_path, environment(WORKCENTER_API_TOKEN=TOKEN), token=TOKEN) as url:
        document = tmp_path / "openapi.json"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        document.write_bytes(httpx.get(url + "/openapi.json", headers=headers).content)
        out = tmp_path / "workcenter_client"
        generate = [str(BIN / "openapi-python-client"), "generate", "--path", str(document)]
        run = subprocess.run(
            [*generate, "--meta", "none", "--output-path", str(out)],
            env=os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
            check=True,
            capture_output=True,
            text=True,
        )
        # The generator leaves out what it cannot model, and says so: nothing may be.
        assert "will not be generated" not in run.stdout + run.stderr, run.stdout
        assert "Unable to" not in run.stdout + run.stderr, run.stdout
        sys.path.insert(0, str(tmp_path))
        importlib.invalidate_caches()  # the finders' listings predate the generated files
        try:
            yield url, importlib.import_module("workcenter_client")
        finally:
            sys.path.remove(str(tmp_path))
            for name in [n for n in sys.modules if n.split(".")[0] == "workcenter_client"]:
                del sys.modules[name]


def test_a_generated_client_runs_an_item_to_done(generated: tuple[str, Any]) -> None:
    url, package = generated
    models = importlib.import_module("workcenter_client.models")
    commands = importlib.import_module("workcenter_client.api.commands")
    reads = importlib.import_module("workcenter_client.api.reads")
    worker = importlib.import_module("workcenter_client.api.worker")
    for module in ("create_work_item", "cancel"):
        importlib.import_module(f"{commands.__name__}.{module}")
    for module in ("detail", "progress"):
        importlib.import_module(f"{reads.__name__}.{module}")
    for module in ("claim", "finish"):
        importlib.import_module(f"{worker.__name__}.{module}")
    client = package.AuthenticatedClient(base_url=url, token=TOKEN)
    criteria = ["The suite passes", "The import is fixed"]

    created = commands.create_work_item.sync(
        client=client,
        body=models.CreateWorkItem(
            title="Fix the failing import",
            goal="The suite passes again",
            acceptance_criteria=criteria,
            delivery_target=models.CreateWorkItemDeliveryTargetType0.RESPONSE,
            mode=models.CreateWorkItemMode.LINEAR,
            stages=["triage", "implement", "deliver"],
            start=True,
        ),
    )
    assert isinstance(created, models.Detail), created
    assert created.status == models.DetailStatus.READY

    finished = []
    while True:
        claimed = worker.claim.sync(
            client=client, body=models.ClaimBody(worker="generated", wait_seconds=0.0)
        )
        if claimed is None:
            break
        assert isinstance(claimed, models.Claimed), claimed
        assert claimed.acceptance_criteria == criteria
        fence = claimed.fence
        report = models.Report(
            outcome=models.ReportOutcome.COMPLETED,
            summary=f"{claimed.action_type} done",
            response="All criteria hold",
            evidence=["pytest: 48 passed"],
            acceptance_checks=[
                models.Check(criterion=c, status=models.CheckStatus.PASSED, evidence="48 passed")
                for c in criteria
            ],
        )
        answer = worker.finish.sync(
            client=client,
            body=models.FinishBody(
                fence=models.Fence(
                    action_id=fence.action_id,
                    run_id=fence.run_id,
                    boot_id=fence.boot_id,
                    lease_epoch=fence.lease_epoch,
                ),
                report=report,
            ),
        )
        assert isinstance(answer, models.FinishedOut), answer
        finished.append(answer.outcome)
    assert finished == ["completed"] * 3

    item_id = created.id
    detail = reads.detail.sync(item_id=item_id, client=client)
    assert isinstance(detail, models.Detail), detail
    assert detail.status == models.DetailStatus.DONE
    assert [a.status for a in detail.actions] == [models.ActionEntryStatus.COMPLETED] * 3
    progress = reads.progress.sync(item_id=item_id, client=client)
    assert isinstance(progress, models.ProgressRead), progress
    assert isinstance(progress.goal_progress, models.GoalProgress)
    assert progress.goal_progress.completed_criteria_count == len(criteria)

    # A command with the ETag its read answered, then one with a stale ETag.
    other = commands.create_work_item.sync(
        client=client, body=models.CreateWorkItem(title="Another", goal="Cancel me")
    )
    assert isinstance(other, models.Detail)
    read = reads.detail.sync_detailed(item_id=other.id, client=client)
    etag = read.headers["etag"]
    cancelled = commands.cancel.sync(
        item_id=other.id, client=client, body=models.Cancel(reason="done"), if_match=etag
    )
    assert isinstance(cancelled, models.Detail)
    assert cancelled.status == models.DetailStatus.CANCELLED
    stale = commands.cancel.sync(
        item_id=other.id, client=client, body=models.Cancel(reason="again"), if_match=etag
    )
    assert isinstance(stale, models.ProblemDocument)
    assert (stale.status, stale.title) == (412, "PreconditionFailed")
