"""Distribution and resumable training, each in fresh processes: devices,
clusters and SIGKILL are per process."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

# Run from the repository root, so the program imports this checkout as the tests do.
PROGRAM = "tests.training.fit_program"
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow",
        reason="tf.distribute is TensorFlow's",
    ),
]


def _run(output, *flags, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", PROGRAM, "--output", str(output), *flags],
        cwd=REPOSITORY,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _finish(process, timeout=300):
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr.decode()[-3000:]


def _results(output, strategy="none", family="music"):
    data = np.load(output / f"{strategy}_{family}.npz")
    return data["losses"], [data[key] for key in sorted(data.files) if key != "losses"]


def _assert_same_training(first, second, atol):
    first_losses, first_weights = first
    second_losses, second_weights = second
    np.testing.assert_allclose(first_losses, second_losses, atol=atol)
    for a, b in zip(first_weights, second_weights):
        np.testing.assert_allclose(a, b, atol=atol * 10)


FAMILIES = ["music", "graph"]


@pytest.fixture(scope="module")
def one_and_two_devices(tmp_path_factory):
    """The folder of each family's one-device run and `MirroredStrategy` run,
    all in one process."""
    output = tmp_path_factory.mktemp("one_and_two_devices")
    _finish(_run(output, "--family", *FAMILIES, "--strategy", "none", "mirrored"))
    return output


@pytest.fixture(scope="module")
def single_device(one_and_two_devices):
    return _results(one_and_two_devices)


@pytest.mark.parametrize("family", FAMILIES)
def test_mirrored_strategy_on_two_devices_matches_one_device(family, one_and_two_devices):
    _assert_same_training(
        _results(one_and_two_devices, "none", family), _results(one_and_two_devices, "mirrored", family), atol=1e-5
    )


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_multi_worker_mirrored_strategy_matches_one_device(single_device, tmp_path):
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    output = tmp_path / "multi_worker"
    processes = []
    for index in range(2):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(
            _run(output, "--strategy", "multi_worker", env={"TF_CONFIG": json.dumps(config)})
        )
    for process in processes:
        _finish(process)
    _assert_same_training(single_device, _results(output, "multi_worker"), atol=1e-5)


def test_training_killed_mid_epoch_resumes_to_the_same_weights(single_device, tmp_path):
    backup = str(tmp_path / "backup")
    output = tmp_path / "resumed"
    interrupted = _run(output, "--backup_dir", backup, "--pause_at", "1:3")
    deadline = time.time() + 300
    while not os.path.exists(output / "paused"):
        assert interrupted.poll() is None, interrupted.stderr.read().decode()[-3000:]
        assert time.time() < deadline, "the run never reached the pause point"
        time.sleep(0.2)
    os.kill(interrupted.pid, signal.SIGKILL)
    interrupted.wait()
    assert interrupted.returncode == -signal.SIGKILL
    assert os.path.isdir(backup), "no backup was written before the kill"
    _finish(_run(output, "--backup_dir", backup))
    _, resumed_weights = _results(output)
    _, uninterrupted_weights = single_device
    for a, b in zip(resumed_weights, uninterrupted_weights):
        np.testing.assert_allclose(a, b, atol=1e-6)
