"""Workcenter over HTTP: a FastAPI application served by uvicorn (the ``web`` extra).

``app.create_app`` assembles it from one module per concern: ``reads`` (GET routes
over the sanitised DTOs), ``commands`` (POST routes under If-Match), ``stream``
(Server-Sent Events following the event sequence), ``guard`` (hosts, bearer token,
body size), ``problems`` (RFC 9457 errors), ``preconditions`` (ETag and If-Match) and
``dashboard`` (the static page at ``/``). Nothing here is imported by the CLI until
``workcenter serve`` runs, so the extra stays optional.
"""
