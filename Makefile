# spark-topic-router: `make demo` runs the main job end to end, `make test` passes the tests.
# Both install everything they need into .venv/ first.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
INSTALLED := $(VENV)/.installed
# The Rust extension routing._native, built in place (make install's first build, and the `native` target).
BUILD_NATIVE := $(PY) setup.py --quiet build_rust --inplace --release
# JVM jars (Kafka source + Delta for Spark, the local broker), resolved once from conf/jvm/pom.xml.
MVN ?= mvn
JARS_DIR := var/jars
JARS_STAMP := $(JARS_DIR)/.resolved
# A stamp without the jars it stands for (var/jars/ partly deleted) must not pass for resolved.
ifeq ($(and $(wildcard $(JARS_DIR)/spark/delta-spark_*.jar),$(wildcard $(JARS_DIR)/kafka/kafka_2.13-*.jar)),)
.PHONY: $(JARS_STAMP)
endif

# `make test` runs its checks in a -j2 sub-make. Its jobserver's descriptors reach only $(MAKE) lines, so cargo,
# finding the jobserver named in MAKEFLAGS (or MFLAGS) but not its pipe, would warn that the build is misconfigured.
unexport MAKEFLAGS MFLAGS

.PHONY: help install jars jvm-archive package native native-test loom fuzz fuzz-smoke lint test test-fast demo bench bench-latency chaos soak clean kafka-start kafka-stop kafka-status

help:
	@echo "make demo   install everything, start the broker and route sample traffic end to end"
	@echo "make test   install everything, lint, type-check, build the docs and run the whole test suite"
	@echo "make docs   regenerate docs/reference/ (settings, commands) and build the documentation site into build/site/ (--strict)"
	@echo "make bench  run the benchmarks (tables and charts under bench/results/)"
	@echo "make bench-latency  sustained-rate latency of the router and the passthrough (~15 min; idle machine)"
	@echo "make chaos  SIGKILL the router, broker and refresh job at random under live traffic, check every message (bench/results/chaos.md)"
	@echo "make soak   an hour of steady traffic, churn and a router SIGKILL every 10 min: memory, files, batch p99, conservation (bench/results/soak.md)"
	@echo "make fuzz   each cargo-fuzz target for FUZZ_MINUTES (default 10) minutes: bench/results/fuzz.md, corpus in native/fuzz/corpus/"
	@echo "make loom   the CS-trie's loom models (~3 min on 2 cores, plus a first build of ~2 min)"
	@echo "make clean  remove build products (keeps .venv/)"
	@echo "make jars   resolve the JVM jars (Delta, Kafka source, broker) into var/jars/ with Maven, build dev/'s local file system jar and the project's UDF jar"
	@echo "make jvm-archive  dev/'s class-data archive that starts each local Spark JVM faster (~10 s per fresh job process; var/jvm/)"
	@echo "make package  the wheel, the packed environment and the jars spark-submit ships, in dist/"
	@echo "make kafka-start | kafka-status | kafka-stop   the local KRaft broker (data in var/kafka/)"

# No build isolation: the extension is built with this venv's Python (and setuptools-rust), so pip's build and
# the `native` target's find cargo's cache warm instead of recompiling pyo3 for another interpreter.
$(INSTALLED): setup.py pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; Python 3.11 is required" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip setuptools wheel "setuptools-rust>=1.9"
	# The extension's cargo build (a minute, much of it on one core) runs while pip installs the dependencies
	# (setup.py's lists, all extras); pip's own build of the package then finds cargo's output fresh.
	$(PY) setup.py --requirements > $(VENV)/requirements.txt
	$(BUILD_NATIVE) & cargo=$$!; \
		$(PIP) install --quiet -r $(VENV)/requirements.txt; pip=$$?; \
		wait $$cargo && test $$pip -eq 0
	$(PIP) install --quiet --no-build-isolation --no-deps -e .
	touch $@

$(JARS_STAMP): conf/jvm/pom.xml
	@command -v $(MVN) >/dev/null || { echo "error: $(MVN) not found; Maven and a JDK 17+ are required" >&2; exit 1; }
	rm -rf $(JARS_DIR)/spark $(JARS_DIR)/kafka
	$(MVN) -B -q -Dstyle.color=never -f conf/jvm/pom.xml -P spark -Djars.dir=$(CURDIR)/$(JARS_DIR) package
	$(MVN) -B -q -Dstyle.color=never -f conf/jvm/pom.xml -P kafka -Djars.dir=$(CURDIR)/$(JARS_DIR) package
	touch $@

# Development tooling (dev/local_spark.py): Hadoop's local file system without child processes (dev/localfs/src),
# compiled against pyspark's own Hadoop jars: no Maven plugin to resolve. Its own directory, not in spark.jars: it
# goes on the class path of the local driver JVMs that the demo, the tests and the benchmarks start.
LOCAL_FS_JAR := $(JARS_DIR)/localfs/spark-topic-router-localfs.jar
LOCAL_FS_SOURCES := $(wildcard dev/localfs/src/main/java/sparktopicrouter/hadoop/*.java)

$(LOCAL_FS_JAR): $(LOCAL_FS_SOURCES) | $(INSTALLED)
	@command -v javac >/dev/null || { echo "error: javac not found; a JDK 17+ is required" >&2; exit 1; }
	rm -rf build/localfs && mkdir -p build/localfs/classes $(dir $@)
	javac --release 17 -Xlint:all,-path -Werror -d build/localfs/classes \
		-cp "$$($(PY) -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')/*" \
		$(LOCAL_FS_SOURCES)
	jar --create --file $@.tmp -C build/localfs/classes . && mv $@.tmp $@

# The project's own jar (udfs/jvm/): the real-time lane's Java UDF and, inside it as a resource, the JNI library
# of native/jvm, which the UDF unpacks and loads once per JVM. In var/jars/spark/ beside the resolved jars, so
# every session's spark.jars and `make package`'s dist/jars/ carry it: spark-submit needs nothing else.
# Rebuilt only when its sources change (its size and mtime key the class-data archive).
JVM_UDF_JAR := $(JARS_DIR)/spark/spark-topic-router-udfs.jar
JVM_UDF_SOURCES := $(wildcard udfs/jvm/sparktopicrouter/udfs/*.java)
JVM_UDF_NATIVE := $(wildcard native/jvm/Cargo.toml native/jvm/src/*.rs native/core/Cargo.toml native/core/src/*.rs \
	native/core/src/*/*.rs native/Cargo.lock)
JVM_UDF_PLATFORM := $(shell uname -s | tr A-Z a-z)-$(shell uname -m)

$(JVM_UDF_JAR): $(JVM_UDF_SOURCES) $(JVM_UDF_NATIVE) $(JARS_STAMP) | $(INSTALLED)
	@command -v javac >/dev/null || { echo "error: javac not found; a JDK 17+ is required" >&2; exit 1; }
	cd native && cargo build --release --quiet -p spark_topic_router_jvm
	rm -rf build/jvm-udfs && mkdir -p build/jvm-udfs/classes/sparktopicrouter/udfs/native/$(JVM_UDF_PLATFORM)
	javac --release 17 -Xlint:all,-path,-serial -Werror -d build/jvm-udfs/classes \
		-cp "$$($(PY) -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')/*" \
		$(JVM_UDF_SOURCES)
	cp native/target/release/libspark_topic_router_jvm.so \
		build/jvm-udfs/classes/sparktopicrouter/udfs/native/$(JVM_UDF_PLATFORM)/
	jar --create --file $@.tmp -C build/jvm-udfs/classes . && mv $@.tmp $@

# Benchmark tooling (bench/jvm/): bench/realtime.py's latency consumer, compiled against the broker's own client jars
# (var/jars/kafka/): a Python consumer cost the shared cores more than half of one at the router's rates.
BENCH_JAR := $(JARS_DIR)/bench/spark-topic-router-bench.jar
BENCH_SOURCES := $(wildcard bench/jvm/sparktopicrouter/bench/*.java)

$(BENCH_JAR): $(BENCH_SOURCES) $(JARS_STAMP) | $(INSTALLED)
	@command -v javac >/dev/null || { echo "error: javac not found; a JDK 17+ is required" >&2; exit 1; }
	rm -rf build/bench-jvm && mkdir -p build/bench-jvm/classes $(dir $@)
	javac --release 17 -Xlint:all,-path -Werror -d build/bench-jvm/classes -cp "$(JARS_DIR)/kafka/*" $(BENCH_SOURCES)
	jar --create --file $@.tmp -C build/bench-jvm/classes . && mv $@.tmp $@

jars: $(JARS_STAMP) $(LOCAL_FS_JAR) $(JVM_UDF_JAR) $(BENCH_JAR)

# Development tooling: the driver JVMs' class-data archive (dev/class_archive.py), which every Spark JVM the demo,
# the tests and the benchmarks start maps (through $(LOCAL_SPARK), below) and starts faster. Written once per JDK,
# pyspark version and jar set (a minute or two; var/jvm/), a no-op afterwards.
jvm-archive: install
	$(PY) -m dev.class_archive

# The demo's and the benchmarks' Spark properties (dev/local_spark.py): the local file system, the archive and var/
# scratch paths in var/spark-conf/spark-defaults.conf, which the spark-submit that starts each local JVM loads
# (PYSPARK_SUBMIT_ARGS). The tests write their own (tests/conftest.py).
LOCAL_SPARK := PYSPARK_SUBMIT_ARGS="$$($(PY) -m dev.local_spark || echo pyspark-shell)"

install: $(INSTALLED) $(JARS_STAMP) $(LOCAL_FS_JAR) $(JVM_UDF_JAR) $(BENCH_JAR)

# What a cluster runs (see conf/spark-submit/): the wheel with the native extension, a venv-pack'ed
# environment (cached under build/ by the wheel's content) and the Spark jars. Idempotent.
package: install
	$(PY) -m jobs.package

kafka-start: install
	$(PY) -m jobs.local_kafka start

kafka-stop: install
	$(PY) -m jobs.local_kafka stop

kafka-status: install
	$(PY) -m jobs.local_kafka status

# The Rust extension routing._native: rebuilt every run (cargo makes it cheap when unchanged).
native: install
	$(BUILD_NATIVE)

# Rust unit tests and the bounded fuzz smoke runs of the native workspace (plain cargo test: no nightly; the
# binding crate has no Rust tests, so nothing links libpython).
# The churn memory bound runs at full size (2M cycles) in the debug build: ~30 s, against a minute to build the
# tests again with the release profile's LTO (plain `cargo test` runs a fortieth of them).
native-test:
	cd native && CHURN_CYCLES=2000000 cargo test --workspace --quiet

# Loom models of the CS-trie (native/core/tests/cstrie_loom.rs): the real trie code with loom's atomics,
# every interleaving up to a preemption bound (2 for the two-writer models, 1 for the others; set
# LOOM_MAX_PREEMPTIONS to override all). Not part of `make test`: ~3 min on 2 cores, plus ~2 min for
# the first build. --cfg loom rebuilds every crate, so it gets its own target dir (no LTO: build time).
# Then the models of crate-private parts (modules `loom_models`, e.g. the tails' counts in
# cstrie/thin_arc.rs): the filter, since the library's other unit tests are no loom models.
LOOM_CARGO := RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_LTO=false \
	CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo test --release -p spark_topic_router_core
loom:
	cd native && $(LOOM_CARGO) --test cstrie_loom
	cd native && $(LOOM_CARGO) --lib loom_models

# The fuzzing record (bench/fuzz.py --help): each cargo-fuzz target for FUZZ_MINUTES minutes, one libFuzzer
# job at a time; the minimized corpus goes to native/fuzz/corpus/<target>/ (commit it) and the figures to
# bench/results/fuzz.md. Needs nightly Rust and cargo-fuzz, and says so (exit 2) when they are missing.
FUZZ_MINUTES ?= 10
fuzz: $(INSTALLED)
	$(PY) bench/fuzz.py --minutes $(FUZZ_MINUTES)

# Short coverage-guided runs of the cargo-fuzz targets, where nightly + cargo-fuzz exist
# (`cargo install cargo-fuzz`); elsewhere the bounded smoke runs inside `cargo test` cover them.
# A fresh working corpus each time keeps the run bounded; `make fuzz`'s committed corpus and the seeds are
# read-only seed directories, so the runs start from the coverage earlier campaigns reached. Built like
# `make fuzz` (-O -a: debug assertions and overflow checks on), so the two share one build.
# `lookups` runs without leak detection: the CS-trie frees nodes later (epoch reclamation), which
# LeakSanitizer would otherwise re-scan the heap for after every input.
FUZZ_RUNS ?= 2000
FUZZ_SECONDS ?= 10
fuzz-smoke:
	@if cargo +nightly fuzz --version >/dev/null 2>&1; then \
		cd native && for target in from_bytes batch_keys lookups deltas; do \
			corpus=$$(mktemp -d); \
			seeds=$$(for dir in fuzz/corpus/$$target fuzz/seeds/$$target; do test -d $$dir && echo $$dir; done); \
			leaks=$$(test $$target = lookups && echo -detect_leaks=0); \
			cargo +nightly fuzz run -O -a $$target $$corpus $$seeds -- \
				-runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_SECONDS) -max_len=512 $$leaks || exit 1; \
			rm -rf $$corpus; \
		done; \
	else echo "fuzz-smoke: nightly cargo-fuzz not installed; cargo test ran the bounded fuzz smoke"; fi

# Python: ruff, mypy and the import layering (pyproject.toml's [tool.importlinter]); Rust: formatting as
# rustfmt.toml says, and clippy with every warning an error (tests included).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	cd native && cargo fmt --check
	cd native && cargo clippy --workspace --all-targets --quiet -- -D warnings

# The documentation site (mkdocs.yml, docs/): the reference pages regenerated (settings from the settings
# dataclasses, commands from their --help), then a --strict build, so a broken link, a missing anchor or a page
# missing from the nav fails. Into build/site/.
# `make test` runs docs-check: the same build, but a stale reference page fails (run `make docs`) instead of
# being rewritten under the test that compares it with the code.
# Not --quiet: it hides the warnings, and --strict then counts none.
MKDOCS_BUILD := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
.PHONY: docs docs-check
docs: $(INSTALLED)
	$(PY) docs/gen_settings.py
	$(PY) docs/gen_cli.py
	$(MKDOCS_BUILD)

docs-check: $(INSTALLED)
	$(PY) docs/gen_settings.py --check
	$(PY) docs/gen_cli.py --check
	$(MKDOCS_BUILD)

# --durations: every run's log names the slowest tests (the suite must stay under 20 minutes).
# Three pytest-xdist workers, each with its own broker and SparkSession (tests/conftest.py), taking whole
# files (xdist's own order: most tests first). On 2 cores the suite is CPU-bound (load average 4 to 8): a third
# worker shortens the end, where two left one worker running the last long file alone, and a fourth only adds
# contention (pytest 18:35 with three against 21:08 with four, one after the other on 2026-12-03).
# PYTEST_WORKERS=0 runs everything in this process.
# --no-loadscope-reorder keeps tests/conftest.py's order (files with slow tests first): xdist's own re-queues files
# by their number of tests, which left the single-test files (the chaos run, the cluster) for last, one worker
# running them alone for the last two minutes (the profile of 2026-12-04: 60 CPU s a minute of 120).
PYTEST_WORKERS ?= 3
# The checks before pytest run two at a time: cargo's last crate, mypy and the archive's JVM each leave a core idle
# for much of their minute or two. --output-sync prints each one's output whole, when it ends.
test: install native
	$(MAKE) --no-print-directory -j2 --output-sync=target lint native-test fuzz-smoke jvm-archive docs-check
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=60

test-fast: install native
	$(PY) -m pytest -m "not slow and not integration"

demo: install native
	$(LOCAL_SPARK) $(PY) -m jobs.demo

bench: install native
	$(PY) bench/matchers.py
	$(PY) bench/native.py

# Its own target: a real broker and Spark at fixed offered rates for minutes (bench/latency.py --help).
bench-latency: install native
	$(LOCAL_SPARK) $(PY) bench/latency.py

# Not part of `make test` (many minutes): 20 router, 3 broker and 3 refresh-job SIGKILLs under live traffic, every
# message checked (bench/chaos.py --help); tests/integration/test_chaos.py runs the same harness with a few kills.
chaos: install native
	$(LOCAL_SPARK) $(PY) bench/chaos.py

# Not part of `make test` (over an hour): the router at half its measured capacity with subscription churn and a
# SIGKILL every ten minutes, sampled every minute (bench/soak.py --help; SOAK_ARGS passes flags).
soak: install native
	$(LOCAL_SPARK) $(PY) bench/soak.py $(SOAK_ARGS)

clean:
	rm -rf build dist *.egg-info native/target
