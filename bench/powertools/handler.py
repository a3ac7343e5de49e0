#!/usr/bin/env python3
"""The Powertools for AWS Lambda (Python) side of the benchmark.

An SQS handler that does what the gate does, the way most AWS teams write it with Powertools'
idempotency utility: ``idempotent_function`` with its ``DynamoDBPersistenceLayer`` around "claim
the slot, write the booking". Powertools 3.x sends ``ReturnValuesOnConditionCheckFailure=ALL_OLD``
on its reserve ``PutItem`` whenever boto3 is at least 1.26.164 (``return_value_on_condition``); this
script checks that it is on, so a duplicate costs one call as the gate's does.

The key is ``[notificationId, equipment_number]`` (``event_key_jmespath``), payload validation covers
the whole body (``payload_validation_jmespath="@"``, the counterpart of the gate's fingerprint). The
slot claim is a plain ``urllib`` POST to the terminal simulator (Powertools has no downstream key,
so none is sent); the booking is a plain ``PutItem``.

The fair peer (``--atomic-booking``, or ``POWERTOOLS_ATOMIC_BOOKING=1`` in
``lambda_function.py``): the same handler whose booking is written in one ``TransactWriteItems``
with Powertools' completion of its record (``AtomicBookingLayer``), so that a crash between them
cannot leave a booking without its completed record or the reverse: Powertools with the gate's
atomic commit, and nothing else of the gate (no guard, no stranded-record index).

Run by the harness (``gate-bench``), one process for the whole phase:

    handler.py --endpoint URL --table T --bookings B --terminal URL --deliveries FILE [--warmup FILE]

``FILE`` is a JSON list of ``{"messageId", "body"}``. Each delivery is handled as a batch of one
(as the Rust handlers are). Prints one JSON object: wall and CPU seconds of the measured loop
(``time.process_time``, this process only: moto and the terminal are other processes), per-event
latencies in microseconds, DynamoDB calls by operation (a botocore ``before-call`` hook), outcomes,
the CPU seconds of the imports and start-up, and the peak RSS.
"""

import argparse
import json
import resource
import sys
import time
import urllib.request

START_CPU = time.process_time()

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

from aws_lambda_powertools.utilities.idempotency import (  # noqa: E402
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)


class FakeContext:
    """The parts of a Lambda context Powertools reads (remaining time for the in-progress expiry)."""

    function_name = "powertools-bench"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:powertools-bench"
    memory_limit_in_mb = 512
    log_group_name = "/aws/lambda/powertools-bench"
    log_stream_name = "bench"

    def __init__(self, request_id: str, deadline_ms: float):
        self.aws_request_id = request_id
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int(self._deadline_ms - time.time() * 1000))


class AtomicBookingLayer(DynamoDBPersistenceLayer):
    """Powertools' DynamoDB persistence layer whose completion carries the business write.

    ``_update_record`` (Powertools' save of a completed record: one ``UpdateItem``) becomes one
    ``TransactWriteItems`` of that same update and the booking ``Put`` the function staged in
    ``staged["booking"]``: 2 items, so 2 x 2 write units, in one round trip.
    """

    def __init__(self, *args, bookings_table: str, staged: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self._bookings_table = bookings_table
        self._staged = staged

    def _update_record(self, data_record):
        booking = self._staged.pop("booking", None)
        if booking is None:
            # Nothing staged (no booking made): Powertools' own update.
            return super()._update_record(data_record)
        update_expression = "SET #response_data = :response_data, #expiry = :expiry, #status = :status"
        values = {
            ":expiry": {"N": str(data_record.expiry_timestamp)},
            ":response_data": {"S": data_record.response_data},
            ":status": {"S": data_record.status},
        }
        names = {"#expiry": self.expiry_attr, "#response_data": self.data_attr, "#status": self.status_attr}
        if self.payload_validation_enabled:
            update_expression += ", #validation_key = :validation_key"
            values[":validation_key"] = {"S": data_record.payload_hash}
            names["#validation_key"] = self.validation_key_attr
        self.client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": self._get_key(data_record.idempotency_key),
                        "UpdateExpression": update_expression,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                },
                {"Put": {"TableName": self._bookings_table, "Item": booking}},
            ]
        )


def build(args):
    calls: dict = {}
    outcomes: dict = {}
    staged: dict = {}
    atomic = bool(getattr(args, "atomic_booking", False))

    def count(model=None, **_kwargs):
        name = getattr(model, "name", "?")
        calls[name] = calls.get(name, 0) + 1

    client = boto3.client(
        "dynamodb",
        endpoint_url=args.endpoint,
        region_name="eu-west-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"mode": "standard", "max_attempts": 3}),
    )
    client.meta.events.register("before-call.dynamodb", count)
    if atomic:
        persistence = AtomicBookingLayer(
            table_name=args.table, boto3_client=client, bookings_table=args.bookings, staged=staged
        )
    else:
        persistence = DynamoDBPersistenceLayer(table_name=args.table, boto3_client=client)
    if persistence.return_value_on_condition != {"ReturnValuesOnConditionCheckFailure": "ALL_OLD"}:
        sys.exit("Powertools does not send ReturnValuesOnConditionCheckFailure=ALL_OLD: boto3 too old")
    config = IdempotencyConfig(
        event_key_jmespath="[notificationId, equipment_number]",
        payload_validation_jmespath="@",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=14 * 24 * 3600,
    )
    terminal = args.terminal.rstrip("/") + "/slots"

    @idempotent_function(data_keyword_argument="notification", config=config, persistence_store=persistence)
    def claim_and_book(notification: dict) -> dict:
        window = notification["preferred_window"]
        request = json.dumps(
            {
                "equipment_number": notification["equipment_number"],
                "window_start": window["start"],
                "window_end": window["end"],
                "pin": notification["pin"],
            }
        ).encode()
        req = urllib.request.Request(
            terminal, data=request, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as response:
            slot = json.loads(response.read())
        booking = {
            "source_event": {"S": f"{notification['notificationId']}:{notification['equipment_number']}"},
            "container": {"S": notification["equipment_number"]},
            "slot_id": {"S": slot["slot_id"]},
            "terminal": {"S": notification["terminal"]},
            "window_start": {"S": window["start"]},
            "window_end": {"S": window["end"]},
            "booked_at": {"N": str(int(time.time() * 1000))},
        }
        if atomic:
            # Written with the completion of the record, in one transaction (AtomicBookingLayer).
            staged["booking"] = booking
        else:
            client.put_item(TableName=args.bookings, Item=booking)
        outcomes["committed"] = outcomes.get("committed", 0) + 1
        return {"slot_id": slot["slot_id"]}

    def handler(event: dict, context: FakeContext) -> dict:
        config.register_lambda_context(context)
        failures = []
        for record in event["Records"]:
            before = outcomes.get("committed", 0)
            try:
                claim_and_book(notification=json.loads(record["body"]))
            except Exception as exc:  # noqa: BLE001 - a failed record goes back to SQS
                outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
                failures.append({"itemIdentifier": record["messageId"]})
                continue
            if outcomes.get("committed", 0) == before:
                outcomes["duplicate"] = outcomes.get("duplicate", 0) + 1
        return {"batchItemFailures": failures}

    return handler, calls, outcomes


def run(handler, deliveries):
    latencies = []
    for d in deliveries:
        event = {"Records": [{"messageId": d["messageId"], "body": d["body"]}]}
        context = FakeContext(d["messageId"], time.time() * 1000 + 60_000)
        t0 = time.perf_counter_ns()
        handler(event, context)
        latencies.append((time.perf_counter_ns() - t0) // 1000)
    return latencies


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--bookings", required=True)
    p.add_argument("--terminal", required=True)
    p.add_argument("--deliveries", required=True)
    p.add_argument("--warmup")
    p.add_argument("--atomic-booking", action="store_true", help="the fair peer (module docs)")
    args = p.parse_args()
    handler, calls, outcomes = build(args)
    if args.warmup:
        with open(args.warmup) as f:
            run(handler, json.load(f))
    startup_cpu = time.process_time() - START_CPU
    with open(args.deliveries) as f:
        deliveries = json.load(f)
    calls.clear()
    outcomes.clear()
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    latencies = run(handler, deliveries)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    json.dump(
        {
            "events": len(deliveries),
            "wall_s": wall,
            "cpu_s": cpu,
            "latencies_us": latencies,
            "calls": calls,
            "outcomes": outcomes,
            "startup_and_warmup_cpu_s": startup_cpu,
            "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
