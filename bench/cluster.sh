#!/usr/bin/env bash
# make bench-cluster: mcpfleet as a cluster of three nodes on a private etcd, on a fresh database of its own
# (mcpfleet_bench_cluster, never bench/run.sh's), driven by bench/clusterbench: registration through every
# node, heartbeats at a random node, kill -9 of a node under load and its restart, then one single node on
# the same database with the same load (the baseline). Writes bench/CLUSTER.md.
# Knobs (environment): BENCH_N (modules, default 100000), BENCH_H (heartbeat interval, 10s), BENCH_DURATION
# (steady phase, and the baseline's, 60s), BENCH_PG (superuser base URL of a PostgreSQL server, default
# postgres://postgres@127.0.0.1:5432), BENCH_CLUSTER_REPORT (bench/CLUSTER.md), BENCH_CLUSTER_EXTRA (more
# clusterbench flags, e.g. -kill=false -baseline=false -workers 512), and any MCPFLEET_* variable for the nodes.
# Ports: etcd and the nodes take free loopback ports of the kernel's ephemeral range (never `make cluster`'s
# 8080–8082, 7101–7103, 23790, nor bench/run.sh's 18181 and 9464: the nodes' metrics listener is off).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${BENCH_N:-100000}
H=${BENCH_H:-10s}
DURATION=${BENCH_DURATION:-60s}
PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
REPORT=${BENCH_CLUSTER_REPORT:-bench/CLUSTER.md}
DB=mcpfleet_bench_cluster
mkdir -p .data bin
# Every heartbeat connection is a descriptor in the load generator and in a node: take what the machine allows.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
field() { sed -E "s/.*\"$1\":\"([^\"]+)\".*/\1/"; }

go build -o bin/mcpfleet ./cmd/mcpfleet
go build -o bin/mcpfleet-clusterbench ./bench/clusterbench

psql "$PG/postgres" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
export MCPFLEET_ADMIN_DATABASE_URL="$PG/$DB"
bin/mcpfleet migrate >/dev/null
TENANT=$(bin/mcpfleet tenant create --name bench-cluster | field tenant_id)
MODULE_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role module | field api_key)
READ_KEY=$(bin/mcpfleet apikey create --tenant "$TENANT" --role operator | field api_key)
APP_URL="postgres://cyberos_app@${PG#postgres://*@}/$DB"
unset MCPFLEET_ADMIN_DATABASE_URL

# The nodes read these from the environment (clusterbench passes it on); H = 10 s → monitor every 5 s.
export MCPFLEET_MONITOR_INTERVAL="${MCPFLEET_MONITOR_INTERVAL:-$(awk -v h="$H" 'BEGIN{print (h=="10s")?"5s":"500ms"}')}"
echo "bench-cluster: $N modules, H=$H, steady $DURATION, database $DB" >&2
# shellcheck disable=SC2086
bin/mcpfleet-clusterbench -binary bin/mcpfleet -database-url "$APP_URL" -pg-url "$PG/$DB" \
	-module-key "$MODULE_KEY" -read-key "$READ_KEY" -n "$N" -interval "$H" -duration "$DURATION" \
	-out "$REPORT" -dir .data/clusterbench ${BENCH_CLUSTER_EXTRA:-}
echo "bench-cluster: report written to $REPORT" >&2
