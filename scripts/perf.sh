#!/usr/bin/env bash
# Regenerates the measurements of docs/performance.md: every command the
# document quotes, run in order, each one's terminal output, JSON records
# and plots written under docs/perf/<name>/. Takes about five minutes, plus
# about twelve for the emulated-WAN runs at the end (root only).
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

# Issue 4's engine table: each engine and WAN transport at 64 KiB, then
# request-reply at 16 KiB, then 512 B messages written one per write call
# (an application sending message by message), fast and at a low rate.
# --baseline adds the naive proxy pair (io.Copy over the same WAN
# transport) to the rotation: the simplest alternative, measured against
# the same direct runs.
run eng-splice-tcp  --workload 64KiB --reps 5 --engine splice  --wan tcp  --baseline
run eng-buffer-tcp  --workload 64KiB --reps 5 --engine buffer  --wan tcp
run eng-sockmap-tcp --workload 64KiB --reps 5 --engine sockmap --wan tcp
run eng-splice-tls  --workload 64KiB --reps 5 --engine splice  --wan tls  --baseline
run eng-splice-quic --workload 64KiB --reps 5 --engine splice  --wan quic --baseline
run rr-splice-tcp   --workload 16KiB --mode rr --reps 5 --engine splice  --wan tcp --baseline
run rr-sockmap-tcp  --workload 16KiB --mode rr --reps 5 --engine sockmap --wan tcp
run rr-splice-tls   --workload 16KiB --mode rr --reps 5 --engine splice  --wan tls --baseline
# Issue 17: request-reply with the whole message echoed (as an
# independent harness measured it), the gateways against the naive pair
# in the same rotation, at the three sizes of the latency targets.
run echo-splice-tcp --workload 512B,16KiB,1MiB --mode echo --messages 2000 --reps 3 --engine splice --wan tcp --baseline
run echo-splice-tls --workload 512B,16KiB,1MiB --mode echo --messages 2000 --reps 3 --engine splice --wan tls --baseline
run small-each-tcp  --workload 512B --bytes 64MiB --writes each --reps 5 --wan tcp --baseline
run small-each-tls  --workload 512B --bytes 64MiB --writes each --reps 5 --wan tls
run small-slow-tcp  --workload 512B --mode rr --rate 1000msg/s --messages 2000 --reps 3 --wan tcp --baseline

# Issue 18: what a flood of strangers costs. A stream's verified goodput
# alone, then while 20,000 stranger TCP connections hit the inbound
# gateway's WAN listener, and that gateway's memory through and after it.
for w in tls tcp; do
  mkdir -p "$out/flood-$w"
  echo "== s2bench flood --wan $w"
  echo "\$ s2bench flood --wan $w" > "$out/flood-$w/output.txt"
  bin/s2bench flood --wan "$w" | tee -a "$out/flood-$w/output.txt"
done

# Issue 16: a facility of several nodes on a real etcd: one stream's
# goodput over 1, 2, 3 nodes per side, takeover after a SIGKILL, control
# latency on bbolt, etcd and a facility node (about a minute).
mkdir -p "$out/facility"
echo "== s2bench facility"
echo "\$ s2bench facility" > "$out/facility/output.txt"
bin/s2bench facility --json "$out/facility/records.json" | tee -a "$out/facility/output.txt"
echo "\$ s2bench facility --experiments control --num_conn 1" > "$out/facility/control-numconn1.txt"
bin/s2bench facility --experiments control --num_conn 1 --json "$out/facility/control-numconn1.json" | tee -a "$out/facility/control-numconn1.txt"

# Issue 6's emulated WAN (root: network namespaces, a TUN delay line, tc
# tbf at 200 Mbit/s): the sweep directly and through the gateways on the
# LAN, short WAN and long WAN presets of seed 000 (about 12 minutes).
trun() { # preset
  local name=testbed-$1
  mkdir -p "$out/$name"
  echo "== s2bench testbed run --preset $1 --reps 3"
  echo "\$ s2bench testbed run --preset $1 --reps 3" > "$out/$name/output.txt"
  bin/s2bench testbed run --name "pf$$" --preset "$1" --reps 3 --progress off --json "$out/$name/records.json" --plots "$out/$name" | tee -a "$out/$name/output.txt"
}
if [ "$(id -u)" = 0 ]; then
  trun lan
  trun shortwan
  trun longwan
else
  echo "== skipping the testbed runs: they need root (network namespaces)"
fi
