#!/usr/bin/env bash
# The distributed example in one go: a NATS server with JetStream on a free port of its own,
# two workers (the powers and leads on one, the executors on the other), a run placed on them;
# then everything is stopped. Usage, from the repository root: bash examples/distributed/demo.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

cargo build -q -p agent-cli
strata=target/debug/strata
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="nats://127.0.0.1:$port"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The server.
nats-server -a 127.0.0.1 -p "$port" -js -sd "$work/nats" >"$work/nats.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

# 2. Two workers.
"$strata" worker --nats "$url" --id leads --layer top,mid --data "$work/runs" >"$work/leads.log" 2>&1 &
pids+=($!)
"$strata" worker --nats "$url" --id executors --layer bottom --data "$work/runs" >"$work/executors.log" 2>&1 &
pids+=($!)
sleep 1.5

# 3. The run, placed on them.
"$strata" run examples/hello/plan.toml --team examples/hello/team.toml --nats "$url" \
  --data "$work/runs" --heartbeat 250ms
status=$?
sleep 1
echo
echo "--- worker leads:";     cat "$work/leads.log"
echo "--- worker executors:"; cat "$work/executors.log"
exit "$status"
