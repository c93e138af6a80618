import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts in float32 with fixed seeds."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")


def pytest_runtest_setup(item):
    """Skips a test marked `backends(...)` on a backend it does not name."""
    marker = item.get_closest_marker("backends")
    if marker is not None and keras.backend.backend() not in marker.args:
        reason = marker.kwargs.get("reason", "")
        pytest.skip(f"runs on {', '.join(marker.args)} only{': ' + reason if reason else ''}")
