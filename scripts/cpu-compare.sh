#!/usr/bin/env bash
# Runs `s2bench compare` with the given flags and reports the CPU time the
# two s2cs gateway processes used (utime+stime from /proc/PID/stat, sampled
# every 0.1 s until they exit) per GB carried through the gateways.
# The total includes stream setup and the idle time during direct runs
# (both negligible). Usage: scripts/cpu-compare.sh [compare flags...]
# Example: scripts/cpu-compare.sh --reps 3 --bytes 512MiB --wan tcp
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bin/s2bench compare "$@" >"$out" 2>&1 &
bpid=$!
pids=""
declare -A last
tck=$(getconf CLK_TCK)
while kill -0 "$bpid" 2>/dev/null; do
  if [ -z "$pids" ]; then
    pids=$(sed -n 's/^gateways: inbound s2cs pid \([0-9]*\) .*outbound s2cs pid \([0-9]*\) .*/\1 \2/p' "$out")
  fi
  for p in $pids; do
    if s=$(cat /proc/"$p"/stat 2>/dev/null); then
      set -- $(echo "${s##*) }")
      last[$p]=$(( ${12} + ${13} ))
    fi
  done
  sleep 0.1
done
wait "$bpid" || { cat "$out"; exit 1; }
cat "$out"
gw=$(awk '/^run .* gateways/ {n++} END {print n}' "$out")
bytes=$(sed -n 's/^s2bench compare: \([0-9.]*\)\([KMG]i\?B\) per run.*/\1 \2/p' "$out")
tot=0
for p in $pids; do tot=$((tot + ${last[$p]:-0})); done
awk -v tot="$tot" -v tck="$tck" -v runs="$gw" -v spec="$bytes" 'BEGIN {
  split(spec, f, " "); num = f[1]; unit = f[2]
  m["B"] = 1; m["KiB"] = 1024; m["MiB"] = 1048576; m["GiB"] = 1073741824
  m["KB"] = 1e3; m["MB"] = 1e6; m["GB"] = 1e9
  gb = runs * num * m[unit] / 1e9; cpu = tot / tck
  printf "s2cs CPU (both gateways): %.2f s for %.3f GB through the gateways = %.3f s/GB\n", cpu, gb, cpu / gb
}'
