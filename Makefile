# sqlc is pinned in tools/go.mod and run through `go tool`, so its
# requirements never reach the library's go.mod.
SQLC := go tool -modfile=tools/go.mod sqlc

.PHONY: test lint generate check-generate ci bench

# The one test command: the library's unit tests and examples, then the
# conformance suite, checker and migration tests against PostgreSQL and
# MySQL/MariaDB, the OpenTelemetry module (sqlonceotel, its own go.mod)
# against all three databases, the gRPC interceptor module (grpcidem, its
# own go.mod; its tests against the databases are in tests/conformance), and the inbox against NATS JetStream (tests/broker), all
# with the race detector. The tests module runs one
# package at a time (-p 1): the checker alone opens ~70 connections, and
# PostgreSQL's default max_connections is 100.
test:
	go test -race -count=1 ./...
	cd sqlonceotel && go test -race -count=1 ./...
	cd grpcidem && go test -race -count=1 ./...
	cd tests && go test -race -count=1 -p 1 -timeout 30m ./...

lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	cd sqlonceotel && go vet ./...
	cd grpcidem && go vet ./...
	cd tests && go vet ./...

# Regenerate every sqlc package from queries/ and migrations/.
generate:
	$(SQLC) generate

# Fails when generated code differs from what queries/ and migrations/ say.
check-generate:
	$(SQLC) diff

ci: lint check-generate test

# The side-by-side benchmark against the bare transaction, SELECT then
# INSERT and Redis markers (docs/benchmarks.md). BENCHFLAGS passes flags:
# make bench BENCHFLAGS='-rounds 9 -duration 2s'
bench:
	cd tests && go run ./cmd/bench $(BENCHFLAGS)
