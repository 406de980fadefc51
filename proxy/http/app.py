"""FastAPI application: schedule one, schedule a batch, cancel by id, health."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from chronos.errors import KafkaDeliveryError, ValidationError
from chronos.settings import ChronosSettings
from proxy.client import DelayClient, Receipt
from proxy.http.schemas import (
    BatchIn,
    BatchOut,
    CancelOut,
    ErrorOut,
    HealthOut,
    ReceiptOut,
    ScheduleIn,
)

_ERRORS: dict[int | str, dict[str, object]] = {
    413: {"model": ErrorOut, "description": "Message larger than the configured limit."},
    422: {"model": ErrorOut, "description": "A field breaks a rule; `field` names it."},
    503: {"model": ErrorOut, "description": "Kafka did not acknowledge in time."},
}


def _receipt(receipt: Receipt) -> ReceiptOut:
    return ReceiptOut(
        id=receipt.id, deliver_at_ms=receipt.deliver_at_ms, deliver_at=receipt.deliver_at
    )


def create_app(client: DelayClient, settings: ChronosSettings) -> FastAPI:
    """The HTTP API around ``client``; answers only after Kafka acknowledged."""
    app = FastAPI(
        title="chronos proxy",
        version="1",
        description="Schedule Kafka records for delayed delivery. Every 2xx answer means "
        "Kafka acknowledged the request on the inner topic.",
    )
    cap = settings.limits.repeat_max_interval_ms

    @app.exception_handler(ValidationError)
    def _invalid(_request: Request, exc: ValidationError) -> JSONResponse:
        return JSONResponse(
            status_code=exc.status, content={"error": exc.message, "field": exc.field}
        )

    @app.exception_handler(RequestValidationError)
    def _malformed(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        return JSONResponse(
            status_code=422, content={"error": first.get("msg", "invalid"), "field": ".".join(loc)}
        )

    @app.exception_handler(KafkaDeliveryError)
    def _unavailable(_request: Request, exc: KafkaDeliveryError) -> JSONResponse:
        return JSONResponse(status_code=503, content={"error": str(exc), "field": None})

    @app.post("/v1/messages", response_model=ReceiptOut, status_code=201, responses=_ERRORS)
    def schedule(body: ScheduleIn) -> ReceiptOut:
        """Schedule one message."""
        return _receipt(client.send_batch([body.to_request(cap)])[0])

    @app.post("/v1/messages/batch", response_model=BatchOut, status_code=201, responses=_ERRORS)
    def schedule_batch(body: BatchIn) -> BatchOut:
        """Schedule a batch; if any message is invalid nothing is scheduled."""
        if len(body.messages) > settings.proxy.batch_max:
            raise ValidationError("messages", f"at most {settings.proxy.batch_max} per batch")
        requests = []
        for index, message in enumerate(body.messages):
            try:
                requests.append(message.to_request(cap))
            except ValidationError as exc:
                raise ValidationError(f"messages[{index}].{exc.field}", exc.message) from exc
        return BatchOut(receipts=[_receipt(r) for r in client.send_batch(requests)])

    @app.delete(
        "/v1/messages/{message_id}", response_model=CancelOut, status_code=202, responses=_ERRORS
    )
    def cancel(message_id: str) -> CancelOut:
        """Cancel every remaining occurrence of a message."""
        return CancelOut(id=client.cancel(message_id).id)

    @app.get("/healthz", response_model=HealthOut, responses={503: {"model": HealthOut}})
    def health() -> JSONResponse:
        """200 when Kafka answers, 503 otherwise."""
        ok = client.healthy()
        body = HealthOut(status="ok" if ok else "unavailable", kafka=ok)
        return JSONResponse(status_code=200 if ok else 503, content=body.model_dump())

    return app
