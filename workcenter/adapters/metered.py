"""Metered providers: every LLM request of an Action Run passes the WorkItem's
ResourceLedger before it is sent (resource-ledger.md 5, "Engine / Action Runs").

Wrap a call ``provider(request) -> response`` or a stream
``provider_stream(request) -> Iterable[chunk]``; a response or chunk may carry
``usage`` (a mapping key or an attribute). Per real request the wrapper

1. settles its previous reservation incomplete (with the usage seen so far) if
   that one is somehow still open, e.g. a stream abandoned without being closed;
2. reserves the request (kind ``action``, the Run's id, estimated from the
   request) and raises ``ResourceStopError`` on a denial, before the provider is
   called at all; given the Run's claim (``for_claim``), only while the Run is
   live (``StaleRun`` otherwise, ADR-0049). A reservation that keeps losing the
   race for a busy ledger (``WriteContention``) is tried again after a jittered
   pause, a few rounds, rather than failing the Run's attempt (ADR-0049);
3. sends it, and in a ``finally`` settles it: complete only if the call returned
   or the stream was read to its end; usage None when the provider gave none
   (the request then stays charged at its estimate).

A settlement that fails to save (write contention) never hides the call's own
result: the reservation stays counted at its estimate and is settled before the
next request, or by ``settle_pending``.

One wrapper serves one Run's requests one at a time; it is not for concurrent use.
Each call is one request admitted: a provider that retries inside itself (the
``openai`` client does, twice, unless made with ``max_retries=0``) sends requests
the ledger never admits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from workcenter.application import Claim, WorkCenter
from workcenter.domain import resource_ledger as rl
from workcenter.domain.actor import Actor
from workcenter.domain.errors import ResourceStopError, WorkcenterError
from workcenter.domain.run import RunRef
from workcenter.domain.usage import reported_usage
from workcenter.service_layer.contention import through_contention

Request = Mapping[str, Any]
Provider = Callable[[Request], Any]
StreamProvider = Callable[[Request], Iterable[Any]]


def usage_of(payload: Any) -> Mapping[str, Any] | None:
    """The ``usage`` a response or chunk carries, as a mapping (its counts as reported,
    ``reported_usage``); None when it has none."""
    if isinstance(payload, Mapping):
        return reported_usage(payload.get("usage"))
    return reported_usage(getattr(payload, "usage", None))


@dataclass
class _Pending:
    """A reservation not yet settled, and the usage its provider reported so far."""

    request_id: str
    payloads: list[Mapping[str, Any]] = field(default_factory=list)

    def usage(self) -> rl.Usage | None:
        return rl.sum_usage(self.payloads)


class MeteredProvider:
    """Admits, sends and settles each LLM request of one Run."""

    def __init__(
        self,
        wc: WorkCenter,
        *,
        work_item_id: UUID,
        run_id: UUID,
        provider: Provider | None = None,
        provider_stream: StreamProvider | None = None,
        actor: Actor | None = None,
        run: RunRef | None = None,
    ) -> None:
        self.wc = wc
        self.work_item_id = work_item_id
        self.run_id = run_id
        self.run = run  # the fence of every reservation; None: the Run is not checked
        self.actor = actor  # who makes the requests (the Run's worker); None: the default
        self.provider = provider
        self.provider_stream = provider_stream
        self._pending: _Pending | None = None

    @classmethod
    def for_claim(
        cls,
        wc: WorkCenter,
        claim: Claim,
        *,
        provider: Provider | None = None,
        provider_stream: StreamProvider | None = None,
    ) -> MeteredProvider:
        return cls(
            wc,
            work_item_id=claim.work_item_id,
            run_id=claim.run_id,
            provider=provider,
            provider_stream=provider_stream,
            actor=claim.actor,
            run=claim.ref,
        )

    def __call__(self, request: Request) -> Any:
        """Send one request; raises ``ResourceStopError`` (nothing sent) when it is denied."""
        if self.provider is None:
            raise TypeError("this MeteredProvider wraps no provider call")
        pending = self._admit(request)
        complete = False
        try:
            response = self.provider(request)
            usage = usage_of(response)
            if usage is not None:
                pending.payloads.append(usage)
            complete = True
            return response
        finally:
            self._settle(pending, complete=complete)

    def stream(self, request: Request) -> Iterator[Any]:
        """Stream one request. It is admitted when iteration starts, right before the
        provider is called; it settles complete only if the stream is read to its end."""
        provider_stream = self.provider_stream
        if provider_stream is None:
            raise TypeError("this MeteredProvider wraps no streaming provider")

        def chunks() -> Iterator[Any]:
            pending = self._admit(request)
            complete = False
            try:
                upstream = iter(provider_stream(request))
                try:
                    for chunk in upstream:
                        usage = usage_of(chunk)
                        if usage is not None:
                            pending.payloads.append(usage)
                        yield chunk
                    complete = True
                finally:
                    close = getattr(upstream, "close", None)
                    if callable(close):
                        close()
            finally:
                self._settle(pending, complete=complete)

        return chunks()

    def settle_pending(self) -> bool:
        """Settle an open reservation incomplete (see the module docstring); False if none."""
        pending = self._pending
        return pending is not None and self._settle(pending, complete=False)

    def _admit(self, request: Request) -> _Pending:
        self.settle_pending()
        admission = self._reserve(request)
        if not admission.allowed:
            raise ResourceStopError(admission.code or "request_denied")
        self._pending = _Pending(admission.request_id)
        return self._pending

    def _reserve(self, request: Request) -> rl.Admission:
        return through_contention(lambda: self._reserve_once(request))

    def _reserve_once(self, request: Request) -> rl.Admission:
        return self.wc.reserve_request(
            self.work_item_id,
            request=request,
            kind="action",
            run_id=None if self.run else self.run_id,
            run=self.run,
            actor=self.actor,
        )

    def _settle(self, pending: _Pending, *, complete: bool) -> bool:
        if self._pending is not pending:
            return False  # settled already, before a later request
        try:
            settled = through_contention(
                lambda: self.wc.settle_request(
                    self.work_item_id,
                    pending.request_id,
                    usage=pending.usage(),
                    complete=complete,
                    actor=self.actor,
                )
            )
        except WorkcenterError:
            return False  # stays pending: charged at its estimate, settled before the next request
        self._pending = None
        return settled
