"""Builds the C API loader program and the settings it runs with.

The program (`c_api_loader.c`) is compiled with gcc against the C API headers and
libraries inside the pip `tensorflow` wheel, once per source and TensorFlow version;
the tensorflow-text op libraries it loads and the session config (XLA JIT off, as
TensorFlow Serving runs) are found and made here without importing TensorFlow.
"""

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

SOURCE_PATH = Path(__file__).with_name("c_api_loader.c")


def _package_dir(name):
    """The directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the `{name}` package is required for the C API loader")
    return Path(list(spec.submodule_search_locations)[0])


def tensorflow_paths():
    """`(include_dir, lib_dir)` of the pip `tensorflow` wheel.

    The same directories as `tf.sysconfig.get_include()` and `tf.sysconfig.get_lib()`,
    found without importing TensorFlow.
    """
    lib_dir = _package_dir("tensorflow")
    return lib_dir / "include", lib_dir


def op_libraries():
    """The tensorflow-text op libraries (`_*.so` under its `python/` folder), sorted."""
    text_dir = _package_dir("tensorflow_text")
    return sorted(str(path) for path in (text_dir / "python").rglob("_*.so"))


def _cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "keras_selfattn" / "c_api_loader"


def build_loader(cache_dir=None):
    """Builds the loader program with gcc, once per source and TensorFlow version.

    Args:
        cache_dir: where builds are kept; defaults to
            `$XDG_CACHE_HOME/keras_selfattn/c_api_loader` (`~/.cache/...`).

    Returns:
        The path of the executable, `<cache_dir>/<hash>/c_api_loader`.
    """
    include_dir, lib_dir = tensorflow_paths()
    source = SOURCE_PATH.read_bytes()
    key = hashlib.sha256(
        source + importlib.metadata.version("tensorflow").encode() + str(lib_dir).encode()
    ).hexdigest()[:16]
    binary = Path(cache_dir or _cache_root()) / key / "c_api_loader"
    if binary.exists():
        return binary
    compiler = os.environ.get("CC", "gcc")
    if shutil.which(compiler) is None:
        raise RuntimeError(f"the C API loader needs a C compiler; `{compiler}` was not found")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"c_api_loader.{os.getpid()}.partial")
    command = [
        compiler, "-O2", "-std=c11", "-pthread", f"-I{include_dir}", str(SOURCE_PATH),
        "-o", str(partial), f"-L{lib_dir}", "-l:libtensorflow_cc.so.2",
        "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{lib_dir}",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"building the C API loader failed:\n{' '.join(command)}\n{result.stderr}"
        )
    os.replace(partial, binary)  # atomic, so concurrent builders agree
    return binary


def session_config():
    """The serialized ConfigProto the loader runs with: XLA JIT off, as the server sets it."""
    from tensorflow.core.protobuf import config_pb2

    config = config_pb2.ConfigProto()
    config.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return config.SerializeToString()


def child_env(extra=None):
    """The loader process's environment: this one, quiet logs, XLA auto-clustering off.

    Args:
        extra: variables that override these.
    """
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The server's default: no auto-clustering; the session config sets JIT OFF too.
    env["TF_XLA_FLAGS"] = "--tf_xla_auto_jit=0 --tf_xla_cpu_global_jit=false"
    env.update(extra or {})
    return env
