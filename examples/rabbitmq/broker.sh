#!/usr/bin/env bash
# broker.sh: a private RabbitMQ broker in the foreground, for trying the
# example (and for the test suite): every file in --dir, the AMQP
# listener on --ip:--port only, Erlang distribution and its port mapper
# (epmd) on 127.0.0.1 ports of their own, so it never meets a system
# broker or another copy of itself. Ctrl-C or SIGTERM stops it and epmd.
#
#   examples/rabbitmq/broker.sh --ip 127.0.0.1 --port 5672 --dir /tmp/rmq \
#       --user streamer --pass "$AMQP_PASS"
#
# A facility's own broker replaces this script; see README.md for the
# settings that matter for streaming.
set -euo pipefail

ip=127.0.0.1 port=5672 dir= user=streamer pass= dist_port= epmd_port=
while [ $# -gt 0 ]; do
  case "$1" in
    --ip) ip=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --user) user=$2; shift 2 ;;
    --pass) pass=$2; shift 2 ;;
    --dist-port) dist_port=$2; shift 2 ;;
    --epmd-port) epmd_port=$2; shift 2 ;;
    *) echo "broker.sh: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
server=/usr/lib/rabbitmq/bin/rabbitmq-server
if [ ! -x "$server" ]; then
  echo "broker.sh: $server missing: install the rabbitmq-server package (scripts/setup.sh does)" >&2
  exit 1
fi
[ -n "$dir" ] || { echo "broker.sh: --dir is required (a directory for the broker's files)" >&2; exit 2; }
[ -n "$pass" ] || { echo "broker.sh: --pass is required (the password of --user)" >&2; exit 2; }
# Defaults that keep clear of a system broker: distribution and epmd one
# and two above the AMQP port unless given.
: "${dist_port:=$((port + 1))}" "${epmd_port:=$((port + 2))}"

mkdir -p "$dir/mnesia" "$dir/log" "$dir/home"
dir=$(cd "$dir" && pwd)
umask 077
cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.default = $ip:$port
default_user = $user
default_pass = $pass
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
# the example's queues are length-limited; keep the broker's own memory
# alarm well above them and the disk alarm out of the way of small /tmp's
vm_memory_high_watermark.absolute = 4GB
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = info
CONF
echo '[].' >"$dir/enabled_plugins"
: >"$dir/rabbitmq-env.conf"

export HOME="$dir/home"
export RABBITMQ_NODENAME="s2ex$port@localhost"
export RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf"
export RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf"
export RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
export RABBITMQ_MNESIA_BASE="$dir/mnesia"
export RABBITMQ_LOG_BASE="$dir/log"
export RABBITMQ_PID_FILE="$dir/rabbit.pid"
export RABBITMQ_DIST_PORT="$dist_port"
export ERL_EPMD_PORT="$epmd_port" ERL_EPMD_ADDRESS=127.0.0.1
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"

# epmd in the foreground as our child (left to itself, erl would start a
# daemon epmd that outlives the broker).
epmd -port "$epmd_port" -address 127.0.0.1 &
epmd_pid=$!
rabbit_pid=
stop() {
  trap - TERM INT EXIT
  if [ -n "$rabbit_pid" ]; then kill -TERM "$rabbit_pid" 2>/dev/null || true; wait "$rabbit_pid" 2>/dev/null || true; fi
  kill -TERM "$epmd_pid" 2>/dev/null || true
  wait "$epmd_pid" 2>/dev/null || true
}
trap 'stop; exit 0' TERM INT
trap stop EXIT
"$server" &
rabbit_pid=$!
wait "$rabbit_pid"
