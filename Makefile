# sqlc is pinned in tools/go.mod and run through `go tool`, so its
# requirements never reach the library's go.mod.
SQLC := go tool -modfile=tools/go.mod sqlc

.PHONY: test test-short setup lint hygiene generate check-generate ci bench apicheck api-baseline consumer

# The one test command (tests/run, after tests/setup installs and starts
# what is missing; SQLONCE_SETUP=0 skips that): the library's unit tests and examples,
# the OpenTelemetry module (sqlonceotel), the gRPC interceptor module
# (grpcidem) and the outbox's broker adapters (outbox/natsjs,
# outbox/rabbitmq), each with its own go.mod, and the tests module: the
# conformance suite, checker, migration, broker and round-trip tests
# against PostgreSQL, MariaDB and SQLite (the adapters' against NATS and
# RabbitMQ servers of their own), all with the race detector, the
# modules at once, with a timing report at the end. test-short is the
# inner loop (-short, without -race: SQLite and one configuration of each
# server kind; no clusters).
test:
	bash tests/run

test-short:
	bash tests/run -short

# What the tests need, installed (as root) and started; make test runs it.
setup:
	bash tests/setup >/dev/null

# No tracked file over 1 MB, no executable binary outside testdata/.
hygiene:
	bash .ci/hygiene

lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	cd sqlonceotel && go vet ./...
	cd grpcidem && go vet ./...
	cd outbox/natsjs && go vet ./...
	cd outbox/rabbitmq && go vet ./...
	cd tests && go vet ./...
	cd tools && go vet ./...

# Regenerate every sqlc package from queries/ and migrations/.
generate:
	$(SQLC) generate

# Fails when generated code differs from what queries/ and migrations/ say.
check-generate:
	$(SQLC) diff

ci: hygiene lint check-generate apicheck consumer test

# The side-by-side benchmark against the bare transaction, SELECT then
# INSERT and Redis markers (docs/benchmarks.md). BENCHFLAGS passes flags:
# make bench BENCHFLAGS='-rounds 9 -duration 2s'
bench:
	cd tests && go run ./cmd/bench $(BENCHFLAGS)

# The API compatibility check (RELEASING.md): the published modules' API
# against tools/api, the last release's; an incompatible change fails
# unless CHANGELOG.md's [Unreleased] section names the identifier.
# api-baseline rewrites tools/api from the tree (at a release).
apicheck:
	bash .ci/apicheck

api-baseline:
	bash .ci/apicheck -write

# A module outside the repository gets grpcidem and sqlonceotel at v0.1.0
# from a file:// proxy of the committed tree and builds (RELEASING.md).
consumer:
	bash .ci/consumer
