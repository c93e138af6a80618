# `make demo` runs the main job on embedded data; `make test` runs every test.
VENV := .venv
PYTHON := $(VENV)/bin/python
EXTRAS := recipes,test,jax
PYTEST := $(PYTHON) -m pytest -q -p no:cacheprovider

.PHONY: install demo test test-fast benchmark clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(PYTHON) recipes/music.py --model_dir runs/demo --export_dir runs/demo/export --preset tiny --attention relative_global --sequence_length 256 --batch_size 16 --epochs 8 --steps_per_epoch 125

# The whole suite (docstring examples included) on TensorFlow, then the backend-neutral
# ops, layers and generation (which builds every model family) on JAX, and the ops and
# layers on PyTorch.
test: install
	$(PYTEST) tests
	KERAS_BACKEND=jax $(PYTEST) tests/ops tests/layers tests/generation
	KERAS_BACKEND=torch $(PYTEST) tests/ops tests/layers

test-fast: install
	$(PYTEST) tests -m "not slow"

benchmark: install
	$(PYTHON) benchmarks/attention.py

clean:
	rm -rf $(VENV) runs build *.egg-info
