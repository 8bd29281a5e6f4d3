"""``workcenter serve``: the application under uvicorn, on one store."""

from __future__ import annotations

import uvicorn

from workcenter.adapters.http.app import create_app
from workcenter.adapters.http.guard import Policy
from workcenter.application import WorkCenter


def serve(wc: WorkCenter, policy: Policy, port: int, *, log_level: str = "info") -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM end it gracefully)."""
    config = uvicorn.Config(
        create_app(wc, policy),
        host=policy.host,
        port=port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
    )
    uvicorn.Server(config).run()
