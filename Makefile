# policy-sync — every target installs what it needs through `setup`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAFKA_PORT ?= 9092
KAFKACTL := $(PY) docker/kafka/kafkactl.py
export KAFKA_PORT
PULSAR_WEB_PORT ?= 8080
PULSAR_BROKER_PORT ?= 6650
# Stdlib only: the real Pulsar starts without the project's virtualenv.
PULSARCTL := $(PYTHON) docker/pulsar/pulsarctl.py
# Two clusters (east, west) and MirrorMaker 2; needs the virtualenv for the sidecars.
GEOCTL := $(PY) docker/geo/geoctl.py

.PHONY: help setup kafka-up kafka-down cluster-up cluster-down geo-up geo-down geo-demo geo-chaos pulsar-up pulsar-down compat lint \
        types unit integration test demo bench chaos chaos-short clean wheel-check proto

help:
	@echo "make demo   - run the main job end to end on a local Kafka it starts itself"
	@echo "make test   - lint, types, unit and integration tests (real Kafka, real Spark)"
	@echo "make bench  - benchmarks beside raw confluent-kafka and Apache Pulsar (pulsar-perf-go)"
	@echo "make chaos  - chaos soak on the 3-broker cluster (CHAOS_SECONDS=600, CHAOS_SEED)"
	@echo "make chaos-short - the 75-second soak as a pytest test"
	@echo "make kafka-up / kafka-down   - one local broker on 127.0.0.1:\$$KAFKA_PORT"
	@echo "make cluster-up / cluster-down - three local brokers (19092/29092/31092)"
	@echo "make geo-up / geo-down - clusters east (21092) and west (23092), two sidecars each," \
	      "MirrorMaker 2 both ways; writes build/geo/endpoints.json"
	@echo "make geo-demo - global policies across two clusters (starts and stops them itself)"
	@echo "make geo-chaos - geo faults under load with 60-s outages, GEO_CHAOS_RUNS=5 per fault;" \
	      "prints the convergence bound (p50/max)"
	@echo "make compat - re-record the real Pulsar's admin answers, compare a sidecar with them"
	@echo "make pulsar-up / pulsar-down - the real Apache Pulsar standalone on" \
	      "\$$PULSAR_WEB_PORT/\$$PULSAR_BROKER_PORT"

setup: $(VENV)/.installed

# native/: the compiled batch walk (Rust, PyO3), built from source with the machine's cargo
# and the maturin and crates it pins; installed first, as the package depends on it.
NATIVE_SOURCES := native/pyproject.toml native/Cargo.toml native/Cargo.lock \
	native/policy_sync_native.pyi $(wildcard native/src/*.rs)

$(VENV)/.installed: pyproject.toml $(NATIVE_SOURCES)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q ./native
	@# setuptools' InformationOnly note on editable installs is not a warning to act on
	PYTHONWARNINGS=ignore $(PY) -m pip install -q -e '.[dev]'
	@touch $@

kafka-up: setup
	@$(KAFKACTL) up --port $(KAFKA_PORT)

kafka-down: setup
	@$(KAFKACTL) down --port $(KAFKA_PORT)

cluster-up: setup
	@$(KAFKACTL) cluster-up

cluster-down: setup
	@$(KAFKACTL) cluster-down

geo-up: setup
	@$(GEOCTL) up

geo-down: setup
	@$(GEOCTL) down

geo-demo: setup
	$(PY) -m examples.geo_demo

# MirrorMaker 2 stopped, killed, one Kafka down: on its own geo setup (any free ports).
GEO_CHAOS_RUNS ?= 5
GEO_CHAOS_OUTAGE ?= 60
geo-chaos: setup
	$(PY) -m chaos.geo --runs $(GEO_CHAOS_RUNS) --outage $(GEO_CHAOS_OUTAGE)

pulsar-up:
	@$(PULSARCTL) up --web-port $(PULSAR_WEB_PORT) --broker-port $(PULSAR_BROKER_PORT)

pulsar-down:
	@$(PULSARCTL) down --web-port $(PULSAR_WEB_PORT)

# Re-record the real Pulsar's answers (tests/compat/pulsar-4.0.7.json), then compare a
# sidecar with them (the same test `make test` runs from the committed recording).
compat: setup
	@$(PULSARCTL) up --web-port $(PULSAR_WEB_PORT) --broker-port $(PULSAR_BROKER_PORT) >/dev/null
	@status=0; \
	$(PY) -m tests.compat.record record --target http://127.0.0.1:$(PULSAR_WEB_PORT) || status=$$?; \
	$(PULSARCTL) down --web-port $(PULSAR_WEB_PORT); \
	test $$status -eq 0
	$(VENV)/bin/pytest -q tests/integration/compat/test_pulsar_compat.py

lint: setup
	$(VENV)/bin/ruff check .

types: setup
	$(VENV)/bin/mypy

unit: setup
	$(VENV)/bin/pytest -q -n 2 tests/unit

# The slowest tests are printed: the suite's wall time is what keeps `make test` short. It
# mostly waits (brokers, JVMs, clients: ~10 CPU-minutes in 27 minutes run alone), so
# INTEGRATION_WORKERS=2 spreads it over two worker processes, each with its own Kafka
# (tests/integration/conftest.py says which tests stay together): 19 min 40 s instead of
# 27 min on the idle 2-core machine, but beside two CPU hogs their Kafkas starved (metadata
# timeouts, 3 failures), so one worker stays the default.
INTEGRATION_WORKERS ?= 1
integration: setup
	$(VENV)/bin/pytest -q $(if $(filter-out 1,$(INTEGRATION_WORKERS)),-n $(INTEGRATION_WORKERS) --dist loadgroup) --durations=20 tests/integration

# The package must work installed from its wheel, without extras: build it and the wheel of
# native/ it depends on, install both in a fresh venv, load the schemas and start the CLI.
wheel-check: setup
	@rm -rf build/wheel-check && mkdir -p build/wheel-check
	$(PY) -m pip wheel -q --no-deps -w build/wheel-check ./native
	$(PY) -m pip wheel -q --no-deps -w build/wheel-check . 2>/dev/null
	$(PYTHON) -m venv build/wheel-check/venv
	build/wheel-check/venv/bin/pip install -q build/wheel-check/*.whl
	cd build/wheel-check && venv/bin/python -c "import sync; sync.Codec(); print('wheel: sync.Codec() ok')"
	build/wheel-check/venv/bin/broker-shim --help > /dev/null && echo "wheel: broker-shim --help ok"
	cd build/wheel-check && venv/bin/python -c "from policy_sync_native import walk_batch; \
		assert walk_batch(bytes([0, 0, 0, 2, 0x18, 0]), 1) == (1, None); print('wheel: walk_batch ok')"

test: lint types unit wheel-check integration chaos-short

demo: setup
	$(PY) -m examples.demo

bench: setup
	$(PY) -m bench

# Regenerate the Pulsar binary protocol's Python code from its .proto (grpcio-tools' protoc).
# Two values of Schema.Type are taken out of the stubs: `None: Schema.Type` is not valid
# Python (mypy refuses the file), and Schema's copy of `KeyValue` would hide the KeyValue
# message its `properties` hold; the code spells them api.Schema.Type.Value("None") and
# api.Schema.Type.KeyValue.
proto: setup
	$(PY) -m grpc_tools.protoc -Ibroker_shim/binary --python_out=broker_shim/binary \
		--pyi_out=broker_shim/binary broker_shim/binary/PulsarApi.proto
	$(PY) -c 'import pathlib, re; p = pathlib.Path("broker_shim/binary/PulsarApi_pb2.pyi"); \
		p.write_text(re.sub(r"(?m)^( +None: .*| {4}KeyValue: Schema[.]Type)\n", "", p.read_text()))'

# The soak takes /tmp/ps-cluster.lock itself (flock(2), like `flock /tmp/ps-cluster.lock`)
# for the whole run, brings the 3-broker cluster up and down, and exits 1 on a violation.
chaos: setup
	$(PY) -m chaos

# The 75-second soak as a test (part of `make test`; its speed targets are printed, not checked).
chaos-short: setup
	$(VENV)/bin/pytest -q tests/chaos

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build native/target
