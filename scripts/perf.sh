#!/usr/bin/env bash
# Regenerates the measurements of docs/performance.md: every command the
# document quotes, run in order, each one's terminal output, JSON records
# and plots written under docs/perf/<name>/. Takes about two minutes.
# Run it on a quiet machine, then update the tables in the document.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/s2bench ] && [ -x bin/s2cs ] || bash scripts/setup.sh
out=docs/perf
mkdir -p "$out"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "kernel: $(uname -sr)"
  echo "cpu: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "go: $(go version 2>/dev/null || echo unknown)"
} > "$out/machine.txt"

run() { # name, then s2bench compare flags
  local name=$1; shift
  mkdir -p "$out/$name"
  echo "== s2bench compare $* --json $out/$name/records.json --plots $out/$name"
  echo "\$ s2bench compare $*" > "$out/$name/output.txt"
  bin/s2bench compare "$@" --progress off --json "$out/$name/records.json" --plots "$out/$name" | tee -a "$out/$name/output.txt"
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/$name/output.txt"
}

run sweep   --workload sweep
run dstream --workload dstream
run lstream --workload lstream
run rtt     --workload 512B,16KiB,1MiB --mode rr
run pairs   --workload dstream --pairs 1,4,16 --bytes 512MiB --reps 2
