#!/usr/bin/env python3
"""moto_server for the benchmark harness, with two fixes to the test double that would otherwise
dominate what the benchmark measures: TransactWriteItems in O(items touched) instead of O(table
size), and HTTP keep-alive.

1. TransactWriteItems.
moto 5.2.5 ``DynamoDBBackend.transact_write_items`` takes a ``copy.deepcopy`` of every table a
transaction touches, for its rollback, on every call: the cost of a commit grows with the number
of items stored, so a benchmark of a few thousand events measures moto's copying (a commit took
200 ms and more after a few hundred events here). DynamoDB has no such cost. This launcher keeps
moto's semantics (all or nothing, cancellation reasons in item order) and snapshots only the items
the transaction names: before it runs, each touched item is copied; if it is cancelled or fails,
those items are put back as they were (or removed if they did not exist).

2. Keep-alive. moto_server runs on werkzeug's development server, which sends ``Connection: close``
on every response: each request of every client is a new TCP connection (and, for the Rust
clients, a name resolution on a blocking thread). DynamoDB keeps connections open, and so do the
AWS SDKs. This launcher serves the same moto application (``DomainDispatcherApplication``) with
waitress (pinned in ``bench/requirements.txt``), which keeps HTTP/1.1 connections alive.
``--server werkzeug`` serves it on werkzeug's server, as moto_server does, for comparison.

3. DynamoDB one request at a time. moto's DynamoDB backend checks a condition and writes without a
lock, so two concurrent ``attribute_not_exists(pk)`` puts on one key can both succeed under a
threaded server; DynamoDB serialises conditional writes per item. Both servers run the application
behind ``scripts/moto-serial.py``'s ``SerialDynamoDB`` (one lock around each DynamoDB request and
its answer, as ``scripts/with-moto.sh`` runs moto for the tests), so the handlers see DynamoDB's
semantics. moto serves one request at a time anyway (one Python process), so the lock costs no
throughput (docs/BENCHMARKS.md).

4. A latency floor (``--latency-ms L``, for the cost measurement): every answer leaves no sooner
than L ms after its request arrived, measured around the whole application (the serialising lock
included). A request moto answers within L ms therefore takes L ms, as a DynamoDB call does; moto's
own time shows only where it exceeds L (a burst of concurrent requests queued at the lock). The
sleep happens outside the lock, on the server's threads (16 with a floor), so concurrent requests
wait in parallel, as DynamoDB serves them.

Usage: ``moto_server.py -H 127.0.0.1 -p PORT [--server waitress|werkzeug] [--threads N]
[--latency-ms L]``.
"""

import argparse
import copy
import os
import sys

from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
import importlib.util

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


def _serial_dynamodb():
    """``SerialDynamoDB`` of the repository's ``scripts/moto-serial.py`` (the launcher the tests
    use; its file name is not an importable module name)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "moto-serial.py")
    spec = importlib.util.spec_from_file_location("moto_serial", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SerialDynamoDB

_original = DynamoDBBackend.transact_write_items


class _NoTableCopy:
    """Stands in for the ``copy`` module inside moto's DynamoDB models: tables are not copied
    (the wrapper below restores the touched items instead); everything else is."""

    @staticmethod
    def deepcopy(value, memo=None):
        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name):
        return getattr(copy, name)


dynamodb_models.copy = _NoTableCopy()


def _touched(backend, transact_items):
    """(table, hash value, range value, copy of the item or None) per item of the transaction."""
    snapshot = []
    for entry in transact_items:
        try:
            op_type, op = next(iter(entry.items()))
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            key = op["Item"] if op_type == "Put" else op["Key"]
            hash_value = DynamoType(key[table.hash_key_attr])
            range_value = (
                DynamoType(key[table.range_key_attr]) if table.range_key_attr is not None else None
            )
        except (KeyError, StopIteration, AttributeError, TypeError):
            continue
        snapshot.append((table, hash_value, range_value, copy.deepcopy(table.get_item(hash_value, range_value))))
    return snapshot


def _restore(snapshot):
    for table, hash_value, range_value, item in reversed(snapshot):
        if range_value is None:
            if item is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = item
        else:
            if item is None:
                table.items.get(hash_value, {}).pop(range_value, None)
            else:
                table.items[hash_value][range_value] = item


def transact_write_items(self, transact_items):
    snapshot = _touched(self, transact_items)
    try:
        return _original(self, transact_items)
    except Exception:
        _restore(snapshot)
        raise


DynamoDBBackend.transact_write_items = transact_write_items


class LatencyFloor:
    """WSGI middleware: answers no sooner than ``latency_ms`` after the request arrived, and counts
    the DynamoDB requests by operation (``X-Amz-Target``), served as JSON on ``GET /_bench/calls``
    (the Lambda processes of the cost measurement are not the harness: it counts them here)."""

    def __init__(self, app, latency_ms):
        import threading

        self.app = app
        self.latency = latency_ms / 1000.0
        self.calls = {}
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        import json
        import time

        if environ.get("PATH_INFO") == "/_bench/calls":
            with self.lock:
                body = json.dumps(self.calls).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith("DynamoDB_20120810."):
            op = target.split(".", 1)[1]
            with self.lock:
                self.calls[op] = self.calls.get(op, 0) + 1
        arrived = time.monotonic()
        body = b"".join(self.app(environ, start_response))
        wait = arrived + self.latency - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return [body]


def main():
    p = argparse.ArgumentParser(description="moto for the benchmark harness")
    p.add_argument("-H", "--host", default="127.0.0.1")
    p.add_argument("-p", "--port", type=int, default=5000)
    p.add_argument("--server", choices=["waitress", "werkzeug"], default="waitress")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--latency-ms", type=float, default=0.0)
    args = p.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    moto = DomainDispatcherApplication(create_backend_app)
    moto.debug = True
    app = _serial_dynamodb()(moto)
    app = LatencyFloor(app, args.latency_ms)
    if args.latency_ms > 0:
        args.threads = max(args.threads, 16)
    if args.server == "werkzeug":
        from werkzeug.serving import run_simple

        run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)
        return 0
    import waitress

    waitress.serve(app, host=args.host, port=args.port, threads=args.threads, _quiet=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
