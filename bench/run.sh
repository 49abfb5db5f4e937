#!/usr/bin/env bash
# make bench: start mcpfleet as its own process on a fresh database and drive it with mcpfleet-load.
# Knobs (environment): BENCH_N (modules, default 100000), BENCH_H (heartbeat interval, 10s),
# BENCH_DURATION (steady phase, 60s), BENCH_PORT (18181), BENCH_PG (superuser base URL of a PostgreSQL
# server, default postgres://postgres@127.0.0.1:5432), BENCH_REPORT (bench/REPORT.md), BENCH_EXTRA (more
# mcpfleet-load flags), and any MCPFLEET_* / OTEL_* variable for the service.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${BENCH_N:-100000}
H=${BENCH_H:-10s}
DURATION=${BENCH_DURATION:-60s}
PORT=${BENCH_PORT:-18181}
PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
REPORT=${BENCH_REPORT:-bench/REPORT.md}
DB=mcpfleet_bench
mkdir -p .data
ulimit -n 65536 2>/dev/null || true

psql "$PG/postgres" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
export MCPFLEET_ADMIN_DATABASE_URL="$PG/$DB"
bin/mcpfleet migrate >/dev/null
field() { sed -E "s/.*\"$1\":\"([^\"]+)\".*/\1/"; }
TENANT=$(bin/mcpfleet tenant create --name bench | field tenant_id)
MODULE_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role module | field api_key)
READ_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role operator | field api_key)

APP_URL="postgres://cyberos_app@${PG#postgres://*@}/$DB"
MCPFLEET_DATABASE_URL="$APP_URL" MCPFLEET_HTTP_ADDR="127.0.0.1:$PORT" MCPFLEET_HEARTBEAT_INTERVAL="$H" MCPFLEET_MONITOR_INTERVAL="${MCPFLEET_MONITOR_INTERVAL:-$(awk -v h="$H" 'BEGIN{print (h=="10s")?"5s":"500ms"}')}" \
	MCPFLEET_DB_MAX_CONNS="${MCPFLEET_DB_MAX_CONNS:-16}" MCPFLEET_LOG_LEVEL="${MCPFLEET_LOG_LEVEL:-warn}" \
	bin/mcpfleet serve 2>.data/bench-serve.log &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
	kill -0 $PID 2>/dev/null || { echo "bench: the service exited; see .data/bench-serve.log" >&2; cat .data/bench-serve.log >&2; exit 1; }
	sleep 0.1
done
echo "bench: service pid $PID on :$PORT, $N modules, H=$H, steady $DURATION" >&2
# shellcheck disable=SC2086
bin/mcpfleet-load --base-url "http://127.0.0.1:$PORT" --api-key "$MODULE_KEY" --read-key "$READ_KEY" \
	--n "$N" --interval "$H" --duration "$DURATION" --service-pid "$PID" --report "$REPORT" ${BENCH_EXTRA:-}
echo "bench: report written to $REPORT" >&2
