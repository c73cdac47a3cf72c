# Two commands on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WORKLOAD ?= workloads/laptop-sweep.yaml
DRIVER ?=
BENCH_ARGS ?=

.PHONY: bench test test-fast lint proto clean java-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

java-check:
	@java -version >/dev/null 2>&1 || { \
	  echo "make: Java 17+ is needed by Spark and was not found. Debian: apt-get install openjdk-17-jre-headless" >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ "$${v:-0}" -lt 17 ]; then \
	  echo "make: Java $$v found; Spark needs Java 17+. Debian: apt-get install openjdk-17-jre-headless" >&2; exit 1; fi

bench: $(STAMP) java-check
	$(BIN)/bench run $(WORKLOAD) $(if $(DRIVER),--driver $(DRIVER)) $(BENCH_ARGS)

test: $(STAMP) java-check
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider

test-fast: $(STAMP)
	$(BIN)/pytest -q -m 'not integration'

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Regenerates pulsar_protocol/pulsar_api_pb2.py and its type stub (.pyi) from the project's own .proto.
proto: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m grpc_tools.protoc -Ipulsar_protocol --python_out=pulsar_protocol --mypy_out=pulsar_protocol pulsar_protocol/pulsar_api.proto

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache spark-warehouse metastore_db derby.log
