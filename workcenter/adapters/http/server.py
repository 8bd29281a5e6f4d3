"""``workcenter serve``: the application under uvicorn, on one store."""

from __future__ import annotations

from types import FrameType

import uvicorn

from workcenter.adapters.http.app import create_app
from workcenter.adapters.http.guard import Policy
from workcenter.adapters.http.stream import HeadWatcher
from workcenter.application import WorkCenter

# Change streams end when the server is told to stop; anything still open after this
# long is cut (a browser reconnects with Last-Event-ID and loses nothing).
GRACEFUL_SECONDS = 2


def serve(wc: WorkCenter, policy: Policy, port: int, *, log_level: str = "info") -> None:
    """Serve until interrupted by Ctrl-C or SIGTERM."""
    app = create_app(wc, policy)
    config = uvicorn.Config(
        app,
        host=policy.host,
        port=port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
    )
    StreamEndingServer(config, app.state.head_watcher).run()


class StreamEndingServer(uvicorn.Server):
    """A uvicorn server that ends the change streams as soon as it is told to stop."""

    def __init__(self, config: uvicorn.Config, heads: HeadWatcher) -> None:
        super().__init__(config)
        self.heads = heads

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.heads.close()
        super().handle_exit(sig, frame)
