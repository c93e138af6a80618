import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402


def _lower_every_jax_program_in_one_mlir_context():
    """JAX lowers each program in a new MLIR context, loading every dialect
    anew. The tests run thousands of eager ops at new shapes, each lowered and
    compiled on its own: with one context, the JAX test stage took 413 s against
    689 s on one core, and tests/layers/test_local_attention_2d.py with
    test_relative_multi_head_attention.py 1.9 GB against 4.4 GB at most. Where
    JAX's internals differ, its default stays."""
    import functools

    try:
        from jax._src.interpreters import mlir
    except ImportError:
        return
    if callable(getattr(mlir, "make_ir_context", None)):
        mlir.make_ir_context = functools.lru_cache(maxsize=1)(mlir.make_ir_context)


if keras.backend.backend() == "jax":
    _lower_every_jax_program_in_one_mlir_context()

# Tracing graphs and lowering programs allocate millions of small objects that
# live as long as their graph or program, and Python collects its youngest objects
# every 700 allocations by default. Every 50,000: TensorFlow's tests/models took
# 185 s against 207 s, JAX's tests/generation 117 s against 124 s, on one core each.
gc.set_threshold(50_000, 20, 20)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts in float32 with fixed seeds and, on TensorFlow,
    leaves no Keras global state behind (tests/generation and tests/models
    ran in 290 s instead of 330 s with it cleared; on PyTorch clearing it
    slowed the run). No `gc.collect` each time."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    if keras.backend.backend() == "tensorflow":
        keras.backend.clear_session(free_memory=False)


def pytest_runtest_setup(item):
    """Skips a test marked `backends(...)` on a backend it does not name."""
    marker = item.get_closest_marker("backends")
    if marker is not None and keras.backend.backend() not in marker.args:
        reason = marker.kwargs.get("reason", "")
        pytest.skip(f"runs on {', '.join(marker.args)} only{': ' + reason if reason else ''}")


@pytest.fixture(scope="session")
def serving_exports(tmp_path_factory):
    """Exported small models of every family, made once per test session on
    first use: `{"music": (model, path), "translation": (model, path,
    tokenizer bytes), "images": (model, path)}`."""
    from tests.export import exported_models

    base = tmp_path_factory.mktemp("serving_exports")

    class Exports(dict):
        def __missing__(self, family):
            keras.utils.set_random_seed(0)  # the same weights whichever test asks first
            self[family] = getattr(exported_models, f"exported_{family}")(base)
            return self[family]

    return Exports()
