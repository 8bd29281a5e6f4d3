"""The `workcenter` command's entry point, outside the ``workcenter`` package on purpose.

Importing the CLI imports most of Workcenter (``workcenter/__init__.py`` alone loads the
application, the stores and the models: about half a second), and the CLI takes Ctrl-C
only once that is done. A Ctrl-C in that time raised KeyboardInterrupt out of an import,
and Python printed its traceback. A module inside the package could not catch it: the
package's ``__init__`` is imported first. So this one imports nothing of Workcenter's
outside the ``try`` (ADR-0106).
"""

from __future__ import annotations

import sys

STOPPED_BY_SIGINT = 130  # 128 + SIGINT, as the CLI's long verbs exit (ADR-0100)


def main() -> None:
    try:
        from workcenter.adapters.cli import main as cli
    except KeyboardInterrupt:
        # The CLI's own words for a stop, though click is not known to be loaded yet.
        sys.stderr.write(
            "interrupted by SIGINT: workcenter stopped while it was starting; nothing was done\n"
        )
        sys.exit(STOPPED_BY_SIGINT)
    cli()
