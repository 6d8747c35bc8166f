"""conftest for the official queen-mq 2.6.0 test suite, copied next to the
downloaded test files by tests/sdk/run.py. The upstream conftest is not in the
sdist (and its cleanup needs PostgreSQL); the suite only needs `client`.

With QUEEN_SDK_WIRE=binary (run.py --binary) the client sends and reads the binary
forms: QPB1 frames pushes, QTB1 transactions, QPF1 pop answers (zstd from the
`zstandard` package, installed with queen-mq[zstd])."""

import os

import pytest

from queen import Queen


@pytest.fixture
async def client():
    wire = {}
    if os.environ.get("QUEEN_SDK_WIRE") == "binary":
        wire = {"binary_push": True, "push_compression": True, "framed_pop": True}
    queen = Queen(os.environ["QUEEN_SERVER_URL"], **wire)
    try:
        yield queen
    finally:
        await queen.close()
