"""The framed binary protocol between `CApiSavedModel` and its C program.

Everything is little-endian. A string is its u64 length and its bytes. A tensor is
`u32 TF_DataType, u32 rank, i64 dims[rank]`, then for strings one string per element,
else one string holding the raw values. A status is `u32 TF_Code` and a message string.
Requests start with a u32 message code (`RUN`, `LOAD_TEST`, `HAS_OPS`, `QUIT`); see
`c_api_loader.c` for each message's body and reply.
"""

import struct

import numpy as np

# TF_Code values (tensorflow/c/tf_status.h), by number.
STATUS_CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)

# TF_DataType (= DataType proto) number -> (dtype name, TensorProto value field).
STRING = 7
DTYPES = {
    1: ("float32", "float_val"), 2: ("float64", "double_val"), 3: ("int32", "int_val"),
    4: ("uint8", "int_val"), 5: ("int16", "int_val"), 6: ("int8", "int_val"),
    STRING: ("string", "string_val"), 9: ("int64", "int64_val"), 10: ("bool", "bool_val"),
    17: ("uint16", "int_val"), 19: ("float16", "half_val"), 22: ("uint32", "uint32_val"),
    23: ("uint64", "uint64_val"),
}
DTYPE_NUMBERS = {name: number for number, (name, _) in DTYPES.items()}

# Message codes of the requests.
RUN, LOAD_TEST, HAS_OPS, QUIT = 1, 2, 3, 4


class ServingError(Exception):
    """A request the server would refuse, or a failed run.

    Attributes:
        code: the TF_Code name, e.g. "INVALID_ARGUMENT".
        message: the error text (TensorFlow's own for failed runs).
    """

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def numpy_dtype(dtype_name):
    """The numpy dtype of a dtype name of `DTYPES`; object for "string"."""
    return np.dtype(object if dtype_name == "string" else dtype_name)


def as_bytes(value):
    """One element of a string tensor as bytes (str as UTF-8)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.bytes_):
        return bytes(value)
    raise TypeError(f"a string tensor holds bytes or str, got {type(value).__name__}")


def pack_string(value):
    return struct.pack("<Q", len(value)) + value


def pack_tensor(array, dtype_name):
    number = DTYPE_NUMBERS[dtype_name]
    header = struct.pack(f"<II{array.ndim}q", number, array.ndim, *array.shape)
    if number == STRING:
        return header + b"".join(pack_string(as_bytes(item)) for item in array.reshape(-1))
    data = np.ascontiguousarray(array).tobytes()
    return header + struct.pack("<Q", len(data)) + data


def pack_session_run(feeds, fetches):
    """The body of a RUN or LOAD_TEST request.

    Args:
        feeds: `[(graph tensor name, array, dtype name)]`.
        fetches: graph tensor names of the outputs.
    """
    packed_feeds = [
        pack_string(name.encode()) + pack_tensor(array, dtype_name)
        for name, array, dtype_name in feeds
    ]
    packed_fetches = [pack_string(name.encode()) for name in fetches]
    return (
        struct.pack("<I", len(packed_feeds)) + b"".join(packed_feeds)
        + struct.pack("<I", len(packed_fetches)) + b"".join(packed_fetches)
    )


def pack_has_ops(names):
    """A HAS_OPS request for the op names."""
    return struct.pack("<II", HAS_OPS, len(names)) + b"".join(
        pack_string(name.encode()) for name in names
    )


class Reader:
    """Reads replies from the loader's stdout; a short read means the process died.

    Args:
        stream: the binary stream to read.
        on_eof: called on a short read; it must raise.
    """

    def __init__(self, stream, on_eof):
        self._stream = stream
        self._on_eof = on_eof

    def exact(self, size):
        data = self._stream.read(size) if size else b""
        if len(data) != size:
            self._on_eof()
        return data

    def u32(self):
        return struct.unpack("<I", self.exact(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.exact(8))[0]

    def string(self):
        return self.exact(self.u64())

    def status(self):
        number = self.u32()
        code = STATUS_CODES[number] if number < len(STATUS_CODES) else f"CODE_{number}"
        return code, self.string().decode("utf-8", "replace")

    def tensor(self):
        number, rank = struct.unpack("<II", self.exact(8))
        shape = struct.unpack(f"<{rank}q", self.exact(8 * rank))
        if number == STRING:
            count = int(np.prod(shape, dtype=np.int64))
            values = np.empty(count, dtype=object)
            for i in range(count):
                values[i] = self.string()
            return values.reshape(shape)
        data = self.string()
        if number not in DTYPES:
            raise ServingError("UNIMPLEMENTED", f"output dtype number {number} is not supported")
        return np.frombuffer(data, dtype=numpy_dtype(DTYPES[number][0])).reshape(shape).copy()
