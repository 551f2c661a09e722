#!/usr/bin/env bash
# Installs everything the build, the demo and the tests need, idempotently,
# then builds the binaries into bin/. Safe to run on every CI start.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v nc >/dev/null 2>&1 || need_apt+=(netcat-openbsd)
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
# ip and tc build the namespace testbed (s2bench testbed, internal/netbed).
{ command -v ip && command -v tc; } >/dev/null 2>&1 || need_apt+=(iproute2)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

go mod download
# staticcheck, pinned, into GOPATH/bin.
SC_VERSION=v0.8.2
GOBIN="$(go env GOPATH)/bin"
if ! "$GOBIN/staticcheck" -version 2>/dev/null | grep -q "(${SC_VERSION#v})"; then
  echo "setup: installing staticcheck $SC_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$SC_VERSION"
fi

mkdir -p bin
go build -o bin/ ./cmd/...
echo "setup: built $(ls bin | tr '\n' ' ')"
