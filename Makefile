VENV := .venv
PYTHON := $(VENV)/bin/python
EXTRAS := test,jax

.PHONY: install demo test test-fast benchmark clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --upgrade pip
	$(PYTHON) -m pip install -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(PYTHON) -m keras_selfattn.demo

test: install
	$(PYTHON) -m pytest tests -m "not slow"
	KERAS_BACKEND=jax $(PYTHON) -m pytest tests/layers tests/ops

clean:
	rm -rf $(VENV) build *.egg-info
