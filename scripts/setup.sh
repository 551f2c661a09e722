#!/usr/bin/env bash
# Installs everything the build, the demo and the tests need, idempotently,
# then builds the binaries into bin/. Safe to run on every CI start.
set -euo pipefail
cd "$(dirname "$0")/.."

# --demo (make demo): only what the demo and the README's quickstart
# need, then the binaries: Go (and the modules its build fetches),
# netcat and jq for the quickstart's applications and UID; nothing only
# the tests need (browsers, containers, brokers, etcd, staticcheck). The
# demo itself (s2bench compare) runs its gateways and applications.
if [ "${1:-}" = "--demo" ]; then
  demo_apt=()
  command -v go >/dev/null 2>&1 || demo_apt+=(golang-go)
  command -v nc >/dev/null 2>&1 || demo_apt+=(netcat-openbsd)
  command -v jq >/dev/null 2>&1 || demo_apt+=(jq)
  if [ ${#demo_apt[@]} -gt 0 ]; then
    echo "setup: installing ${demo_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${demo_apt[@]}" >/dev/null
  fi
  # Go 1.21 or later fetches the toolchain go.mod names by itself (from
  # the module proxy); an older one (Debian 12's golang-go is 1.19)
  # cannot build this module.
  gov=$(go env GOVERSION 2>/dev/null || go version | awk '{print $3}')
  minor=$(echo "$gov" | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
  if [ -n "$minor" ] && [ "$minor" -lt 21 ]; then
    echo "setup: $gov is too old to build SciStream: install Go 1.21 or later (it fetches the $(sed -n 's/^go //p' go.mod) toolchain itself), e.g. apt-get install -t bookworm-backports golang-go on Debian 12" >&2
    exit 1
  fi
  mkdir -p bin
  go build -buildvcs=auto -o bin/ ./cmd/...
  echo "setup: built $(ls bin | tr '\n' ' ')"
  exit 0
fi

need_apt=()
command -v nc >/dev/null 2>&1 || need_apt+=(netcat-openbsd)
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
# ip and tc build the namespace testbed (s2bench testbed, internal/netbed).
{ command -v ip && command -v tc; } >/dev/null 2>&1 || need_apt+=(iproute2)
# iptables breaks a WAN leg, in a network namespace of the test's own,
# the way a firewall that lost its state does (e2e/resume_test.go).
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
# The deployment tests (deploy/): systemd-analyze and systemd-sysusers
# check the units (offline: no running systemd needed); podman builds
# the image (scripts/image.sh, with the CA bundle in it) and runs it,
# with runc, as crun refuses the hybrid cgroup hierarchy of some CI
# containers.
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)
# The application tests (e2e/apps_*_test.go, examples/): iperf3 and a
# RabbitMQ broker the tests start themselves on loopback ports they choose.
command -v iperf3 >/dev/null 2>&1 || need_apt+=(iperf3)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need_apt+=(rabbitmq-server)
# The SNI router in front of a shared WAN port (e2e/sni_test.go): HAProxy
# in TCP mode, started by the test on loopback with its own config.
command -v haproxy >/dev/null 2>&1 || need_apt+=(haproxy)
# What operators look through (e2e/observe_test.go, internal/gateway's
# metrics tests): promtool checks the /metrics exposition (Debian ships it
# in the prometheus package; policy-rc.d below keeps its server from
# starting), a headless Chromium loads the status page, and tmux runs
# s2uc watch in a real terminal.
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
# The README's quickstart (e2e/readme_test.go runs it) reads the stream's
# UID with jq.
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
# The etcd state store (internal/store, internal/etcdtest, e2e/etcd_test.go):
# Debian's etcd server, started by the tests on loopback ports they pick.
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
if ! command -v python3 >/dev/null 2>&1; then
  need_apt+=(python3 python3-pip python3-venv)
else
  python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
  # The Python package's venv (below): Debian splits ensurepip off.
  python3 -c 'import ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Package scripts must not start system services: a system
  # rabbitmq-server (and its epmd) would hold 5672/4369 on every address,
  # a system etcd 2379/2380.
  # The tests start their own broker. policy-rc.d exit 101 = "do not start";
  # a file that is already there (containers ship one) is left alone.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# Python packages of the example applications, into the python3 on PATH.
need_pip=()
python3 -c 'import zmq' 2>/dev/null || need_pip+=(pyzmq)
python3 -c 'import numpy' 2>/dev/null || need_pip+=(numpy)
python3 -c 'import pika' 2>/dev/null || need_pip+=(pika)
python3 -c 'import PIL' 2>/dev/null || need_pip+=(Pillow)
# The SciStream 1.2 client of e2e/legacy12_test.go: gRPC stubs generated
# at test time from internal/legacy12/scistream.proto.
python3 -c 'import grpc, grpc_tools' 2>/dev/null || need_pip+=(grpcio-tools)
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "setup: installing python packages ${need_pip[*]}"
  # Debian's own python3 marks itself externally managed; a pyenv one does not.
  python3 -m pip install --quiet "${need_pip[@]}" 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages "${need_pip[@]}"
fi

# The scistream Python package (python/) and its tests, in a venv of the
# repository's own (.venv, ignored by git): an editable install with its
# test extras (pytest, nbclient, ipykernel). It sees the system's packages,
# so the examples' pyzmq and numpy above serve the example tests too.
# Reinstalled only when something is missing or the venv points elsewhere.
venv_ok() {
  [ -x .venv/bin/python ] && .venv/bin/python - "$PWD/python/src" <<'PY' >/dev/null 2>&1
import sys, os
import httpx, yaml, pytest, nbclient, nbformat, ipykernel, tqdm, mypy, scistream
assert os.path.realpath(os.path.dirname(os.path.dirname(scistream.__file__))) == os.path.realpath(sys.argv[1])
PY
}
if ! venv_ok; then
  echo "setup: installing the scistream Python package and its tests' packages into .venv"
  [ -x .venv/bin/python ] || python3 -m venv --system-site-packages .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e './python[test]'
  venv_ok || { echo "setup: .venv does not import the scistream package and its test packages" >&2; exit 1; }
fi

# QUIC WAN legs (--wan quic) want 7 MiB UDP socket buffers (quic-go's
# recommendation). s2cs never changes system settings: it asks for the
# buffers per socket and logs how to raise the limit if it is too low. On
# the test machine we raise the limits here, once.
want_buf=7500000
for key in net.core.rmem_max net.core.wmem_max; do
  cur=$(sysctl -n "$key" 2>/dev/null || echo 0)
  if [ "$cur" -lt "$want_buf" ]; then
    if [ "$(id -u)" = 0 ] && sysctl -qw "$key=$want_buf" 2>/dev/null; then
      echo "setup: raised $key from $cur to $want_buf for QUIC"
    else
      echo "setup: $key is $cur (< $want_buf); QUIC legs run with smaller UDP buffers (raise it as root: sysctl -w $key=$want_buf)"
    fi
  fi
done

# podman-compose runs deploy/compose (deploy/compose_test.go): 1.0.6 from
# PyPI, into the python3 on PATH, as Debian 12's 1.0.3 adds a network to
# each service that podman refuses beside network_mode: host.
if ! python3 -c 'import podman_compose as p, sys; sys.exit(p.__version__ != "1.0.6")' 2>/dev/null; then
  echo "setup: installing podman-compose 1.0.6"
  python3 -m pip install --quiet podman-compose==1.0.6 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages podman-compose==1.0.6
fi

go mod download
(cd deploy/helmtest && go mod download)   # the Helm chart's tests, a module of their own
# staticcheck, pinned, into GOPATH/bin.
SC_VERSION=v0.8.2
GOBIN="$(go env GOPATH)/bin"
if ! "$GOBIN/staticcheck" -version 2>/dev/null | grep -q "(${SC_VERSION#v})"; then
  echo "setup: installing staticcheck $SC_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$SC_VERSION"
fi

mkdir -p bin
go build -buildvcs=auto -o bin/ ./cmd/...   # auto: stamp the commit for --version when built from a git checkout
echo "setup: built $(ls bin | tr '\n' ' ')"
