#!/usr/bin/env bash
# `sam local invoke` as a step of `make test` (docs/LOCAL_RUNS.md, "sam local invoke without a
# registry"): the functions `sam build` makes, run by SAM's own emulator, against moto and the
# terminal simulator, with every answer and the store's state after it checked
# (scripts/sam_local_check.py). Needs root (dockerd) and no registry:
#
#   scripts/sam-local.sh                 the root template, then payments', then the test of the
#                                        test (a broken consumer must fail the checks)
#   SAM_LOCAL_BREAK=init|answer scripts/sam-local.sh
#                                        the same run with the root consumer broken: it goes red
#
# It installs docker.io and debootstrap with apt if missing, starts its own dockerd (own socket,
# data root under $SAM_LOCAL_STATE, no iptables, a default bridge this machine does not forward)
# and stops it on exit, also when a check fails. The base image
# public.ecr.aws/lambda/provided:al2023-x86_64 is a Debian root file system (debootstrap from
# apt's own mirror) with the step's test CA, built once and kept, keyed by the SAM version and the
# architecture.
# The containers reach moto and the terminal only through an `--internal` docker network the step
# creates: its gateway (this machine's bridge) is where scripts/sam_local_relay.py answers TLS for
# the AWS endpoints' names and the terminal's, forwarding to loopback.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
export PATH="$venv/bin:$PATH"
state="${SAM_LOCAL_STATE:-/var/cache/exactly-once-gate/sam-local}"
break_mode="${SAM_LOCAL_BREAK:-}"
arch=x86_64
image="public.ecr.aws/lambda/provided:al2023-$arch"
# Bump the recipe number when the image's contents change, so an old image is rebuilt.
recipe=2
start_s=$(date +%s)
log() { echo "sam-local: $*" >&2; }

case "$break_mode" in "" | init | answer) ;; *) log "SAM_LOCAL_BREAK must be init or answer"; exit 2 ;; esac
if [ "$(id -u)" -ne 0 ]; then log "needs root (it starts its own dockerd)"; exit 2; fi
if [ "$(uname -m)" != x86_64 ]; then log "runs the x86_64 build on an x86_64 machine only"; exit 2; fi
if [ ! -x "$venv/bin/sam" ]; then scripts/tools.sh; fi
sam_version="$("$venv/bin/python" -m pip show aws-sam-cli 2>/dev/null | awk '/^Version:/{print $2}')"
key="sam-$sam_version-$arch-recipe$recipe"

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v objdump >/dev/null || missing+=(binutils)
command -v file >/dev/null || missing+=(file)
command -v ip >/dev/null || missing+=(iproute2)
command -v sysctl >/dev/null || missing+=(procps)
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$state"
# One run at a time per data root (two dockerds cannot share one).
exec 9>"$state/lock"
flock 9

run="$(mktemp -d /tmp/sam-local.XXXXXX)"
pids=()
dockerd_pid=""
network=""
bridge_made=""
cleanup() {
    status=$?
    set +e
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    if [ -n "$dockerd_pid" ]; then
        docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1
        [ -n "$network" ] && docker network rm "$network" >/dev/null 2>&1
        kill "$dockerd_pid" 2>/dev/null
        for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$dockerd_pid" 2>/dev/null
        wait "$dockerd_pid" 2>/dev/null
        # The containerd dockerd started: it stops with dockerd, but not after a kill -9.
        containerd_pid="$(cat "$run/exec/containerd/containerd.pid" 2>/dev/null)"
        [ -n "$containerd_pid" ] && kill "$containerd_pid" 2>/dev/null
    fi
    [ -n "$bridge_made" ] && ip link del "$bridge" 2>/dev/null
    if [ "$status" -ne 0 ] && [ -f "$run/dockerd.log" ]; then
        log "dockerd's last lines:"; tail -n 5 "$run/dockerd.log" >&2
    fi
    if [ -n "${SAM_LOCAL_DEBUG:-}" ]; then
        rm -rf /tmp/sam-local-debug; cp -r "$run" /tmp/sam-local-debug 2>/dev/null
        log "SAM_LOCAL_DEBUG: the run's logs are kept in /tmp/sam-local-debug"
    fi
    rm -rf "$run"
    log "done in $(($(date +%s) - start_s)) s (exit $status)"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- dockerd -------------------------------------------------------------------------------------
# SAM creates each container on dockerd's default network and only then connects it to
# --docker-network: without a default bridge (--bridge=none) the container gets no interface at all.
# So dockerd gets a default bridge of its own whose traffic this machine does not forward
# (net.ipv4.conf.BRIDGE.forwarding=0, no masquerading, no iptables): through it a container
# reaches this machine's own addresses only, and docker-proxy publishes SAM's emulator port on
# 127.0.0.1 through it. Nothing leaves the machine.
bridge="${SAM_LOCAL_BRIDGE:-gate-sam0}"
bridge_cidr="${SAM_LOCAL_BRIDGE_CIDR:-10.213.0.1/24}"
ip link del "$bridge" 2>/dev/null || true
ip link add "$bridge" type bridge
bridge_made=1
ip addr add "$bridge_cidr" dev "$bridge"
ip link set "$bridge" up
sysctl -qw "net.ipv4.conf.$bridge.forwarding=0"
export DOCKER_HOST="unix://$run/docker.sock"
dockerd --iptables=false --ip-masq=false --ip-forward=false --bridge="$bridge" --storage-driver overlay2 \
    -H "$DOCKER_HOST" --data-root "$state/docker" --exec-root "$run/exec" \
    --pidfile "$run/docker.pid" >"$run/dockerd.log" 2>&1 9>&- &
dockerd_pid=$!
# 60 s: a first start on a loaded machine (containerd, the data root's layers) can be slow.
for _ in $(seq 1 300); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
docker version >/dev/null || { log "dockerd did not start"; cat "$run/dockerd.log" >&2; exit 1; }

# A network left by an earlier run that was killed before its cleanup.
docker network ls -q --filter name=gate-sam-local- | xargs -r docker network rm >/dev/null 2>&1 || true

# --- the base image, once per key ----------------------------------------------------------------
tls="$state/tls-$key"
have_id="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
if [ -z "$have_id" ] || [ "$(cat "$state/image-$key.id" 2>/dev/null)" != "$have_id" ] || [ ! -f "$tls/server.key" ]; then
    log "building $image ($key): debootstrap bookworm, about a minute"
    t0=$(date +%s)
    rm -rf "$tls"
    "$venv/bin/python" scripts/sam_local_relay.py certs "$tls"
    rootfs="$run/rootfs"
    # The Debian mirror (and proxy) apt is configured with: on a machine that reaches only its
    # package mirror, that is the one address debootstrap can fetch from.
    mirror="${SAM_LOCAL_DEBIAN_MIRROR:-$(python3 scripts/sam_local_mirror.py bookworm)}"
    eval "$(apt-config shell http_proxy Acquire::http::Proxy)"
    [ -n "${http_proxy:-}" ] && export http_proxy
    log "debootstrap bookworm from ${mirror:=http://deb.debian.org/debian}"
    debootstrap --variant=minbase --include=ca-certificates,curl bookworm "$rootfs" "$mirror" \
        >"$run/debootstrap.log" 2>&1 || { tail -n 20 "$run/debootstrap.log" >&2; exit 1; }
    # The test CA next to Debian's roots: the functions' TLS stack reads this bundle.
    cat "$tls/ca.pem" >>"$rootfs/etc/ssl/certs/ca-certificates.crt"
    rm -rf "$rootfs/var/cache/apt/archives"/*.deb "$rootfs/var/lib/apt/lists"/*
    docker rmi -f "$image" "public.ecr.aws/lambda/provided:al2023-rapid-$arch" >/dev/null 2>&1 || true
    tar -C "$rootfs" -c . | docker import - "$image" >/dev/null
    rm -rf "$rootfs"
    docker image inspect -f '{{.Id}}' "$image" >"$state/image-$key.id"
    log "base image built in $(($(date +%s) - t0)) s"
else
    log "base image $image ($key) kept from an earlier run"
fi

# --- the build -----------------------------------------------------------------------------------
# x86_64 through the templates' Architecture parameter: no emulation on this machine.
build_root="$root/.aws-sam/sam-local/root"
build_payments="$root/.aws-sam/sam-local/payments"
t0=$(date +%s)
sam build --template template.yaml --build-dir "$build_root" --parameter-overrides Architecture=$arch \
    >"$run/build-root.log" 2>&1 || { tail -n 30 "$run/build-root.log" >&2; exit 1; }
sam build --template examples/payments/template.yaml --build-dir "$build_payments" \
    --parameter-overrides Architecture=$arch >"$run/build-payments.log" 2>&1 ||
    { tail -n 30 "$run/build-payments.log" >&2; exit 1; }
log "sam build (both templates) in $(($(date +%s) - t0)) s"

# Amazon Linux 2023 has glibc 2.34; the local image Debian's 2.36 would hide a newer symbol.
for bin in "$build_root"/*/bootstrap "$build_payments"/*/bootstrap; do
    highest="$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
    if [ -z "$highest" ] || [ "$(printf '%s\nGLIBC_2.34\n' "$highest" | sort -V | tail -n 1)" != GLIBC_2.34 ]; then
        log "$bin needs $highest, Amazon Linux 2023 has GLIBC_2.34"; exit 1
    fi
    file "$bin" | grep -q 'x86-64' || { log "$bin is not an x86-64 binary"; exit 1; }
    log "$(basename "$(dirname "$bin")"): highest symbol $highest"
done

# --- the network, moto, the terminal, the relay --------------------------------------------------
network="gate-sam-local-$$"
docker network create --internal "$network" >/dev/null
gateway="$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$network")"
# Its bridge forwards nothing either (the containers have no route off it anyway).
net_id="$(docker network inspect -f '{{.Id}}' "$network")"
sysctl -qw "net.ipv4.conf.br-${net_id:0:12}.forwarding=0"
ip -o -4 addr show | grep -qw "inet $gateway/[0-9]*" ||
    { log "the network's gateway $gateway is not on this machine"; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
moto_port="$(free_port)"
"$venv/bin/python" scripts/moto-serial.py -H 127.0.0.1 -p "$moto_port" >"$run/moto.log" 2>&1 &
pids+=($!)
cargo build -q -p sim --bin terminal-sim --bin sim
terminal_port="$(free_port)"
# The payments API double (scripts/sam_local_check.py) listens here while payments' suite runs.
payments_port="$(free_port)"
target/debug/terminal-sim --port "$terminal_port" >"$run/terminal.log" 2>&1 &
pids+=($!)
"$venv/bin/python" scripts/sam_local_relay.py serve --cert "$tls/server.pem" --key "$tls/server.key" \
    --lose-flag "$run/lose-next" \
    --listen "$gateway:443=127.0.0.1:$moto_port" --listen "$gateway:8443=127.0.0.1:$terminal_port" \
    --listen "$gateway:8444=127.0.0.1:$payments_port" \
    >"$run/relay.log" 2>&1 &
pids+=($!)
# Ready when moto, the terminal and the relay's three listeners accept; a server that exited
# (its port taken meanwhile by another process) fails the step with its log.
ready=""
for _ in $(seq 1 300); do
    for pid in "${pids[@]}"; do
        kill -0 "$pid" 2>/dev/null && continue
        log "a server exited early: $(tail -n 5 "$run"/{moto,terminal,relay}.log)"; exit 1
    done
    python3 - "127.0.0.1:$moto_port" "127.0.0.1:$terminal_port" "$gateway:443" "$gateway:8443" \
        "$gateway:8444" <<'PY' 2>/dev/null && { ready=1; break; }
import socket, sys
for a in sys.argv[1:]:
    host, port = a.rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=1).close()
PY
    sleep 0.2
done
[ -n "$ready" ] || { log "moto, the terminal or the relay did not start in 60 s"; exit 1; }

export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=eu-west-1 AWS_DEFAULT_REGION=eu-west-1
check=("$venv/bin/python" scripts/sam_local_check.py --network "$network" --gateway "$gateway"
       --moto "http://127.0.0.1:$moto_port" --lose-flag "$run/lose-next" --work "$run" --arch "$arch"
       --payments-port "$payments_port")
t0=$(date +%s)
"${check[@]}" --template "$build_root/template.yaml" --suite root ${break_mode:+--break "$break_mode"}
log "root template checked in $(($(date +%s) - t0)) s"
t0=$(date +%s)
"${check[@]}" --template "$build_payments/template.yaml" --suite payments
log "payments' template checked in $(($(date +%s) - t0)) s"

# The test of the test: a consumer that cannot start, and one that acknowledges what it should
# have failed, must each fail the checks, with the reason.
t0=$(date +%s)
for mode in init answer; do
    if "${check[@]}" --template "$build_root/template.yaml" --suite root --break "$mode" >"$run/break-$mode.log" 2>&1; then
        cat "$run/break-$mode.log" >&2
        log "the checks passed a consumer broken on purpose ($mode)"; exit 1
    fi
    reason="$(grep -m1 '^FAIL' "$run/break-$mode.log" || true)"
    case "$mode:$reason" in
        init:*Runtime.InvalidConfiguration* | answer:*batchItemFailures*) log "broken consumer ($mode) caught: $reason" ;;
        *) cat "$run/break-$mode.log" >&2; log "broken consumer ($mode) failed for another reason"; exit 1 ;;
    esac
done
log "test of the test in $(($(date +%s) - t0)) s"
