"""Fixtures of the head's tests: Ray's job API on loopback (tests/test_archive.py's), moto."""
from tests.moto_server import moto_server  # noqa: F401 - a fixture
from tests.test_archive import ray  # noqa: F401 - a fixture
