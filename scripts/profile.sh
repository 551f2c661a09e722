#!/usr/bin/env bash
# Profiles both gateways during a compare run, for docs/performance.md's
# "what limits each" notes: perf record -g on the two s2cs processes while
# 512 MiB of 64 KiB messages cross them (three gateway runs), then the
# kernel/user split, the top symbols, and the callers of the scheduler
# and system-call paths, into docs/perf/profiles/ENGINE-WAN.txt.
#
#   bash scripts/profile.sh [ENGINE [WAN]]     # default: splice tls
#
# Needs perf (Debian: linux-perf) and permission to profile other
# processes (root, or kernel.perf_event_paranoid <= 1). On a virtual
# machine without a PMU perf samples with cpu-clock: time spent with
# interrupts off shows up at the point they are enabled again
# (_raw_spin_unlock_irqrestore, handle_softirqs), so read the kernel part
# by its callers (-G) rather than by its top symbols.
set -eu
cd "$(dirname "$0")/.."
engine=${1:-splice}
wan=${2:-tls}
command -v perf >/dev/null || { echo "profile.sh: perf is not installed (Debian: apt-get install linux-perf)" >&2; exit 1; }
[ -x bin/s2bench ] && [ -x bin/s2cs ] || bash scripts/setup.sh
out=docs/perf/profiles
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--workload 64KiB --bytes 512MiB --reps 3 --engine "$engine" --wan "$wan" --progress off)
bin/s2bench compare "${args[@]}" > "$tmp/compare.txt" 2>&1 &
cmp=$!
pids=""
for _ in $(seq 300); do # up to 30 s for the gateways to start
  pids=$(grep -o 's2cs pid [0-9]*' "$tmp/compare.txt" 2>/dev/null | awk '{print $3}' | paste -sd, || true)
  [ "$(echo "$pids" | tr ',' '\n' | grep -c .)" -ge 2 ] && break
  sleep 0.1
done
[ -n "$pids" ] || { kill "$cmp"; echo "profile.sh: the gateways did not start:" >&2; cat "$tmp/compare.txt" >&2; exit 1; }
# Up to six seconds: the gateway runs of the first repetitions.
perf record -q -F 999 -g -p "$pids" -o "$tmp/perf.data" -- sleep 6 2>/dev/null || true # ends early if the gateways do
wait "$cmp"
rep() { # perf report's lines, without comments and blank lines
  perf report -i "$tmp/perf.data" --stdio "$@" > "$tmp/report.txt" 2>/dev/null || true
  grep -v -e '^#' -e '^$' "$tmp/report.txt" || true
}
f="$out/$engine-$wan.txt"
{
  echo "\$ s2bench compare ${args[*]}"
  grep -E '^ +1 +64KiB' "$tmp/compare.txt"
  echo
  echo "perf record -F 999 -g on both s2cs (pids $pids) for 6 s; $(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -sr); $(nproc) CPUs"
  echo
  echo "== kernel / user"
  rep --no-children --sort dso -g none | head -5
  echo
  echo "== top symbols (self)"
  rep --no-children --sort sym -g none | head -30
  echo
  echo "== inclusive: system calls, scheduler, runtime, crypto"
  rep --children --sort sym -g none | grep -E 'do_syscall_64|__x64_sys_(splice|read|write|sendmsg|recvmmsg|epoll_pwait|futex|nanosleep)$|\] schedule$|runtime\.(sysmon|findRunnable|netpoll|mallocgc|gcBgMarkWorker)$|crypto/|quic-go\.\(\*Conn\)\.run$|tcp_sendmsg$|tcp_v4_rcv$|tcp_recvmsg$|tcp_splice_read$|splice_to_socket$' | head -30
} > "$f"
echo "wrote $f"
