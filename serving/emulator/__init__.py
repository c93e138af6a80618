"""TensorFlow Serving, emulated for the tests and benchmarks; not part of the package.

`c_api_loader.CApiSavedModel` loads a SavedModel through TensorFlow's C API (the
server's loader; a C program built with gcc on first use) and answers `run`,
gRPC `PredictRequest`s and REST JSON bodies with the server's request rules.

The REST JSON rules it shares with the client are `serving.predict_requests`'s.
"""
