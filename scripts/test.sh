#!/usr/bin/env bash
# The project's test command (README, .ci/run): static checks, then every
# test with the race detector, then a short run of each fuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== go vet"
go vet ./...
echo "== staticcheck"
"$(go env GOPATH)/bin/staticcheck" ./...
echo "== go test -race"
go test -race -count=1 -timeout 20m ./...
echo "== fuzz (10s each)"
for spec in $(grep -rlE '^func Fuzz' --include='*_test.go' . | sort); do
  pkg="./$(dirname "${spec#./}")"
  for f in $(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)' "$spec" | awk '{print $2}'); do
    go test -run='^$' -fuzz="^${f}\$" -fuzztime=10s "$pkg"
  done
done
echo "== benchmarks (one iteration each, so they keep working)"
go test -run='^$' -bench=. -benchtime=1x ./internal/...
