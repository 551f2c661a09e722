#!/usr/bin/env bash
# The project's test command (README, .ci/run): static checks, then every
# test with the race detector, then a short run of each fuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
# --loaded: run the suite the way a shared CI runner does, with CPU-bound
# busy loops beside it (SCISTREAM_LOAD of them, 4 by default, on these
# two cores), each bounded by a timeout and stopped by its PID at the
# end. Every test must pass there too: a timing that cannot hold when the
# CPU is starved is a benchmark figure, not an assertion.
if [ "${1:-}" = "--loaded" ]; then
  shift
  busy=()
  stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; wait "${busy[@]}" 2>/dev/null || true; }
  trap stop_busy EXIT
  for _ in $(seq "${SCISTREAM_LOAD:-4}"); do
    timeout 7200 sh -c 'while :; do :; done' &
    busy+=($!)
  done
  echo "== loaded: ${#busy[@]} busy loops beside the suite (PIDs ${busy[*]})"
fi
bash scripts/setup.sh
echo "== go vet"
go vet ./...
echo "== staticcheck"
"$(go env GOPATH)/bin/staticcheck" ./...
echo "== go test -race"
go test -race -count=1 -timeout 20m ./...
echo "== deploy/helmtest: the Helm chart's tests, a module of its own"
# Its own go.mod keeps the Helm and Kubernetes libraries out of the
# scistream module. Without -race: the test starts no goroutines, and an
# instrumented build would compile those libraries a second time (about
# two minutes on two cores) for nothing.
(cd deploy/helmtest && go vet ./... && "$(go env GOPATH)/bin/staticcheck" ./... && go test -count=1 -timeout 10m ./...)
echo "== fuzz (10s each)"
# fuzz PKG TARGET: a failure that wrote a failing input to
# PKG/testdata/fuzz/TARGET fails the run. One that wrote none is Go 1.26's
# fuzz coordinator racing its own -fuzztime deadline ("context deadline
# exceeded", golang/go#75804, fixed in Go 1.27) on a loaded machine: said,
# and the target is run once more.
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
fuzz() {
  local pkg=$1 f=$2 dir="$1/testdata/fuzz/$2" before after
  for attempt in 1 2; do
    before=$(inputs "$dir")
    if go test -run='^$' -fuzz="^${f}\$" -fuzztime=10s "$pkg"; then
      return 0
    fi
    after=$(inputs "$dir")
    if [ "$after" -gt "$before" ]; then
      echo "fuzz: $f found a failing input (in $dir)" >&2
      return 1
    fi
    echo "fuzz: $f failed without a failing input (golang/go#75804, the coordinator's deadline race); attempt $attempt of 2" >&2
  done
  return 1
}
for spec in $(grep -rlE '^func Fuzz' --include='*_test.go' . | sort); do
  pkg="./$(dirname "${spec#./}")"
  for f in $(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)' "$spec" | awk '{print $2}'); do
    fuzz "$pkg" "$f"
  done
done
echo "== benchmarks (one iteration each, so they keep working)"
go test -run='^$' -bench=. -benchtime=1x ./internal/...
echo "== python: the scistream package against real gateways (pytest)"
# scripts/setup.sh installed it into .venv; the suite builds the binaries
# and starts its own gateways on loopback.
(cd python && ../.venv/bin/python -m pytest -q -p no:cacheprovider)
