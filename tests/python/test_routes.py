"""docs/api.md's route table is true of the real binary.

Every row of the table is sent to a fresh broker: a row marked "served" must reach its handler
(whatever the handler then says about an empty or unknown request, it is never 404
no_such_route nor 501 unsupported); a row marked "501" must answer 501 with code
`unsupported` and change nothing. The table is the documentation users read, so a route that
starts being served, or stops, fails here until the doc says so.
"""

import re
from pathlib import Path

import pytest

import queen_api

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROW = re.compile(r"^\| [^|]+ \| `(GET|POST|DELETE) ([^`]+)`[^|]* \| ([^|]+) \|")
PLACEHOLDERS = {
    "{q}": "routes-q",
    "{p}": "routes-p",
    "{g}": "routes-g",
    "{pid}": "00000000-0000-0000-0000-000000000000",
    "{txn}": "routes-txn",
    "{key…}": "routes-key",
    "{leaseId}": "routes-lease",
    "{name}": "routes-name",
}
KNOWN = "routes-known"


def table() -> list[tuple[str, str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            method, path, status = m.group(1), m.group(2), m.group(3).strip()
            for k, v in PLACEHOLDERS.items():
                path = path.replace(k, v)
            assert "{" not in path, f"unknown placeholder in docs/api.md: {line}"
            rows.append((method, path, status))
    return rows


ROWS = table()


def test_the_table_lists_every_route_the_client_sends():
    # 61 templates of spec §2.1 (23-30 and 31-33 one row each) + /ready, /metrics/prometheus
    # and the DLQ purge.
    assert len(ROWS) == 64, len(ROWS)
    assert all(s.startswith("served") or s.startswith("501") for _, _, s in ROWS), ROWS


def send(http, method: str, path: str):
    if method == "POST":
        return http.post(path, json={})
    if method == "DELETE":
        return http.delete(path)
    return http.get(path)


@pytest.fixture
def seeded(broker, http):
    [result] = queen_api.push(http, broker.url, [queen_api.item(KNOWN, "Default", "known-1", {"n": 1})])
    assert queen_api.accepted(result), result
    return broker


def still_one_message(http, base: str) -> None:
    messages = queen_api.pop(http, base, KNOWN, group="routes-check", mode="all", wait=False)
    assert [m["transactionId"] for m in messages] == ["known-1"]


# Outside the table (no official client sends them; docs/api.md names them above the table):
# the reference dashboard's other analytics series.
OUTSIDE = [("GET", "/api/v1/analytics/queue-lag"), ("GET", "/api/v1/analytics/postgres-stats")]


@pytest.mark.parametrize("method,path", [(m, p) for m, p, s in ROWS if s.startswith("501")] + OUTSIDE)
def test_unbuilt_routes_answer_unsupported_and_change_nothing(seeded, http, method, path):
    res = send(http, method, path)
    assert res.status_code == 501, f"{method} {path}: {res.status_code} {res.text[:300]}"
    body = res.json()
    assert body.get("code") == "unsupported", body
    assert path in body.get("error", ""), body
    still_one_message(http, seeded.url)


def test_served_routes_reach_their_handler(seeded, http):
    for method, path, status in ROWS:
        if not status.startswith("served"):
            continue
        res = send(http, method, path)
        body = res.json() if "json" in res.headers.get("content-type", "") else None
        # Some reads answer a bare array (the lagging groups).
        code = body.get("code") if isinstance(body, dict) else None
        assert res.status_code != 501 and code not in ("unsupported", "no_such_route"), (
            f"{method} {path}: {res.status_code} {res.text[:300]}"
        )
    still_one_message(http, seeded.url)


def test_a_path_no_client_sends_is_no_such_route(broker, http):
    res = http.get("/api/v1/no-such-thing")
    assert res.status_code == 404
    assert res.json() == {"code": "no_such_route", "error": "not found", "path": "/api/v1/no-such-thing"}
