"""Retry decisions (which answers are retried, how long to wait, the bounds) and token handling."""

from __future__ import annotations

import email.utils

import pytest
import requests

from fasttrack.errors import InputError
from fasttrack.github.client import RetryPolicy, is_rate_limited, split_repo, token_from_env, wait_for

NOW = 1_800_000_000.0


def _resp(status: int, headers: dict[str, str] | None = None, body: str = "{}") -> requests.Response:
    r = requests.Response()
    r.status_code = status
    r.headers.update(headers or {})
    r._content = body.encode()
    return r


POLICY = RetryPolicy(clock=lambda: NOW, jitter=0, base_delay=1.0)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_back_off_exponentially(status: int) -> None:
    assert [wait_for(_resp(status), a, POLICY) for a in range(4)] == [1.0, 2.0, 4.0, 8.0]


def test_backoff_is_capped_and_jitter_bounded() -> None:
    p = RetryPolicy(clock=lambda: NOW, jitter=0.1, base_delay=1.0, max_delay=10.0)
    for attempt in range(8):
        d = wait_for(_resp(502), attempt, p)
        assert d is not None and min(10.0, 2.0**attempt) <= d <= 1.1 * min(10.0, 2.0**attempt)


def test_primary_rate_limit_waits_for_reset() -> None:
    r = _resp(403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 42)})
    assert is_rate_limited(r) and wait_for(r, 0, POLICY) == 43.0


def test_retry_after_seconds_and_http_date() -> None:
    assert wait_for(_resp(429, {"Retry-After": "12"}), 0, POLICY) == 12.0
    date = email.utils.formatdate(NOW + 90, usegmt=True)
    assert wait_for(_resp(403, {"Retry-After": date}), 0, POLICY) == pytest.approx(90.0)
    assert wait_for(_resp(503, {"Retry-After": "5"}), 3, POLICY) == 5.0


def test_secondary_rate_limit_without_headers_waits_a_minute() -> None:
    r = _resp(403, body='{"message": "You have exceeded a secondary rate limit"}')
    assert is_rate_limited(r) and wait_for(r, 0, POLICY) == 60.0


@pytest.mark.parametrize(
    "status,body",
    [
        (403, '{"message": "Resource not accessible by integration"}'),
        (401, '{"message": "Bad credentials"}'),
        (404, "{}"),
        (422, "{}"),
        (200, "{}"),
        (201, "{}"),
    ],
)
def test_other_answers_are_not_retried(status: int, body: str) -> None:
    assert wait_for(_resp(status, body=body), 0, POLICY) is None


def test_session_gives_up_within_bounds(httpserver: object) -> None:
    """Five 502s: four bounded sleeps, then the answer is returned (github3 turns it into ServerError)."""
    from pytest_httpserver import HTTPServer

    assert isinstance(httpserver, HTTPServer)
    httpserver.expect_request("/flaky").respond_with_data("bad gateway", status=502)
    sleeps: list[float] = []
    from fasttrack.github.client import make_session

    s = make_session(RetryPolicy(sleep=sleeps.append, clock=lambda: NOW, jitter=0, max_attempts=5))
    r = s.get(httpserver.url_for("/flaky"))
    assert r.status_code == 502 and sleeps == [1.0, 2.0, 4.0, 8.0] and len(httpserver.log) == 5
    assert s.gave_up and "502 after 5 tries" in s.gave_up

    sleeps.clear()
    httpserver.clear_log()
    short = make_session(RetryPolicy(sleep=sleeps.append, clock=lambda: NOW, jitter=0, max_total_wait=2.5))
    assert short.get(httpserver.url_for("/flaky")).status_code == 502
    assert sleeps == [1.0] and len(httpserver.log) == 2  # 1 + 2 would pass the 2.5 s budget


def test_connection_errors_are_retried_then_raised() -> None:
    from fasttrack.github.client import make_session

    sleeps: list[float] = []
    s = make_session(RetryPolicy(sleep=sleeps.append, clock=lambda: NOW, jitter=0, max_attempts=3))
    with pytest.raises(requests.ConnectionError):
        s.get("http://127.0.0.1:9/nothing-listens-here")
    assert sleeps == [1.0, 2.0]


def test_token_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T1", "  ghs_abc  ")
    assert token_from_env("T1") == "ghs_abc"
    monkeypatch.setenv("T2", "")
    with pytest.raises(InputError, match=r"\$T2 is not set or is empty"):
        token_from_env("T2")
    monkeypatch.setenv("T3", "ghs abc")
    with pytest.raises(InputError, match="does not look like a GitHub token"):
        token_from_env("T3")


@pytest.mark.parametrize(
    "bad", ["acme", "acme/", "/engine", "acme/engine/x", "ac me/engine", "acme/../x/y", "acme/..", "acme/."]
)
def test_split_repo_rejects_bad_names(bad: str) -> None:
    with pytest.raises(InputError, match="OWNER/NAME"):
        split_repo(bad)
    assert split_repo("vllm-project/vllm") == ("vllm-project", "vllm")
