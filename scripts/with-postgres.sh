#!/usr/bin/env bash
# Runs a command against a throwaway PostgreSQL server on a free loopback port:
#
#   scripts/with-postgres.sh cargo test -p integration-tests --test postgres
#   scripts/with-postgres.sh scripts/with-moto.sh cargo test --workspace   (both servers)
#
# Creates a cluster in a fresh temporary directory with the distribution's PostgreSQL 15
# (`initdb`, `pg_ctl` from PG_BIN, default /usr/lib/postgresql/15/bin; the `postgresql` package
# is installed with apt-get when missing and the script runs as root), starts it on
# 127.0.0.1:PORT with trust authentication for the superuser `gate` and a database `gate`,
# exports GATE_TEST_DATABASE_URL, runs "$@", and stops the server and removes the directory on
# exit, also when the command fails or is interrupted. Exits with the command's code. PgBouncer
# (`/usr/sbin/pgbouncer`, PGBOUNCER_BIN overrides) is installed the same way when missing; the
# tests start their own.
#
# TLS (`ssl=on`) with a throwaway CA and server certificate made here with openssl (valid two
# days from now, the name `localhost` only, not 127.0.0.1): exports GATE_TEST_DATABASE_TLS_URL
# (`postgresql://gate_tls:PASSWORD@localhost:PORT/gate`, no sslmode: the test adds it), whose role
# `gate_tls` (SCRAM password) pg_hba admits over TLS only (`hostssl`; `hostnossl` rejects it),
# GATE_TEST_DATABASE_CA (the CA's PEM) and GATE_TEST_DATABASE_OTHER_CA (a CA that signed nothing).
#
# The server refuses to run as root: as root, the cluster belongs to an unprivileged user
# (PG_USER, default `nobody`) and every server command runs as that user. The server is
# tuned for tests only (fsync off: a crash loses the throwaway data). PG_FSYNC=on starts it
# durable instead (`fsync`, `synchronous_commit` and `full_page_writes` on, the defaults of a
# real server: every commit waits for its WAL flush to the disk under $TMPDIR), for
# measurements (`PG_FSYNC=on make bench-stores`).
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi

pg_bin="${PG_BIN:-/usr/lib/postgresql/15/bin}"
if [ ! -x "$pg_bin/initdb" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "with-postgres: $pg_bin/initdb missing; installing postgresql with apt-get" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2 \
            || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y --no-install-recommends postgresql >&2; }
    fi
    if [ ! -x "$pg_bin/initdb" ]; then
        echo "with-postgres: $pg_bin/initdb not found; install PostgreSQL 15 (Debian/Ubuntu:" >&2
        echo "  apt-get install postgresql) or set PG_BIN to its bin directory" >&2
        exit 2
    fi
fi

# PgBouncer (Debian's package) for the tests behind a pooler (tests/support/pgbouncer.rs):
# installed with apt-get when missing and the script runs as root; otherwise those tests say
# what to install.
pgbouncer_bin="${PGBOUNCER_BIN:-/usr/sbin/pgbouncer}"
if [ ! -x "$pgbouncer_bin" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "with-postgres: $pgbouncer_bin missing; installing pgbouncer with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer >&2 \
        || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive \
             apt-get install -y --no-install-recommends pgbouncer >&2; } \
        || echo "with-postgres: pgbouncer could not be installed" >&2
fi

# As root, run the server's commands as an unprivileged user; otherwise as ourselves.
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
    pg_user="${PG_USER:-nobody}"
    as_pg=(runuser -u "$pg_user" --)
fi

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
dir="$(mktemp -d -t gate-pg.XXXXXX)"
chmod 755 "$dir"
if [ "${#as_pg[@]}" -gt 0 ]; then
    chown "$pg_user" "$dir"
fi
data="$dir/data"
log="$dir/server.log"
started=0

cleanup() {
    if [ "$started" -eq 1 ]; then
        "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! "${as_pg[@]}" "$pg_bin/initdb" -D "$data" -U gate --auth=trust --encoding=UTF8 \
    --locale=C --no-sync >"$dir/initdb.log" 2>&1; then
    echo "with-postgres: initdb failed:" >&2
    cat "$dir/initdb.log" >&2
    exit 1
fi
# The throwaway CA, the server's certificate signed by it, and another CA.
tls="$dir/tls"
mkdir "$tls"
if ! {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=gate test CA" -keyout "$tls/ca.key" -out "$tls/ca.crt" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=gate other CA" -keyout "$tls/other-ca.key" -out "$tls/other-ca.crt" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
        -keyout "$tls/server.key" -out "$tls/server.csr" &&
    printf 'subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' \
        >"$tls/server.ext" &&
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
        -CAcreateserial -days 2 -extfile "$tls/server.ext" -out "$tls/server.crt"
} >"$dir/openssl.log" 2>&1; then
    echo "with-postgres: the test certificates could not be made:" >&2
    cat "$dir/openssl.log" >&2
    exit 1
fi
chmod 600 "$tls/server.key"
chmod 755 "$tls"
chmod 644 "$tls/ca.crt" "$tls/other-ca.crt" "$tls/server.crt"
if [ "${#as_pg[@]}" -gt 0 ]; then
    chown "$pg_user" "$tls/server.key"
fi
# pg_hba: the role gate_tls over TLS only, then initdb's rules (trust for the rest).
hba="$data/pg_hba.conf"
{
    echo "hostssl   all gate_tls 127.0.0.1/32 scram-sha-256"
    echo "hostnossl all gate_tls 127.0.0.1/32 reject"
    cat "$hba"
} >"$dir/pg_hba.conf.new"
cat "$dir/pg_hba.conf.new" >"$hba"
# Durability: off for tests, on with PG_FSYNC=on.
case "${PG_FSYNC:-off}" in
    on) durability="-c fsync=on -c synchronous_commit=on -c full_page_writes=on" ;;
    off) durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off" ;;
    *) echo "with-postgres: PG_FSYNC must be on or off, not ${PG_FSYNC}" >&2; exit 2 ;;
esac
# Many tests at once, each with its own pool: room for their connections.
if ! "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$data" -l "$log" -w -t 60 start -o \
    "-p $port -c listen_addresses=127.0.0.1 -k $dir $durability -c max_connections=400 \
     -c ssl=on -c ssl_cert_file=$tls/server.crt -c ssl_key_file=$tls/server.key" >/dev/null; then
    echo "with-postgres: the server did not start:" >&2
    cat "$log" >&2
    exit 1
fi
started=1
"${as_pg[@]}" "$pg_bin/createdb" -h 127.0.0.1 -p "$port" -U gate gate

tls_password="$(openssl rand -hex 16)"
"${as_pg[@]}" "$pg_bin/psql" -h 127.0.0.1 -p "$port" -U gate -d gate -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE gate_tls LOGIN SUPERUSER PASSWORD '$tls_password'" >/dev/null

export GATE_TEST_DATABASE_URL="postgresql://gate@127.0.0.1:$port/gate?sslmode=disable"
export GATE_TEST_DATABASE_TLS_URL="postgresql://gate_tls:$tls_password@localhost:$port/gate"
export GATE_TEST_DATABASE_CA="$tls/ca.crt"
export GATE_TEST_DATABASE_OTHER_CA="$tls/other-ca.crt"
echo "with-postgres: PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') at 127.0.0.1:$port (data in $dir, fsync ${PG_FSYNC:-off})" >&2

set +e
"$@"
status=$?
set -e
exit "$status"
