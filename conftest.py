"""pytest puts this folder, the repository root, on `sys.path`: the tests import
`tests.*`, `recipes.*` and `serving.*` from here. The fixtures are tests/conftest.py's."""
