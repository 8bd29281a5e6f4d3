"""The application factory: the facade, the guard and the routes of every concern.

The OpenAPI document (``/openapi.json``, browsable at ``/docs``) is generated from
the request models and routes. Each concern (reads, commands, the conversation with
the Coordinator, the change stream) is one router module included here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI

from workcenter.adapters.http import (
    commands,
    contract,
    conversation,
    dashboard,
    health,
    lease_watch,
    problems,
    reads,
    stream,
    worker_protocol,
)
from workcenter.adapters.http.conventions import Conventions
from workcenter.adapters.http.guard import Guard, Policy
from workcenter.adapters.http.stream import HeadWatcher
from workcenter.application import WorkCenter


def create_app(
    wc: WorkCenter,
    policy: Policy | None = None,
    *,
    on_message: Callable[[], None] | None = None,
    recover_every: float | None = None,
) -> FastAPI:
    """The ASGI application serving ``wc`` under ``policy`` (default: loopback, no token);
    ``on_message`` is called after each user message posted (the Coordinator's loop, to
    answer it at once); with ``recover_every``, Runs whose lease lapsed are ended every
    that many seconds while it serves, whether anyone claims or not (ADR-0126).

    The caller owns ``wc`` and closes it after the server stops."""
    policy = policy if policy is not None else Policy.for_host("127.0.0.1", token=None)
    heads = HeadWatcher(wc.changes.head)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with lease_watch.watching(wc, recover_every):
            yield
        await heads.stop()

    app = FastAPI(
        title="Workcenter",
        version=version("workcenter"),
        summary="A durable, event-sourced work ledger: its items, progress, budget and audit.",
        description=(
            "Every GET read also answers HEAD, and answers If-None-Match naming its current "
            "ETag with 304 Not Modified. Commands take JSON bodies that name each field once; "
            "those on an item need If-Match with its ETag. Errors are application/problem+json."
        ),
        lifespan=lifespan,
        # Operations are named as their functions are: what a generated client calls.
        generate_unique_id_function=lambda route: route.name,
    )
    app.state.center = wc
    app.state.head_watcher = heads
    app.state.message_posted = on_message or (lambda: None)
    app.openapi = contract.document(app)  # type: ignore[method-assign]
    problems.install(app)
    routers = (reads, commands, conversation, stream, worker_protocol, health)
    for router in (module.router for module in routers):
        app.include_router(router)
    dashboard.mount(app)
    app.add_middleware(Conventions)
    app.add_middleware(Guard, policy=policy)  # added last: it runs first
    return app
