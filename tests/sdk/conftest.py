"""conftest for the official queen-mq 2.6.0 test suite, copied next to the
downloaded test files by tests/sdk/run.py. The upstream conftest is not in the
sdist (and its cleanup needs PostgreSQL); the suite only needs `client`."""

import os

import pytest

from queen import Queen


@pytest.fixture
async def client():
    queen = Queen(os.environ["QUEEN_SERVER_URL"])
    try:
        yield queen
    finally:
        await queen.close()
