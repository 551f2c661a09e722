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
