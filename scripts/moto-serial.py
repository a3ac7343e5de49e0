#!/usr/bin/env python3
"""moto_server with every DynamoDB request served one at a time.

DynamoDB serialises conflicting conditional writes and transactions: of two `TransactWriteItems`
on one item, one wins and the other is cancelled. moto does not: its server is threaded, and a
transaction checks its conditions, applies its writes and rolls back (by restoring a copy of the
whole table) without a lock, so two concurrent transactions can both pass a condition, or one can
undo the other. The store conformance suite races two commits on purpose; against moto that race
must end as it ends on DynamoDB. So DynamoDB requests (`X-Amz-Target: DynamoDB_*`) go through one
lock; SQS, Secrets Manager and CloudWatch requests stay concurrent (an SQS long poll must not
block DynamoDB).

Usage: moto-serial.py [-H HOST] [-p PORT]   (the options of moto_server used by with-moto.sh)
"""

import argparse
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

DYNAMODB = threading.Lock()


class SerialDynamoDB:
    """WSGI middleware: a DynamoDB request holds the lock until its whole answer is built."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with DYNAMODB:
                return list(self.app(environ, start_response))
        return self.app(environ, start_response)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()
    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True
    run_simple(
        args.host,
        args.port,
        SerialDynamoDB(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
