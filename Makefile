# `make demo` runs the main job on embedded data; `make test` runs every test.
VENV := .venv
PYTHON := $(VENV)/bin/python
EXTRAS := recipes,test,jax
# Tests compile many small XLA programs (every eager JAX op, each new shape)
# and run each a few times: XLA's unoptimised CPU code halves the JAX stage, and
# its older loop emitters, which compile faster than the fusion emitters, take
# another 38% off it (1,007 s to 623 s on one core).
TEST_XLA_FLAGS := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true \
	--xla_cpu_use_fusion_emitters=false
# TensorFlow's oneDNN kernels set up each small shape anew: without them its tests
# ran 9-13% faster (144 s against 158 s, and 391 s against 447 s, on one core each).
# Users keep TensorFlow's default; the tests' tolerances hold with either.
TEST_ENV := TF_ENABLE_ONEDNN_OPTS=0 XLA_FLAGS="$(TEST_XLA_FLAGS)"
# Two test processes share the two cores all along: a process whose TensorFlow or PyTorch
# kernels split each op over both cores waits on the other's share. With one thread per
# op, tests/generation and tests/ops on PyTorch took 35 s against 109 s, and
# tests/models on TensorFlow 183 s against 257 s, the two running side by side.
TEST_ENV += TF_NUM_INTRAOP_THREADS=1 OMP_NUM_THREADS=1
# Each test process (and each program a test starts) imports TensorFlow, Keras and
# the rest anew: where the environment sets PYTHONDONTWRITEBYTECODE, each compiled
# all their Python sources again (9 s of TensorFlow's 15 s import). Writing the
# bytecode once took tests/training's distribution and segment-memory tests and
# tests/models/test_sequence_models.py from 157 s to 106 s on one core.
# Each stage ends with its 15 slowest tests: where the suite's time goes.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(TEST_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider --durations=15
# Each test stage appends "<stage> <seconds> s" here when it passes (.ci/run prints them).
STAGE_TIMES ?= /dev/null
timed = start=$$(date +%s); $(2) && echo "$(1) $$(( $$(date +%s) - start )) s" >> $(STAGE_TIMES)

.PHONY: install demo test test-tensorflow test-other-backends \
	test-tensorflow-models test-tensorflow-layers test-tensorflow-rest test-tensorflow-export test-tensorflow-serving \
	test-jax test-torch test-lane-0 test-lane-1 test-fast benchmark clean

install: $(VENV)/.installed

# uv installs the same requirements as pip, downloading and unpacking in parallel
# (about 35 s for the test extras on a fresh machine, against 130 s with pip). It reads
# no pip configuration, so pip's find-links (local wheels, such as a CPU build of
# torch) are handed to it.
$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip uv
	links="$${PIP_FIND_LINKS:-$$($(PYTHON) -m pip config get global.find-links 2>/dev/null)}"; \
	$(PYTHON) -m uv pip install --quiet --python $(PYTHON) \
		$$(for link in $$links; do echo --find-links "$$link"; done) -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(PYTHON) recipes/demo.py --model_dir runs/demo

# The whole suite (docstring examples included) on TensorFlow and the backend-neutral
# ops, layers and generation (which builds every model family) on JAX and PyTorch, as
# six runs in two lanes, each lane pinned to a core where there are two. In a fresh
# clone's CI run here (2026-12-07): JAX 439 s, TensorFlow's rest 360 s, PyTorch 215 s,
# TensorFlow's layers and ops 206 s and its serving tests (123 s alone) in one lane;
# TensorFlow's models, recipes and training 965 s and its export tests in the other
# (before the serving tests moved to the first lane: 1,220 s and 1,395 s). Unpinned, the
# programs that tests start (a distribution strategy's workers, the C API loader, the
# benchmarks) took time from the other lane: the same stages ran in 1,222 s. Each
# output line is printed whole.
test: install
	$(MAKE) --no-print-directory -j2 --output-sync=line test-lane-0 test-lane-1

# `taskset -c <core>` where the machine has that core and taskset; else nothing.
pin = $(shell [ "$$(nproc)" -gt $(1) ] && command -v taskset > /dev/null && echo taskset -c $(1))

test-lane-0: install
	@$(call pin,0) $(MAKE) --no-print-directory -j1 test-jax test-tensorflow-rest test-torch test-tensorflow-layers \
		test-tensorflow-serving

test-lane-1: install
	@$(call pin,1) $(MAKE) --no-print-directory -j1 test-tensorflow-models test-tensorflow-export

# Every test on one backend at a time.
test-tensorflow: install
	@$(call timed,tensorflow (every test),$(PYTEST) tests)

test-other-backends: test-jax test-torch

TENSORFLOW_MODEL_TESTS := tests/models tests/recipes tests/training
TENSORFLOW_LAYER_TESTS := tests/layers tests/ops
TENSORFLOW_EXPORT_TESTS := tests/export
TENSORFLOW_SERVING_TESTS := tests/serving

test-tensorflow-models: install
	@$(call timed,tensorflow (models recipes training),$(PYTEST) $(TENSORFLOW_MODEL_TESTS))

test-tensorflow-layers: install
	@$(call timed,tensorflow (layers ops),$(PYTEST) $(TENSORFLOW_LAYER_TESTS))

test-tensorflow-rest: install
	@$(call timed,tensorflow (the rest),$(PYTEST) tests $(addprefix --ignore=,\
		$(TENSORFLOW_MODEL_TESTS) $(TENSORFLOW_LAYER_TESTS) $(TENSORFLOW_EXPORT_TESTS) $(TENSORFLOW_SERVING_TESTS)))

test-tensorflow-export: install
	@$(call timed,tensorflow (export),$(PYTEST) $(TENSORFLOW_EXPORT_TESTS))

test-tensorflow-serving: install
	@$(call timed,tensorflow (serving),$(PYTEST) $(TENSORFLOW_SERVING_TESTS))

test-jax: install
	@$(call timed,jax (ops layers generation),KERAS_BACKEND=jax $(PYTEST) tests/ops tests/layers tests/generation)

test-torch: install
	@$(call timed,torch (ops layers generation),KERAS_BACKEND=torch $(PYTEST) tests/ops tests/layers tests/generation)

test-fast: install
	$(PYTEST) tests -m "not slow"

benchmark: install
	$(PYTHON) -m benchmarks.attention

clean:
	rm -rf $(VENV) runs build *.egg-info
