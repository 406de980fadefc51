"""FastAPI application: schedule one, schedule a batch, cancel by id, status by id, health."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match

from chronos.errors import NotAcknowledged, ValidationError
from chronos.settings import ChronosSettings
from chronos.web.guard import RateLimiter, token_of
from chronos.web.quota import PendingQuota
from chronos.web.refusals import Refusals
from chronos.web.tokens import Operation
from proxy.client import DelayClient, Prepared, Receipt
from proxy.http.invalid import describe_invalid_body, unreadable_cause
from proxy.http.lane import (
    BodyLane,
    Decide,
    HandOver,
    LaneFull,
    OverBudget,
    Read,
    Refused,
    cpu_budget,
    in_id_space,
    schedule_requests,
)
from proxy.http.openapi_rules import state_rules
from proxy.http.schemas import (
    BatchIn,
    BatchOut,
    CancelOut,
    ErrorOut,
    HealthOut,
    PolicyIn,
    PolicyOut,
    ReceiptOut,
    RescheduleIn,
    RescheduleOut,
    ScheduleIn,
    batch_model,
)
from proxy.http.telemetry import CountResponses, ProxyTelemetry
from proxy.http.tenancy import from_wire, tenant_of, to_wire
from proxy.status import StatusUnavailable

_ERRORS: dict[int | str, dict[str, object]] = {
    413: {
        "model": ErrorOut,
        "description": (
            "Message larger than the configured limit, or the request's messages took more "
            "than proxy.request_cpu_ms of CPU to validate (send smaller batches)."
        ),
    },
    415: {"model": ErrorOut, "description": "The body is not JSON (content-type)."},
    422: {
        "model": ErrorOut,
        "description": (
            "A field breaks a rule (`field` names it), or the body is not valid JSON "
            "(`field` null; the error says where or why)."
        ),
    },
    503: {
        "model": ErrorOut,
        "description": (
            "Kafka did not acknowledge in time, or every body worker is busy and its queue "
            "full (Retry-After)."
        ),
    },
}


def unreadable_body(exc: StarletteHTTPException) -> str | None:
    """Why a body that FastAPI could not parse is not JSON, when that is the cause of its
    ``400``: not UTF-8, nested too deeply, a number of too many digits. The documented
    answer to a body that is not valid JSON is ``422`` (FastAPI answers ``400`` for every
    parse failure but a syntax error); None for any other ``400``."""
    if exc.status_code != 400:
        return None
    return unreadable_cause(exc.__cause__)


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method served at the request's path, as the OpenAPI spec lists them: Starlette's
    405 names only those of the first route matching the path (``DELETE`` of
    ``/v1/messages/{id}``, not its ``GET``), and a path of its own (``/v1/messages/batch``)
    comes before a template that also matches it."""
    exact: set[str] = set()
    templated: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] is not Match.NONE:
            path = str(getattr(route, "path", ""))
            (templated if "{" in path else exact).update(getattr(route, "methods", None) or ())
    return sorted(exact or templated)


#: Paths anyone may ask: the health probe and the API's own description.
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


def proxy_operation(method: str, path: str) -> Operation | None:
    """The operation a request calls, for the guard's token check (``chronos/web/guard.py``)."""
    if path in OPEN_PATHS:
        return None
    if path == "/metrics" or path.startswith("/v1/policies/"):
        return "admin"
    if method == "POST":
        return "reschedule" if path.endswith("/reschedule") else "send"
    return "cancel" if method == "DELETE" else "status"


def _check_topics(request: Request, topics: Sequence[str], batch: bool) -> None:
    """403 when the request's token may not schedule to one of ``topics``."""
    token = token_of(request.state)
    if token is None:
        return
    for index, topic in enumerate(topics):
        if not token.may_send_to(topic):
            field = f"messages[{index}].topic" if batch else "topic"
            error = f"token {token.name!r} may not send to topic {topic!r}"
            raise ValidationError(field, error, status=403)


class QuotaExceeded(Exception):
    """The token's pending-message quota (``reason`` max_pending) or its message rate
    (messages_per_s) has no room for the request (429)."""

    def __init__(self, message: str, retry_after_s: float, reason: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = reason


@dataclass(frozen=True)
class _Limits:
    """What bounds a token's sending beyond the guard's requests/s, per proxy process."""

    quota: PendingQuota
    messages: RateLimiter
    telemetry: ProxyTelemetry


def _send_counted(
    limits: _Limits, request: Request, read: Read, publish: Callable[[], list[Receipt]]
) -> list[Receipt]:
    """``publish`` the messages ``read`` describes within the token's ``messages_per_s`` and
    ``max_pending`` (chronos/web/quota.py), each charged its deliveries (a repeat: its
    ``times``; issue 62: a token of 2 messages/s got 10,000 deliveries through one request of
    a repeat), and count what Kafka acknowledged."""
    token = token_of(request.state)
    count = sum(read.deliveries)
    if token is not None and token.messages_per_s > 0:
        _refuse_over(
            limits.messages.wait_s(token.name, token.messages_per_s, count),
            f"{count} deliveries are over token {token.name!r}'s messages_per_s",
            f"token {token.name!r} is over its {token.messages_per_s:g} messages/s",
            "messages_per_s",
        )
    receipts = _send_within_quota(limits.quota, request, read, publish)
    limits.telemetry.scheduled(len(read.deliveries))
    return receipts


def _refuse_over(wait_s: float, never: str, not_now: str, reason: str) -> None:
    """A limit's answer as the API's: a request the limit can never admit is 422 (waiting
    would not help), one it admits later is 429 with the wait as Retry-After."""
    if wait_s == math.inf:
        raise ValidationError("messages", never)
    if wait_s > 0:
        raise QuotaExceeded(not_now, wait_s, reason)


def _tell(refusals: Refusals, request: Request, status: int, reason: str, detail: str) -> None:
    """A refusal of the API, told to the operators (counted, logged: chronos/web/refusals.py)."""
    token = token_of(request.state)
    refusals.refused(
        status,
        reason,
        token=None if token is None else token.name,
        operation=proxy_operation(request.method, request.url.path),
        client=None if request.client is None else request.client.host,
        detail=detail,
    )


def _send_within_quota(
    quota: PendingQuota, request: Request, read: Read, publish: Callable[[], list[Receipt]]
) -> list[Receipt]:
    """``publish`` within the token's ``max_pending`` (chronos/web/quota.py)."""
    token = token_of(request.state)
    if token is None or token.max_pending <= 0:
        return publish()
    now_ms = int(time.time() * 1000)
    count = sum(read.deliveries)
    _refuse_over(
        quota.admit(token.name, token.max_pending, count, now_ms),
        f"{count} deliveries are over token {token.name!r}'s max_pending",
        f"token {token.name!r} has {token.max_pending} messages pending, its max_pending",
        "max_pending",
    )
    try:
        receipts = publish()
    except BaseException:
        quota.release(token.name, count)
        raise
    quota.settle(token.name, read.last_dues, int(time.time() * 1000), read.deliveries)
    return receipts


def _check_id_scope(
    client: DelayClient, request: Request, message_id: str, operation: Operation
) -> None:
    """403 unless a token limited to some topics acts on a message of one of them.

    Only a node knows an id's topic: the proxy asks one (``proxy.status_nodes``). An id the
    nodes know no topic for (not yet ingested, cancelled, unknown) is refused too: a cancel
    for an id not yet seen stays in force for the add that follows, so allowing it would let
    a token cancel another tenant's message before it arrives.
    """
    token = token_of(request.state)
    if token is None or token.every_topic:
        return
    answer = client.status(message_id)
    topic = answer.get("topic")
    if topic is None:
        raise ValidationError(
            "message_id",
            f"token {token.name!r} may {operation} only messages of its topics, and no node "
            f"knows the topic of {message_id!r} (state {answer.get('state')})",
            status=403,
        )
    if not token.may_send_to(str(topic)):
        raise ValidationError(
            "message_id",
            f"token {token.name!r} may not {operation} messages of topic {topic!r}",
            status=403,
        )


def create_app(
    client: DelayClient,
    settings: ChronosSettings,
    telemetry: ProxyTelemetry | None = None,
    lane: BodyLane | None = None,
) -> FastAPI:
    """The HTTP API around ``client``; answers only after Kafka acknowledged. ``telemetry``
    counts what it answered, refused and scheduled (``GET /metrics``). ``lane`` reads large
    schedule bodies in worker processes (started on first use when not given; the caller
    closes it: ``app.state.lane``)."""
    app = FastAPI(
        title="chronos proxy",
        version="1",
        description="Schedule Kafka records for delayed delivery. Every 2xx answer means "
        "Kafka acknowledged the request on the inner topic.",
        # A trailing slash is a 404, not a redirect whose Location comes from the request's
        # Host header (anyone's host, in a link a victim follows).
        redirect_slashes=False,
    )
    limits = settings.limits
    told = telemetry or ProxyTelemetry(Refusals("proxy"))
    sending = _Limits(PendingQuota(), RateLimiter(), told)
    bodies = lane or BodyLane(settings)
    app.state.lane = bodies
    registry = CollectorRegistry(auto_describe=False)
    registry.register(told)
    app.add_middleware(CountResponses, telemetry=told)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = state_rules(FastAPI.openapi(app), settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override

    @app.exception_handler(ValidationError)
    def _invalid(request: Request, exc: ValidationError) -> JSONResponse:
        if exc.status == 403:  # a token's topics: the other refusals come from the guard
            _tell(told.refusals, request, 403, "topic", exc.message)
        return JSONResponse(
            status_code=exc.status, content={"error": exc.message, "field": exc.field}
        )

    @app.exception_handler(RequestValidationError)
    def _malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, error, field = describe_invalid_body(
            exc.errors()[0], request.headers.get("content-type")
        )
        return JSONResponse(status_code=status, content={"error": error, "field": field})

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # 404, 405 and the like: the documented error shape instead of {"detail": ...}.
        unreadable = unreadable_body(exc)
        if unreadable is not None:
            return JSONResponse(status_code=422, content={"error": unreadable, "field": None})
        headers = exc.headers
        if exc.status_code == 405:
            headers = {**(headers or {}), "allow": ", ".join(allowed_methods(app, request))}
        return JSONResponse(
            status_code=exc.status_code,
            content={"error": str(exc.detail), "field": None},
            headers=headers,
        )

    @app.exception_handler(QuotaExceeded)
    def _over_quota(request: Request, exc: QuotaExceeded) -> JSONResponse:
        _tell(told.refusals, request, 429, exc.reason, str(exc))
        return JSONResponse(
            status_code=429,
            content={"error": str(exc), "field": None},
            headers={"retry-after": str(max(1, math.ceil(exc.retry_after_s)))},
        )

    @app.exception_handler(UnicodeEncodeError)
    def _surrogate(_request: Request, exc: UnicodeEncodeError) -> JSONResponse:
        # A string of the body with a lone surrogate ("\ud800" in JSON) met a UTF-8 encode
        # (a topic, an id, a header name): the body's fault, not the server's.
        error = f"the body holds text that is not UTF-8: {exc.reason}"
        return JSONResponse(status_code=422, content={"error": error, "field": None})

    @app.exception_handler(LaneFull)
    def _lane_full(request: Request, exc: LaneFull) -> JSONResponse:
        _tell(told.refusals, request, 503, "body_workers", str(exc))
        return JSONResponse(
            status_code=503,
            content={"error": str(exc), "field": None},
            headers={"retry-after": str(exc.retry_after_s)},
        )

    @app.exception_handler(OverBudget)
    def _over_budget(request: Request, exc: OverBudget) -> JSONResponse:
        _tell(told.refusals, request, 413, "request_cpu_ms", str(exc))
        return JSONResponse(status_code=413, content={"error": str(exc), "field": None})

    @app.exception_handler(NotAcknowledged)
    def _unavailable(_request: Request, exc: NotAcknowledged) -> JSONResponse:
        return JSONResponse(status_code=503, content={"error": str(exc), "field": None})

    scope_ids = settings.proxy.scope_ids

    def tenant(request: Request) -> str | None:
        return tenant_of(token_of(request.state), scope_ids)

    def scoped(request: Request, message_id: str) -> str:
        return to_wire(tenant(request), message_id, limits.max_id_bytes, "message_id")

    def prepare(request: Request, messages: list[ScheduleIn], batch: bool) -> list[Prepared]:
        """Every message validated into its inner record, in the token's id space, within
        ``proxy.request_cpu_ms`` (on the event loop's threads; a body worker does the same
        for a large body: proxy/http/lane.py), or HandOver past ``proxy.inline_cpu_ms`` when
        there are body workers to take it."""
        proxy = settings.proxy
        hand_over = proxy.inline_cpu_ms if proxy.body_workers else None
        within = cpu_budget(proxy.request_cpu_ms, hand_over)
        requests = schedule_requests(messages, settings, batch)
        in_id_space(requests, tenant(request), settings, batch, client.new_id)
        return client.prepare(requests, within)

    def send(
        request: Request, read: Read, publish: Callable[[], list[Receipt]]
    ) -> list[ReceiptOut]:
        """Send within the token's limits; receipts carry the ids the caller gave."""
        space = tenant(request)
        receipts = _send_counted(sending, request, read, publish)
        return [
            ReceiptOut(
                id=from_wire(space, r.id), deliver_at_ms=r.deliver_at_ms, deliver_at=r.deliver_at
            )
            for r in receipts
        ]

    def sent(request: Request, prepared: list[Prepared]) -> list[ReceiptOut]:
        """``send`` for messages prepared here."""
        return send(request, Read.of(prepared), lambda: client.publish(prepared))

    def decide(batch: bool, request: Request) -> Decide:
        """The answer to a body a worker read, as the route would give it."""

        def answer(read: Read | Refused, publish: Callable[[], list[Receipt]]) -> JSONResponse:
            if isinstance(read, Refused) and not read.after_topics:
                return JSONResponse({"error": read.error, "field": read.field}, read.status)
            _check_topics(request, read.topics, batch)
            if isinstance(read, Refused):
                if read.status == 413 and read.field is None:
                    _tell(told.refusals, request, 413, "request_cpu_ms", read.error)
                return JSONResponse({"error": read.error, "field": read.field}, read.status)
            receipts = send(request, read, publish)
            out: BaseModel = BatchOut(receipts=receipts) if batch else receipts[0]
            return JSONResponse(out.model_dump(mode="json"), 201)

        return answer

    class LaneRoute(APIRoute):
        """A schedule route whose large bodies a body worker reads (proxy/http/lane.py)."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            on_loop = super().get_route_handler()
            batch = self.path.endswith("/batch")

            async def handler(request: Request) -> Response:
                try:
                    body = await request.body()  # kept by the request: the route reads it again
                except ClientDisconnect:
                    # The guard cut the body off and answered (413, 408, 503), or the client
                    # left: nothing more reaches it. Dropped here, the chunks read are freed
                    # at once; raised, the server would log a traceback that holds them.
                    return Response(status_code=400)
                content_type = request.headers.get("content-type")
                if not bodies.takes(body, content_type):
                    try:
                        return await on_loop(request)
                    except HandOver:
                        pass  # its messages cost more than their bytes said: read it again
                answer: Response = await bodies.answer(
                    body, content_type, batch, tenant(request), decide(batch, request)
                )
                return answer

            return handler

    def schedule(body: ScheduleIn, request: Request) -> ReceiptOut:
        """Schedule one message."""
        _check_topics(request, [body.topic], batch=False)
        return sent(request, prepare(request, [body], batch=False))[0]

    def schedule_batch(body: BatchIn, request: Request) -> BatchOut:
        """Schedule a batch; if any message is invalid nothing is scheduled."""
        _check_topics(request, [m.topic for m in body.messages], batch=True)
        return BatchOut(receipts=sent(request, prepare(request, body.messages, batch=True)))

    # The body's model knows proxy.batch_max: a longer batch is refused before any of its
    # messages is validated (``batch_model``).
    schedule_batch.__annotations__["body"] = batch_model(settings.proxy.batch_max)
    for path, endpoint, model in (
        ("/v1/messages", schedule, ReceiptOut),
        ("/v1/messages/batch", schedule_batch, BatchOut),
    ):
        app.router.add_api_route(
            path,
            endpoint,
            methods=["POST"],
            response_model=model,
            status_code=201,
            responses=_ERRORS,
            route_class_override=LaneRoute,
        )

    @app.delete(
        "/v1/messages/{message_id}", response_model=CancelOut, status_code=202, responses=_ERRORS
    )
    def cancel(message_id: str, request: Request) -> CancelOut:
        """Cancel every remaining occurrence of a message."""
        wire = scoped(request, message_id)
        _check_id_scope(client, request, wire, "cancel")
        client.cancel(wire)
        return CancelOut(id=message_id)

    @app.post(
        "/v1/messages/{message_id}/reschedule",
        response_model=RescheduleOut,
        status_code=202,
        responses=_ERRORS,
    )
    def reschedule(message_id: str, body: RescheduleIn, request: Request) -> RescheduleOut:
        """Move a pending message to a new due time (of a repeat, that occurrence alone: the
        later ones keep the repeat's schedule; docs/using.md, Reschedule). Not moved when
        already delivered or being delivered: the status says."""
        delay, deliver_at = body.due()
        wire = scoped(request, message_id)
        _check_id_scope(client, request, wire, "reschedule")
        receipt = client.reschedule(wire, delay=delay, deliver_at=deliver_at)
        return RescheduleOut(id=message_id, deliver_at_ms=receipt.deliver_at_ms)

    @app.exception_handler(StatusUnavailable)
    def _no_status(_request: Request, exc: StatusUnavailable) -> JSONResponse:
        return JSONResponse(status_code=503, content={"error": str(exc), "field": None})

    @app.get("/v1/messages/{message_id}", responses={503: {"model": ErrorOut}})
    def status(message_id: str, request: Request) -> dict[str, Any]:
        """Where a message is: ``pending``, ``delivered`` (partition, offset), ``dead_lettered``,
        ``cancelled`` (``cancel`` says whether it removed the message) or ``unknown``, as a
        ready node of ``proxy.status_nodes`` answers. 503 when no node can. 403 for a message
        of a topic the token may not send to; ``unknown`` for another tenant's id (its ids
        are out of reach: proxy/http/tenancy.py)."""
        answer = client.status(scoped(request, message_id))
        if "id" in answer:
            answer = {**answer, "id": message_id}
        token = token_of(request.state)
        topic = answer.get("topic")
        if token is not None and topic is not None and not token.may_send_to(str(topic)):
            raise ValidationError(
                "message_id", f"token {token.name!r} may not see messages of {topic!r}", status=403
            )
        return answer

    @app.put("/v1/policies/{topic}", response_model=PolicyOut, responses=_ERRORS)
    def set_policy(topic: str, body: PolicyIn, request: Request) -> PolicyOut:
        """Replace the delivery policy of ``topic`` (``*``: every topic without its own) on
        every node, live: rate, retries, maximum age. The ``admin`` operation with tokens.
        Answered once Kafka acknowledged it; each node applies it as it reads the policy
        topic (``GET /v1/policies`` of a node's admin API shows what it applies)."""
        _check_topics(request, [topic], batch=False)
        policy = body.to_policy()
        client.set_policy(topic, policy)
        return PolicyOut(topic=topic, policy=policy.model_dump(exclude_unset=True))

    @app.delete("/v1/policies/{topic}", response_model=PolicyOut, responses=_ERRORS)
    def clear_policy(topic: str, request: Request) -> PolicyOut:
        """Clear the policy set live for ``topic``: its configured one applies again."""
        _check_topics(request, [topic], batch=False)
        client.set_policy(topic, None)
        return PolicyOut(topic=topic, policy=None)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus text (proxy/http/telemetry.py); the ``admin`` operation with tokens."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", response_model=HealthOut, responses={503: {"model": HealthOut}})
    def health() -> JSONResponse:
        """200 when Kafka answers, 503 otherwise."""
        ok = client.healthy()
        body = HealthOut(status="ok" if ok else "unavailable", kafka=ok)
        return JSONResponse(status_code=200 if ok else 503, content=body.model_dump())

    return app
