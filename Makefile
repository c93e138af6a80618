# `make demo` runs the main job on embedded data; `make test` runs every test.
VENV := .venv
PYTHON := $(VENV)/bin/python
EXTRAS := recipes,test,jax
PYTEST := $(PYTHON) -m pytest -q -p no:cacheprovider
# Each test stage appends "<stage> <seconds> s" here when it passes (.ci/run prints them).
STAGE_TIMES ?= /dev/null
timed = start=$$(date +%s); $(2) && echo "$(1) $$(( $$(date +%s) - start )) s" >> $(STAGE_TIMES)

.PHONY: install demo test test-tensorflow test-other-backends test-fast benchmark clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(PYTHON) recipes/demo.py --model_dir runs/demo

# The whole suite (docstring examples included) on TensorFlow and, beside it on the
# other core, the backend-neutral ops, layers and generation (which builds every model
# family) on JAX, then the ops and layers on PyTorch. Each output line is printed whole.
test: install
	$(MAKE) --no-print-directory -j2 --output-sync=line test-tensorflow test-other-backends

test-tensorflow: install
	@$(call timed,tensorflow (every test),$(PYTEST) tests)

test-other-backends: install
	@$(call timed,jax (ops layers generation),KERAS_BACKEND=jax $(PYTEST) tests/ops tests/layers tests/generation)
	@$(call timed,torch (ops layers),KERAS_BACKEND=torch $(PYTEST) tests/ops tests/layers)

test-fast: install
	$(PYTEST) tests -m "not slow"

benchmark: install
	$(PYTHON) -m benchmarks.attention

clean:
	rm -rf $(VENV) runs build *.egg-info
