"""The lock tests' fixture: a real redis-server on 127.0.0.1, one per test (tests/peers_redis.py)."""

import pytest
from peers_redis import start_redis


@pytest.fixture
def redis_server(tmp_path):
    srv = start_redis(tmp_path)
    yield srv
    srv.stop()
