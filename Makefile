# mcpfleet — see README.md. Every target runs on a fresh machine of this kind (Go, PostgreSQL on 127.0.0.1:5432).
GO        ?= go
BIN       := bin
PKGS      := ./...
TEST_TAGS := chaos
# staticcheck from the Go module proxy, pinned (2026.2.2 supports Go 1.26); the first run downloads and builds it
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run cluster build test test-short test-race lint vuln bench bench-cluster chaos chaos-short chaos-cluster fuzz jaeger jaeger-run clean

## run: the whole thing on an embedded default — PostgreSQL found or started, demo tenant, demo MCP servers
run:
	$(GO) run ./cmd/mcpfleet demo

## cluster: three nodes on loopback as one cluster on a private etcd (Debian's etcd-server), with the demo modules; prints their URLs
cluster:
	$(GO) run ./cmd/mcpfleet demo --nodes 3

## build: the service and the load generator into bin/
build:
	$(GO) build -o $(BIN)/mcpfleet ./cmd/mcpfleet
	$(GO) build -o $(BIN)/mcpfleet-load ./cmd/mcpfleet-load

## test: lint, then every test, with the race detector and the in-process chaos hooks (builds Jaeger first, once)
test: lint jaeger
	$(GO) test -race -tags $(TEST_TAGS) -count=1 -timeout 40m $(PKGS)

## test-short: the quick subset (skips tests that need PostgreSQL when none is found)
test-short:
	$(GO) test -short -count=1 $(PKGS)

test-race: test

## lint: go.mod tidy, go vet, gofmt, staticcheck (with and without the chaos tag) and the check that every package has a doc comment
lint:
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod is not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	$(GO) vet -tags $(TEST_TAGS) $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) run $(STATICCHECK) -tags $(TEST_TAGS) $(PKGS)
	$(GO) test -count=1 -run '^TestPackageDocs' .

## vuln: known vulnerabilities in dependencies (needs the Go vulnerability database to be reachable)
vuln:
	$(GO) run golang.org/x/vuln/cmd/govulncheck@latest $(PKGS)

## bench: the load benchmark (100,000 modules at H = 10 s); writes bench/REPORT.md
bench: build
	./bench/run.sh

## bench-cluster: the cluster benchmark (three nodes on a private etcd, 100,000 modules, kill -9 and restart of a node,
## then a single-node baseline on the same load); its own database mcpfleet_bench_cluster; writes bench/CLUSTER.md
bench-cluster:
	./bench/cluster.sh

## chaos: the out-of-process chaos suite, full schedule (~7 min): the real binary, a private PostgreSQL,
## kill -9, PostgreSQL stopped and restarted, SIGSTOP, actor kills, dropped heartbeats; exits 1 on any violation
chaos:
	$(GO) build -tags chaos -o $(BIN)/mcpfleet-chaos-target ./cmd/mcpfleet
	$(GO) run ./cmd/mcpfleet-chaos -schedule full -binary $(BIN)/mcpfleet-chaos-target

## chaos-short: the short schedule that `make test` runs (~2 min)
chaos-short:
	$(GO) test -count=1 -run TestChaosShort -v ./chaos

## chaos-cluster: the cluster schedule (~6 min): three nodes on a private etcd (etcd-server), kill -9 of a node, SIGSTOP
## past its etcd lease, etcd stopped 30 s, a fourth node added, under load; checks that every transition was its owner's
chaos-cluster:
	$(GO) build -tags chaos -o $(BIN)/mcpfleet-chaos-target ./cmd/mcpfleet
	$(GO) run ./cmd/mcpfleet-chaos -schedule cluster -binary $(BIN)/mcpfleet-chaos-target

## fuzz: run each fuzz target for a while (the committed corpus runs in every `make test`)
fuzz:
	$(GO) test ./httpapi -run XXX -fuzz FuzzDecodeRegister -fuzztime 60s
	$(GO) test ./httpapi -run XXX -fuzz FuzzDecodeServerID -fuzztime 30s
	$(GO) test ./httpapi -run XXX -fuzz FuzzRawNUL -fuzztime 30s
	$(GO) test ./mcpclient/toolschema -run XXX -fuzz FuzzNormalize -fuzztime 60s

## jaeger: build Jaeger v2 from the separate tools/ module (minutes the first time, cached afterwards)
JAEGER := .data/bin/jaeger
jaeger: $(JAEGER)
$(JAEGER): tools/go.mod tools/go.sum
	cd tools && $(GO) build -o ../$(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger

## jaeger-run: run it on loopback (OTLP/HTTP 127.0.0.1:4318, query API 127.0.0.1:16686); see docs/telemetry.md
jaeger-run: $(JAEGER)
	$(JAEGER) --config tools/jaeger.yaml

clean:
	rm -rf $(BIN)
