#!/usr/bin/env bash
# make bench: start mcpfleet as its own process on a fresh database and drive it with mcpfleet-load, then
# measure the MCP endpoint (/mcp) with bench/mcpbench against another fresh service; its section of the
# report (between the mcp-bench markers) is replaced, the rest is mcpfleet-load's.
# BENCH_MODE: all (default), load (mcpfleet-load only) or mcp (the /mcp step only). The /mcp step's knobs:
# BENCH_MCP_SERVERS (200), BENCH_MCP_TOOLS (20), BENCH_MCP_SESSIONS (1000), BENCH_MCP_EXTRA (more flags).
# Knobs (environment): BENCH_N (modules, default 100000), BENCH_H (heartbeat interval, 10s),
# BENCH_DURATION (steady phase, 60s), BENCH_RAMP (registrations and deregistrations per second; default 0: the
# whole fleet at once, as fast as the load generator's connections allow — a fleet re-registering after an outage), BENCH_PORT (18181; the service's profiler listens on the next port, for the
# live heap per server), BENCH_PG (superuser base URL of a PostgreSQL
# server, default postgres://postgres@127.0.0.1:5432), BENCH_REPORT (bench/REPORT.md), BENCH_REFERENCE (1: after
# mcpfleet, drive the naive reference server with the same load on its own fresh database and report both; 0
# skips it), BENCH_MAX_RUNTIME (the whole load run's limit, 60m), BENCH_EXTRA (more mcpfleet-load flags), and any MCPFLEET_* / OTEL_* variable for the service.
# Before the load run, the cold-start step registers BENCH_COLD_N modules (default 250000, the target's fleet,
# whatever BENCH_N is; 0 skips the step) on a database of its own at H = 10 min (no heartbeats) and restarts the
# service BENCH_COLD_RUNS times (3); the load run's report judges the cold-start target by it.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${BENCH_N:-100000}
H=${BENCH_H:-10s}
DURATION=${BENCH_DURATION:-60s}
PORT=${BENCH_PORT:-18181}
PPROF_PORT=$((PORT + 1))
PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
REPORT=${BENCH_REPORT:-bench/REPORT.md}
REFERENCE=${BENCH_REFERENCE:-1}
DB=mcpfleet_bench
REF_DB=mcpfleet_bench_ref
mkdir -p .data
ulimit -n 65536 2>/dev/null || true

MODE=${BENCH_MODE:-all}
field() { sed -E "s/.*\"$1\":\"([^\"]+)\".*/\1/"; }

# fresh_db NAME: a new database NAME, migrated; sets TENANT and the APP_URL to serve it with.
fresh_db() {
	psql "$PG/postgres" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1" >/dev/null
	export MCPFLEET_ADMIN_DATABASE_URL="$PG/$1"
	bin/mcpfleet migrate >/dev/null
	TENANT=$(bin/mcpfleet tenant create --name bench | field tenant_id)
	APP_URL="postgres://cyberos_app@${PG#postgres://*@}/$1"
}

# wait_ready: wait for the service at $PORT (pid $PID) to be ready.
wait_ready() {
	for _ in $(seq 1 100); do
		curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && return 0
		kill -0 $PID 2>/dev/null || { echo "bench: the service exited; see $1" >&2; cat "$1" >&2; exit 1; }
		sleep 0.1
	done
}

PID=
trap 'if [ -n "$PID" ]; then kill -TERM $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; fi' EXIT

if [ "$MODE" = all ] || [ "$MODE" = load ]; then
	COLD_N=${BENCH_COLD_N:-250000}
	COLD_FILE=.data/bench-cold-start.json
	COLD_FLAGS=()
	rm -f "$COLD_FILE"
	if [ "$COLD_N" != 0 ]; then
		fresh_db ${DB}_cold
		MODULE_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role module | field api_key)
		COLD_ENV=(MCPFLEET_DATABASE_URL="$APP_URL" MCPFLEET_HTTP_ADDR="127.0.0.1:$PORT" MCPFLEET_HEARTBEAT_INTERVAL=10m
			MCPFLEET_DB_MAX_CONNS="${MCPFLEET_DB_MAX_CONNS:-16}" MCPFLEET_LOG_LEVEL="${MCPFLEET_LOG_LEVEL:-warn}")
		env "${COLD_ENV[@]}" bin/mcpfleet serve 2>.data/bench-cold-serve.log &
		PID=$!
		wait_ready .data/bench-cold-serve.log
		echo "bench: cold-start step: $COLD_N modules on their own database, then ${BENCH_COLD_RUNS:-3} restarts" >&2
		# The step stops this service (its first restart) and the one it started last.
		if ! env "${COLD_ENV[@]}" bin/mcpfleet-load --base-url "http://127.0.0.1:$PORT" --api-key "$MODULE_KEY" --n "$COLD_N" \
			--interval 10m --ramp 0 --service-pid "$PID" --service-command bin/mcpfleet --service-log .data/bench-cold-serve-restart \
			--cold-start-runs "${BENCH_COLD_RUNS:-3}" --max-runtime 20m --json >"$COLD_FILE"; then
			echo "bench: the cold-start step failed; the report says what it measured" >&2
		fi
		kill -TERM $PID 2>/dev/null || true
		wait $PID 2>/dev/null || true
		PID=
		# Dropped, and a checkpoint taken, so that the step's writes are not flushed during the load run's ceiling.
		psql "$PG/postgres" -v ON_ERROR_STOP=1 -qc "DROP DATABASE ${DB}_cold WITH (FORCE)" -c "CHECKPOINT" >/dev/null
		if [ -s "$COLD_FILE" ]; then
			COLD_FLAGS=(--cold-start-file "$COLD_FILE")
		fi
	fi
	fresh_db $DB
	REF_FLAGS=(--pg-url "$PG/postgres" --service-database "$DB")
	if [ "$REFERENCE" != 0 ]; then
		# The reference server creates its own table in an empty database.
		psql "$PG/postgres" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS $REF_DB WITH (FORCE)" -c "CREATE DATABASE $REF_DB" >/dev/null
		REF_FLAGS+=(--reference-database-url "$PG/$REF_DB")
	fi
	MODULE_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role module | field api_key)
	READ_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role operator | field api_key)
	# The service's environment: mcpfleet-load restarts the service with it (plus the tracing variables of
	# each restart phase), so it is handed to both.
	SERVE_ENV=(MCPFLEET_DATABASE_URL="$APP_URL" MCPFLEET_HTTP_ADDR="127.0.0.1:$PORT" MCPFLEET_HEARTBEAT_INTERVAL="$H"
		MCPFLEET_MONITOR_INTERVAL="${MCPFLEET_MONITOR_INTERVAL:-$(awk -v h="$H" 'BEGIN{print (h=="10s")?"5s":"500ms"}')}"
		MCPFLEET_DB_MAX_CONNS="${MCPFLEET_DB_MAX_CONNS:-16}" MCPFLEET_LOG_LEVEL="${MCPFLEET_LOG_LEVEL:-warn}"
		MCPFLEET_PPROF_ADDR="127.0.0.1:$PPROF_PORT")
	env "${SERVE_ENV[@]}" bin/mcpfleet serve 2>.data/bench-serve.log &
	PID=$!
	wait_ready .data/bench-serve.log
	echo "bench: service pid $PID on :$PORT, $N modules, H=$H, steady $DURATION" >&2
	# shellcheck disable=SC2086
	env "${SERVE_ENV[@]}" bin/mcpfleet-load --base-url "http://127.0.0.1:$PORT" --api-key "$MODULE_KEY" --read-key "$READ_KEY" \
		--n "$N" --interval "$H" --duration "$DURATION" --ramp "${BENCH_RAMP:-0}" --service-pid "$PID" --report "$REPORT" "${REF_FLAGS[@]}" \
		--service-command bin/mcpfleet --service-log .data/bench-serve-restart --service-pprof "http://127.0.0.1:$PPROF_PORT" \
		--service-cpuprofile .data/bench-service-cpu.pprof --max-runtime "${BENCH_MAX_RUNTIME:-60m}" "${COLD_FLAGS[@]}" ${BENCH_EXTRA:-}
	echo "bench: report written to $REPORT" >&2
	kill -TERM $PID 2>/dev/null || true
	wait $PID 2>/dev/null || true
	PID=
fi

if [ "$MODE" = all ] || [ "$MODE" = mcp ]; then
	go build -o bin/mcpfleet-mcpbench ./bench/mcpbench
	fresh_db ${DB}_mcp
	ADMIN_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role admin | field api_key)
	SECOND_ADMIN_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role admin | field api_key)
	OPERATOR_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role operator | field api_key)
	MODULE_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role module | field api_key)
	SESSIONS=${BENCH_MCP_SESSIONS:-1000}
	# One key holds every session of the fan-out, so the per-key limits are raised for the bench. mcpbench
	# sends no heartbeats: H is 10 min here, so its servers stay healthy however long a loaded machine takes.
	MCPFLEET_HEARTBEAT_INTERVAL="${BENCH_MCP_H:-10m}" MCPFLEET_DATABASE_URL="$APP_URL" MCPFLEET_HTTP_ADDR="127.0.0.1:$PORT" MCPFLEET_LOG_LEVEL="${MCPFLEET_LOG_LEVEL:-warn}" \
		MCPFLEET_ENDPOINT_ALLOWLIST=127.0.0.1 MCPFLEET_SECRET_KEY="${MCPFLEET_SECRET_KEY:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}" \
		MCPFLEET_MCP_SESSIONS_PER_KEY=$((SESSIONS + 10)) MCPFLEET_MCP_STREAMS_PER_KEY=$((2 * SESSIONS + 64)) \
		MCPFLEET_DB_MAX_CONNS="${MCPFLEET_DB_MAX_CONNS:-16}" bin/mcpfleet serve 2>.data/bench-mcp-serve.log &
	PID=$!
	wait_ready .data/bench-mcp-serve.log
	echo "bench: /mcp step against service pid $PID on :$PORT" >&2
	SECTION=.data/bench-mcp-section.md
	# shellcheck disable=SC2086
	bin/mcpfleet-mcpbench -base-url "http://127.0.0.1:$PORT" -admin-key "$ADMIN_KEY" -second-admin-key "$SECOND_ADMIN_KEY" -operator-key "$OPERATOR_KEY" \
		-module-key "$MODULE_KEY" -servers "${BENCH_MCP_SERVERS:-200}" -tools "${BENCH_MCP_TOOLS:-20}" -sessions "$SESSIONS" \
		-service-pid "$PID" -out "$SECTION" ${BENCH_MCP_EXTRA:-}
	# Replace the report's /mcp section (or append it).
	touch "$REPORT"
	awk -v section="$SECTION" '
		/^<!-- mcp-bench:start -->$/ { skip = 1; next }
		/^<!-- mcp-bench:end -->$/ { skip = 0; next }
		!skip { print }' "$REPORT" >"$REPORT.tmp"
	{ cat "$REPORT.tmp"; echo; echo "<!-- mcp-bench:start -->"; cat "$SECTION"; echo "<!-- mcp-bench:end -->"; } >"$REPORT"
	rm -f "$REPORT.tmp"
	echo "bench: /mcp section written to $REPORT" >&2
fi
