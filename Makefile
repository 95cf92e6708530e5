# The two commands a newcomer needs: `make run` and `make test`; `make check`
# is the quick inner loop.
GO ?= go
BIN := bin/silas
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: run build test test-race test-norace test-realclient test-short test-deploy check lint fuzz bench vet fmt clean

## run: start the gateway with the local web chat (a local PostgreSQL under ./.data when DATABASE_URL is unset)
run: build
	./$(BIN) serve

build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/silas

## test: every test, PostgreSQL-backed ones included (one throwaway cluster for the whole run when no TEST_DATABASE_URL/DATABASE_URL)
## Many tests wait on PostgreSQL, sockets and subprocesses rather than the CPU, so
## four packages run at once (go test's default is GOMAXPROCS, 2 here) and twice as
## many tests of a package as its default: with -p 3 a fresh clone used the two cores
## only 54 % of its 6m13s; -p 4 took 5m30s (BENCHMARKS.md, "At the end of stop 24").
## More (-p 4 -parallel 8) starves timing-sensitive tests (BENCHMARKS.md).
## go test's own vet pass is off because `go vet ./...` just ran every analyzer it
## would. A race-enabled binary sleeps 1 s at exit by default (GORACE atexit_sleep_ms)
## so that late reports can print; tests are over by then, and 40 binaries × 1 s is
## wall time for nothing.
TEST_FLAGS ?= -p 4 -parallel 4
## The longest-running packages first, so that the run does not end with one of them
## alone on a core (go test starts packages in the order given; ./... adds the rest once).
## The list is by each package's time in a `make test` run (BENCHMARKS.md, stop 25).
TEST_PKGS ?= ./cmd/silas ./adapters/whatsapp ./core/sandbox ./core/store ./adapters/telegram/e2e ./core/agent/llm \
	./adapters/slack/e2e ./internal/pgcluster ./core/engine ./internal/browsertest ./adapters/telegram ./...
export GORACE ?= atexit_sleep_ms=0
## Test binaries are linked without DWARF (-w): nothing in a test run reads it (stack
## traces and race reports symbolise from the binary's own tables), and linking ~40
## race-enabled test binaries is a tenth of the run's CPU; -w makes each link about a
## quarter cheaper (BENCHMARKS.md, "make test"). A debugger needs `go test -c` without it.
TEST_LDFLAGS ?= -ldflags=-w
## -trimpath keeps the checkout's directory out of compiled packages, so a fresh clone
## (CI's, or a newcomer's second one) reuses the build cache instead of recompiling
## every package under -race.
export GOFLAGS ?= -trimpath
## WhatsApp's real-client tests are built only without -race (whatsmeow races on
## Disconnect; realclient_test.go): they run once more without it (only they: the
## package's other tests ran with -race; the real-client tests are all TestRealClient…).
## Lint and the real-client pass run beside the race pass rather than before or after
## it: the race pass leaves a core idle much of the time (tests waiting on servers and
## subprocesses), which they fill (BENCHMARKS.md, "make test"). Vet runs beside them
## too (it used to run first, on the critical path): a vet finding still fails the target.
test:
	@$(MAKE) --no-print-directory -j4 vet lint test-race test-norace

## Long single-goroutine computations, which the race detector slows five- to tenfold
## and has nothing to check in (no goroutine shares their data): a property over
## 256 KiB of random tool output, the secret scanner's linear-work check, the
## decompression budget, 150 random flow graphs. The race pass skips exactly these
## names and the non-race pass runs them (about 20 CPU-seconds less; BENCHMARKS.md).
NORACE_TESTS := ^(TestRedactValuesRandomOutputUntouched|TestScanLinear|TestRedactValuesInflateBudget|TestRandomGraphs)$$
NORACE_PKGS := ./core/redact ./core/flow

# test-norace: the non-race pass of `make test` (above): WhatsApp's real-client tests and NORACE_TESTS
test-norace:
	$(GO) run ./internal/pgtest/pgtestrun $(GO) test -vet=off -count=1 $(TEST_FLAGS) $(TEST_LDFLAGS) -timeout 10m -run '^TestRealClient|$(NORACE_TESTS)' ./adapters/whatsapp $(NORACE_PKGS)

# test-realclient: the non-race pass's old name
test-realclient: test-norace

# test-race: the race pass of `make test` alone (no vet, lint or non-race pass)
test-race:
	$(GO) run ./internal/pgtest/pgtestrun $(GO) test -race -vet=off -count=1 $(TEST_FLAGS) $(TEST_LDFLAGS) -timeout 15m -skip '$(NORACE_TESTS)' $(TEST_PKGS)

## test-deploy: the shipped deployment files, run (docs/deploy.md): `docker compose up` on deploy/compose.yaml
## runs an approved action (deploy/container_test.go; the image's runtime stage built from its Debian packages with
## mmdebstrap, cached), and the Kubernetes manifest decodes strictly into Kubernetes' API types (deploy/kubecheck,
## a module of its own). Needs root, docker.io, mmdebstrap and the compose plugin (deploy/install-compose.sh);
## .ci/run installs them and runs this after make test. Minutes the first time.
test-deploy:
	cd deploy/kubecheck && $(GO) test -count=1 ./...
	$(GO) test -tags deploytest -count=1 -timeout 30m -run '^(TestComposeRunsApprovedAction|TestComposeScaleTwoInstances)$$' ./deploy

## test-short: every test with -short (tests that check testing.Short skip their long cases), no race detector, one throwaway cluster
test-short:
	$(GO) run ./internal/pgtest/pgtestrun $(GO) test -short -count=1 ./...

## check: the inner loop, under a minute on 2 cores with a warm build cache: vet, lint and the tests of
## the packages that need no database, -short and without the race detector. Run `make test` before pushing.
## NODB_PKGS is computed, so a new package lands on the right side by itself: a package needs a database
## when it or anything its tests import imports internal/pgtest (which starts PostgreSQL); internal/pgtest
## and internal/pgcluster start clusters themselves.
PGTEST := github.com/silas-gateway/silas/internal/pgtest
NODB_PKGS = $(shell $(GO) list -test -f '{{if .ForTest}}{{.ForTest}} {{join .Deps " "}}{{end}}' ./... | \
	awk '{ db = (index($$0 " ", " $(PGTEST) ") > 0) } { print $$1, db }' | sort -k1,1 -k2,2r | \
	awk '!seen[$$1]++ && $$2 == 0 && $$1 != "$(PGTEST)" && $$1 !~ /pgcluster$$/ { print $$1 }')
check: vet lint
	$(GO) test -short -vet=off -count=1 $(NODB_PKGS)

## lint: staticcheck, pinned (fetched through the Go module proxy and checksum-verified on first use);
## staticcheck.conf lists the checks that are off and why
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags whatsappfake ./adapters/whatsapp ./cmd/silas

## fuzz: run each fuzz target for FUZZTIME (default 30s); silas_fuzz leaves the sandbox zygote's
## nosplit fork code out, which fuzz instrumentation pushes past its stack limit
FUZZTIME ?= 30s
FUZZ = $(GO) test -tags silas_fuzz -run '^$$' -fuzztime $(FUZZTIME)
fuzz:
	$(FUZZ) -fuzz '^FuzzTransform$$' ./core/canon
	$(FUZZ) -fuzz '^FuzzParseFrame$$' ./adapters/webchat
	$(FUZZ) -fuzz '^FuzzSplit$$' ./core/agent
	$(FUZZ) -fuzz '^FuzzUpdateToTurn$$' ./adapters/telegram
	$(FUZZ) -fuzz '^FuzzParseTextTap$$' ./adapters/kit
	$(FUZZ) -fuzz '^FuzzSplitText$$' ./adapters/kit
	$(FUZZ) -fuzz '^FuzzFastData$$' ./core/audit
	$(FUZZ) -fuzz '^FuzzParseHeadLine$$' ./core/audit
	$(FUZZ) -fuzz '^FuzzScan$$' ./core/redact
	$(FUZZ) -fuzz '^FuzzRedactValues$$' ./core/redact
	$(FUZZ) -fuzz '^FuzzSplitScript$$' ./core/policy
	$(FUZZ) -fuzz '^FuzzEvaluate$$' ./core/policy
	$(FUZZ) -fuzz '^FuzzJSONBSafe$$' ./core/store
	$(FUZZ) -fuzz '^FuzzFrameIntake$$' ./adapters/webchat
	$(FUZZ) -fuzz '^FuzzWebhookIntake$$' ./adapters/telegram/e2e
	$(FUZZ) -fuzz '^FuzzHistoryMessage$$' ./core/agent/llm
	$(FUZZ) -fuzz '^FuzzDecodeChat$$' ./core/agent/llm/wire
	$(FUZZ) -fuzz '^FuzzMachine$$' ./core/flow
	$(FUZZ) -fuzz '^FuzzParse$$' ./core/flow
	$(FUZZ) -fuzz '^FuzzInteractionToTurn$$' ./adapters/discord
	$(FUZZ) -fuzz '^FuzzMessageToTurn$$' ./adapters/discord
	$(FUZZ) -fuzz '^FuzzRenderCard$$' ./adapters/discord
	$(FUZZ) -fuzz '^FuzzPayloads$$' ./adapters/slack
	$(FUZZ) -fuzz '^FuzzRenderCard$$' ./adapters/slack
	$(FUZZ) -fuzz '^FuzzMessageToTurn$$' ./adapters/whatsapp
	$(FUZZ) -fuzz '^FuzzNumberedReply$$' ./adapters/whatsapp
	$(FUZZ) -fuzz '^FuzzPhoneDigits$$' ./adapters/whatsapp
	$(FUZZ) -fuzz '^FuzzAppendJSONString$$' ./core/agent/llm
	$(FUZZ) -fuzz '^FuzzCutIDs$$' ./core/agent/llm
	$(FUZZ) -fuzz '^FuzzDecodeArgs$$' ./core/agent/llm
	$(FUZZ) -fuzz '^FuzzParse$$' ./core/agent/llm/plan
	$(FUZZ) -fuzz '^FuzzGate$$' ./core/consent
	$(FUZZ) -fuzz '^FuzzServiceLink$$' ./internal/config

## bench: Go benchmarks plus the load driver, on real PostgreSQL (figures go in BENCHMARKS.md); the
## LLM task runtime's per-step overhead runs STEPS steps (enough for a p99)
STEPS ?= 300
bench: build
	$(GO) test -run '^$$' -bench . -skip '^BenchmarkTaskStepOverhead$$' -benchmem -count=1 ./...
	$(GO) test -run '^$$' -bench '^BenchmarkTaskStepOverhead$$' -benchtime $(STEPS)x -count=1 ./core/agent/llm
	$(GO) run ./cmd/silas-load -silas $(BIN)

vet:
	$(GO) vet ./...
	$(GO) vet -tags whatsappfake ./adapters/whatsapp ./cmd/silas

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
