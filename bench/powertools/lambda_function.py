"""The Powertools handler of ``handler.py`` as a Lambda function module.

The harness starts it the way the managed Python runtime does: ``python -m awslambdaric
lambda_function.lambda_handler`` against its fake Runtime API (``AWS_LAMBDA_RUNTIME_API``), with
this directory as ``LAMBDA_TASK_ROOT``. Everything a Lambda does at init happens at import: boto3,
Powertools' idempotency utility, the DynamoDB client, the persistence layer, the configuration;
each invocation is then one SQS batch through the same ``claim_and_book`` as the comparison runs.

Environment (as the gate's consumer reads its own): ``AWS_ENDPOINT_URL`` (moto),
``IDEMPOTENCY_TABLE`` (Powertools' table, key ``id``), ``BOOKINGS_TABLE``, ``TERMINAL_BASE_URL``;
``POWERTOOLS_ATOMIC_BOOKING=1`` makes it the fair peer (the booking written in one transaction
with the completion of the record, ``handler.AtomicBookingLayer``).
"""

import os
from types import SimpleNamespace

from handler import build

_args = SimpleNamespace(
    endpoint=os.environ["AWS_ENDPOINT_URL"],
    table=os.environ["IDEMPOTENCY_TABLE"],
    bookings=os.environ["BOOKINGS_TABLE"],
    terminal=os.environ["TERMINAL_BASE_URL"],
    atomic_booking=os.environ.get("POWERTOOLS_ATOMIC_BOOKING") == "1",
)
_handler, _calls, _outcomes = build(_args)


def lambda_handler(event, context):
    """One SQS batch: ``{"batchItemFailures": [...]}`` (partial batch response)."""
    return _handler(event, context)
