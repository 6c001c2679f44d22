# Berth — two commands: `make run` (zero-setup demo) and `make test` (the whole suite
# on the real PostgreSQL and Redis). See README.md.

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt pyproject.toml | sha1sum | cut -c1-12)

TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/berth
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
PYTEST_ARGS ?=
# Test processes (pytest-xdist; each has its own test database): the suite waits on
# PostgreSQL, browsers and subprocesses as much as on the CPU, so two halve its time on a
# 2-core machine. PYTEST_WORKERS=0 runs it in one process. tests/workers.py gives each
# process its own Redis database and var/ folder; the Docker engine's tests share one
# process (xdist_group "docker", --dist loadgroup).
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -p tests.workers

.PHONY: install run test test-sqlite test-fast lint format services browser docker promtool sso bench-core bench-pass \
        bench-api bench-heartbeat bench-e2e bench-slurm bench-dashboard bench-sim bench-scrape faults fuzz fuzz-scheduler fuzz-roundtrip clean

$(STAMP):
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	scripts/ensure-ldap-dev.sh
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

## make run: the whole product on SQLite, an embedded broker and simulated GPU nodes
run: install
	$(BIN)/python -m portal.devstack

## make test: every test against PostgreSQL and Redis (started here if installed but stopped),
## then the API, dashboard, CLI, agent end-to-end, scheduling-pass and round-trip tests again on
## SQLite with no Redis, the zero-setup default of `make run` (PYTEST_ARGS narrows the first run only).
SQLITE_TESTS ?= tests/api tests/dashboard tests/cli tests/integration/test_agent_e2e.py \
  tests/portal/test_statements.py tests/portal/test_scheduling_pass.py \
  tests/portal/test_roundtrip.py

test: install services browser docker promtool sso
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) \
	  $(PYTEST) $(PYTEST_ARGS)
	test -n "$(PYTEST_ARGS)" || $(MAKE) --no-print-directory test-sqlite

## the make-run default: SQLite, the local-memory cache, no Redis
test-sqlite: install
	env -u REDIS_URL DATABASE_URL=sqlite:///$(CURDIR)/.venv/test-sqlite.sqlite3 \
	  $(PYTEST) -m "not browser and not faults" $(SQLITE_TESTS)

## the suite without the browser and live-process tests, for a quick loop
test-fast: install services promtool
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) \
	  $(PYTEST) -m "not browser and not services" $(PYTEST_ARGS)

## the fault-injection suite (slow: real processes, own PostgreSQL and Redis instances; docs/reliability.md)
FAULTS_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/berth_faults
FAULTS_REDIS_URL ?= redis://127.0.0.1:6379/11

faults: install services
	DATABASE_URL=$(FAULTS_DATABASE_URL) REDIS_URL=$(FAULTS_REDIS_URL) \
	  $(BIN)/python -m pytest -m faults tests/faults $(PYTEST_ARGS)

## schemathesis over HTTP, every check and phase (stateful included), fresh random cases,
## 100 per operation, about 8 minutes (the default suite runs a fixed few); then the fast
## parser's agreement with DRF
fuzz: install services
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) BERTH_FUZZ_RANDOM=1 \
	  BERTH_FUZZ_EXAMPLES=$${BERTH_FUZZ_EXAMPLES:-100} \
	  $(BIN)/python -m pytest tests/api/test_schema.py tests/api/test_fastparse.py \
	  -k "stateful or agrees" $(PYTEST_ARGS)

## the scheduler's and the simulator's property tests at length: BERTH_PROPERTY_SCALE (default
## 20) times their examples, fresh random cases every run (docs/scheduling.md, "Tests")
fuzz-scheduler: install
	BERTH_PROPERTY_SCALE=$${BERTH_PROPERTY_SCALE:-20} \
	  $(BIN)/python -m pytest tests/scheduler tests/sim -q $(PYTEST_ARGS)

## the portal's passes against the core's driver on BERTH_PROPERTY_SCALE (default 20) times
## its 6 fixed seeds (BERTH_ROUNDTRIP_SEEDS=A-B picks them; docs/scheduling.md, "Tests")
fuzz-roundtrip: install services
	BERTH_PROPERTY_SCALE=$${BERTH_PROPERTY_SCALE:-20} \
	  DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) \
	  $(BIN)/python -m pytest tests/portal/test_roundtrip.py -q $(PYTEST_ARGS)

services:
	scripts/ensure-services.sh

browser:
	scripts/ensure-chromium.sh

docker:
	scripts/ensure-docker.sh

promtool:
	scripts/ensure-promtool.sh

## the identity providers the SSO tests start: slapd (Debian) and oidc-provider (npm, package.json)
sso:
	scripts/ensure-sso.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## benchmarks (by hand; figures go to docs/benchmarks.md). They use their own database.
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/berth_bench

bench-core: install
	$(BIN)/python bench/bench_core.py --repeat 5

bench-pass: install services
	DATABASE_URL=$(BENCH_DATABASE_URL) $(BIN)/python bench/bench_pass.py

bench-heartbeat: install services
	DATABASE_URL=$(BENCH_DATABASE_URL) $(BIN)/python bench/bench_heartbeat.py

bench-api: install services
	DATABASE_URL=$(BENCH_DATABASE_URL) $(BIN)/python bench/bench_api.py

## the whole path on a live stack (gunicorn, the agents' watch, Celery, 8 agents): submit →
## running latency on an idle cluster, jobs/s with a backlog (docs/benchmarks.md)
BENCH_E2E_REDIS_URL ?= redis://127.0.0.1:6379/14
bench-e2e: install services
	DATABASE_URL=$(BENCH_DATABASE_URL) REDIS_URL=$(BENCH_E2E_REDIS_URL) $(BIN)/python bench/bench_e2e.py

## Berth and a private local Slurm 22.05 side by side, one sitting (needs root: apt-get, slurmd)
BENCH_SLURM_REDIS_URL ?= redis://127.0.0.1:6379/14
bench-slurm: install services
	DATABASE_URL=$(BENCH_DATABASE_URL) REDIS_URL=$(BENCH_SLURM_REDIS_URL) bench/compare_slurm.sh

bench-dashboard: install services
	DATABASE_URL=$(BENCH_DATABASE_URL) $(BIN)/python bench/bench_dashboard.py

bench-sim: install
	$(BIN)/python bench/bench_sim.py

bench-scrape: install services
	DATABASE_URL=$(BENCH_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(BIN)/python bench/bench_scrape.py

clean:
	rm -rf var staticfiles .pytest_cache test-artifacts
