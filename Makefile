# `make demo` runs the main job on embedded data; `make test` runs every test.
VENV := .venv
PYTHON := $(VENV)/bin/python
EXTRAS := recipes,test,jax
# Tests compile many small XLA programs (every eager JAX op, each new shape)
# and run each a few times: XLA's unoptimised CPU code halves the JAX stage.
TEST_XLA_FLAGS := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true
PYTEST := XLA_FLAGS="$(TEST_XLA_FLAGS)" $(PYTHON) -m pytest -q -p no:cacheprovider
# Each test stage appends "<stage> <seconds> s" here when it passes (.ci/run prints them).
STAGE_TIMES ?= /dev/null
timed = start=$$(date +%s); $(2) && echo "$(1) $$(( $$(date +%s) - start )) s" >> $(STAGE_TIMES)

.PHONY: install demo test test-tensorflow test-other-backends test-tensorflow-but-export \
	test-tensorflow-export test-jax test-torch test-fast benchmark clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(PYTHON) recipes/demo.py --model_dir runs/demo

# The whole suite (docstring examples included) on TensorFlow and the backend-neutral
# ops, layers and generation (which builds every model family) on JAX and PyTorch, as
# four runs two at a time, each starting when a core frees up: TensorFlow without the
# export tests beside JAX, then PyTorch's ops and layers, then TensorFlow's export tests.
# Each output line is printed whole.
test: install
	$(MAKE) --no-print-directory -j2 --output-sync=line \
		test-tensorflow-but-export test-jax test-torch test-tensorflow-export

# Every test on one backend at a time.
test-tensorflow: install
	@$(call timed,tensorflow (every test),$(PYTEST) tests)

test-other-backends: test-jax test-torch

test-tensorflow-but-export: install
	@$(call timed,tensorflow (all but tests/export),$(PYTEST) tests --ignore=tests/export)

test-tensorflow-export: install
	@$(call timed,tensorflow (tests/export),$(PYTEST) tests/export)

test-jax: install
	@$(call timed,jax (ops layers generation),KERAS_BACKEND=jax $(PYTEST) tests/ops tests/layers tests/generation)

test-torch: install
	@$(call timed,torch (ops layers),KERAS_BACKEND=torch $(PYTEST) tests/ops tests/layers)

test-fast: install
	$(PYTEST) tests -m "not slow"

benchmark: install
	$(PYTHON) -m benchmarks.attention

clean:
	rm -rf $(VENV) runs build *.egg-info
