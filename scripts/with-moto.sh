#!/usr/bin/env bash
# Runs a command against a throwaway moto server (DynamoDB, SQS) on a free loopback port:
#
#   scripts/with-moto.sh cargo test -p integration-tests
#
# Starts moto on 127.0.0.1:PORT through scripts/moto-serial.py (moto's server with DynamoDB
# requests served one at a time, as DynamoDB serialises conflicting transactions and moto does
# not; MOTO_SERVER=/path/to/moto_server runs that instead), waits until it answers, exports
# MOTO_ENDPOINT and dummy AWS credentials and region, runs "$@", and stops moto on exit, also when
# the command fails or is interrupted. Exits with the command's code.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
moto="${MOTO_SERVER:-$root/.venv/bin/moto_server}"
if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi
if [ ! -x "$moto" ]; then
    echo "with-moto: $moto not found; install it with:" >&2
    echo "  python3 -m venv $root/.venv && $root/.venv/bin/pip install 'moto[server]==5.2.5'" >&2
    exit 2
fi

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
log="$(mktemp -t moto.XXXXXX.log)"
if [ -n "${MOTO_SERVER:-}" ]; then
    "$moto" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
else
    "$root/.venv/bin/python" "$root/scripts/moto-serial.py" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
fi
moto_pid=$!

cleanup() {
    kill "$moto_pid" 2>/dev/null || true
    wait "$moto_pid" 2>/dev/null || true
    rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

endpoint="http://127.0.0.1:$port"
ready=0
for _ in $(seq 1 150); do
    if ! kill -0 "$moto_pid" 2>/dev/null; then
        echo "with-moto: moto_server exited early:" >&2
        cat "$log" >&2
        exit 1
    fi
    if python3 - "$endpoint" <<'PY' 2>/dev/null; then
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=1)
except urllib.error.HTTPError:
    pass  # any HTTP answer means it is up
PY
        ready=1
        break
    fi
    sleep 0.2
done
if [ "$ready" -ne 1 ]; then
    echo "with-moto: moto_server did not answer on $endpoint within 30 s:" >&2
    cat "$log" >&2
    exit 1
fi

export MOTO_ENDPOINT="$endpoint"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_SESSION_TOKEN=test
export AWS_REGION=eu-west-1 AWS_DEFAULT_REGION=eu-west-1
echo "with-moto: moto at $MOTO_ENDPOINT (pid $moto_pid)" >&2

set +e
"$@"
status=$?
set -e
exit "$status"
