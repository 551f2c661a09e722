# The two commands of the README: `make demo` and `make test`.
.PHONY: demo test test-loaded build setup clean perf

build:
	go build -buildvcs=auto -o bin/ ./cmd/...

setup:
	bash scripts/setup.sh

# A complete local two-gateway stream: starts two s2cs, a consumer and a
# producer, streams 1 GiB through them and directly, prints both. Installs
# only what it needs (scripts/setup.sh --demo); `make test` the rest.
demo:
	bash scripts/setup.sh --demo
	bin/s2bench compare
	@echo
	@echo "Next:"
	@echo "  README.md, Quickstart: two gateways and a stream by hand, four blocks to paste"
	@echo "  bin/s2bench compare --workload lstream   # one long stream instead of the sweep"
	@echo "  make test                                # every test (installs their tools first)"

test:
	bash scripts/test.sh

# The same, with CPU-bound busy loops beside it, as on a shared CI runner.
test-loaded:
	bash scripts/test.sh --loaded

# The runs of docs/performance.md (about two minutes; use a quiet machine).
perf: setup
	bash scripts/perf.sh

clean:
	rm -rf bin
