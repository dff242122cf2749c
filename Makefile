# airlock developer tasks. `make test` is the README's test command.
GO ?= go

.PHONY: test test-race test-postgres lint bench fuzz mutants release

test:
	$(GO) test ./...

test-race:
	$(GO) test -race ./...

# Runs the PostgreSQL half too (needs a server; see docs/operations.md).
test-postgres:
	AIRLOCK_TEST_DATABASE_URL=$${AIRLOCK_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} \
	AIRLOCK_TEST_REQUIRE_POSTGRES=1 $(GO) test -race ./...

lint:
	@test -z "$$(gofmt -l .)" || (gofmt -l .; echo "run gofmt -w ."; exit 1)
	$(GO) vet ./...
	@if command -v golangci-lint >/dev/null; then golangci-lint run; else echo "golangci-lint not installed; ran go vet only"; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDeriveKey -fuzztime 30s .
	$(GO) test -run '^$$' -fuzz '^FuzzParseArgs$$' -fuzztime 30s .
	$(GO) test -run '^$$' -fuzz '^FuzzKeyNormalization$$' -fuzztime 30s .
	$(GO) test -run '^$$' -fuzz '^FuzzParseArgsKeepsText$$' -fuzztime 30s .
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalMatchesEncodingJSON$$' -fuzztime 30s .
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalArgsMatchesEncodingJSON$$' -fuzztime 30s .
	$(GO) test -run '^$$' -fuzz FuzzVerify -fuzztime 30s ./auth/jwt/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./manifest
	$(GO) test -run '^$$' -fuzz FuzzClaimHandle -fuzztime 30s ./gateway
	$(GO) test -run '^$$' -fuzz FuzzParseEdge -fuzztime 30s ./gateway

# The mutation check (scripts/mutants.py, docs/hardening.md "Mutation check"):
# each mutant of scripts/mutants.txt alone in a throwaway worktree of HEAD.
# Set AIRLOCK_TEST_DATABASE_URL for the PostgreSQL mutants; ONLY=substring
# runs some.
mutants:
	python3 scripts/mutants.py $(if $(ONLY),--only "$(ONLY)")

# Release artifacts: make release VERSION=v0.3.0 (scripts/release.sh; needs
# cyclonedx-gomod for the SBOM).
release:
	@test -n "$(VERSION)" || (echo "make release VERSION=v0.x.y"; exit 2)
	bash scripts/release.sh $(VERSION)

