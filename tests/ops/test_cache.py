import keras
import numpy as np
import pytest

from keras_selfattn.ops.cache import cache_writes_in_place, owned_caches, read_cache, update_cache

RNG = np.random.default_rng(0)
# batch 3, max_length 7, heads 2, dim 5; two rows written at position 4.
CACHE = RNG.normal(size=(3, 2, 7, 2, 5)).astype("float32")
KEY = RNG.normal(size=(3, 2, 2, 5)).astype("float32")
VALUE = RNG.normal(size=(3, 2, 2, 5)).astype("float32")


def _expected():
    expected = CACHE.copy()
    expected[:, 0, 4:6], expected[:, 1, 4:6] = KEY, VALUE
    return expected


def test_update_writes_the_rows_and_leaves_its_input():
    cache = keras.ops.convert_to_tensor(CACHE)
    updated = update_cache(cache, KEY, VALUE, 4)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(updated), _expected())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(cache), CACHE)
    keys, values = read_cache(updated)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keys), _expected()[:, 0])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(values), _expected()[:, 1])


@pytest.mark.backends("tensorflow", reason="in-place writes exist only in TensorFlow graphs")
@pytest.mark.parametrize("jit_compile", [False, True])
def test_writes_in_place_equal_the_scatter_and_spare_the_callers_cache(jit_compile):
    import tensorflow as tf

    @tf.function(jit_compile=jit_compile)
    def write(cache, index):
        with cache_writes_in_place():
            return update_cache(owned_caches(cache), KEY, VALUE, index)

    cache = tf.constant(CACHE)
    updated = write(cache, tf.constant(4))
    np.testing.assert_array_equal(updated.numpy(), _expected())
    np.testing.assert_array_equal(cache.numpy(), CACHE)
    ops_in_graph = {op.type for op in write.get_concrete_function(cache, tf.constant(4)).graph.get_operations()}
    assert ("InplaceUpdate" in ops_in_graph) is not jit_compile  # XLA has no InplaceUpdate
