#!/usr/bin/env python3
"""moto_server, one request at a time.

DynamoDB serialises conditional writes per item: of N concurrent ``PutItem`` calls with
``attribute_not_exists(pk)`` on one key, exactly one succeeds. moto does not: ``moto_server``
serves its application on werkzeug's threaded development server, and moto's DynamoDB backend
checks a condition and writes the item without a lock, so two threads can both see the key absent
and both succeed (seen with two copies of one message in one batch). A test of concurrent
conditional writes against it passes or fails for moto's reasons.

This launcher serves the same application as ``moto_server`` (``DomainDispatcherApplication``
with moto's request handler) behind one lock: connections are still accepted concurrently, but
each request runs to its last response byte before the next one starts, so every request is
atomic, as every single-item operation and every transaction is on DynamoDB. moto serves one
request at a time anyway (one Python process); the lock only takes away the interleaving.

Usage (the options ``moto_server`` has that the tests use)::

    moto_serial.py [-H 127.0.0.1] [-p PORT]

``scripts/with-moto.sh`` runs it with the ``.venv`` Python; ``bench/moto_server.py`` wraps its
application with :class:`SerialApp` too.
"""

import argparse
import os
import signal
import sys
import threading


class SerialApp:
    """A WSGI application that runs ``app`` for one request at a time: the call and the whole
    response body (read inside the lock, so a lazily produced body cannot interleave either)."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            result = self.app(environ, start_response)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return [body]


def moto_app():
    """moto's server application, as ``moto_server`` builds it."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True
    return app


def main(argv=None):
    parser = argparse.ArgumentParser(description="moto_server serving one request at a time")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=int(os.environ.get("MOTO_PORT", 5000)))
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import run_simple

    def stop(_signum, _frame):
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    run_simple(
        args.host,
        args.port,
        SerialApp(moto_app()),
        threaded=True,
        request_handler=MotoRequestHandler,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
