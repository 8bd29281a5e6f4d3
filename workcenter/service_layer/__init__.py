"""The service layer: Workcenter's use cases, between the facade and the domain.

- ``handlers/``: the commands, one module per aggregate they drive (a WorkItem, a
  Run of an Action and its claim, a ResourceLedger, the Coordinator's
  conversation and its step) and the decision rules the Coordinator's handler is
  given.
- ``queries/``: the reads (an item's progress, list, detail, history and audit
  trail; a browser's pages; the change feed).
- ``history/``: the hash chain over the stored events and its proof (verify,
  anchor).
- ``repository.py``: loading aggregates and saving a command as one unit of work.
- ``read_models.py``: the registry of read models and each one's lifecycle.
- ``maintenance.py``: the operator's verbs over the whole store.
- ``ports.py``: what the layer needs from outside, plugged in by
  ``workcenter.bootstrap``.

Nothing here names an adapter; the facade (``workcenter.application``) dispatches
each public verb to one handler or query, as a message bus would.
"""
