"""A github3.py client that retries what GitHub asks to be retried, and errors a user can act on.

Every request github3 makes goes through `RetryingSession.request`, so retries cover all calls (reads,
check runs, comments, labels) in one place:

- 500/502/503/504 and dropped connections: exponential backoff (honouring `Retry-After` when sent);
- 429, and 403 answers that are rate limits (`X-RateLimit-Remaining: 0`, a `Retry-After`, or GitHub's
  "secondary rate limit" message): wait for `Retry-After` or until `X-RateLimit-Reset`.

Waits are bounded (`RetryPolicy.max_delay` for one wait, `max_total_wait` overall): a reset an hour away
is reported, not slept through. `sleep` and `clock` are injectable so tests never sleep.

github3 is imported inside functions: `import fasttrack.cli` must not pay for it.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fasttrack.errors import InputError

if TYPE_CHECKING:
    import requests

RETRY_STATUSES = frozenset({500, 502, 503, 504})
PUBLIC_HOSTS = frozenset({"https://github.com", "https://api.github.com"})
REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying. The defaults suit a CI job: at most 5 tries and 5 minutes of waiting."""

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 120.0  # the longest single wait we accept
    max_total_wait: float = 300.0
    jitter: float = 0.1  # fraction of each backoff added at random (0 in tests)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def backoff(self, attempt: int) -> float:
        delay: float = min(self.max_delay, self.base_delay * (2 ** attempt))
        return delay + (random.uniform(0, delay * self.jitter) if self.jitter else 0.0)


def _header_float(headers: Any, name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        return float(str(raw).strip())
    except ValueError:
        return None


def _retry_after(headers: Any, now: float) -> float | None:
    """Seconds from a `Retry-After` header (delta seconds or an HTTP date); None when absent or bad."""
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    text = str(raw).strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def is_rate_limited(response: requests.Response) -> bool:
    """True for a 429, or a 403 that is a primary or secondary rate limit (not a permission problem)."""
    if response.status_code == 429:
        return True
    if response.status_code != 403:
        return False
    headers = response.headers
    if headers.get("X-RateLimit-Remaining") == "0" or headers.get("Retry-After") is not None:
        return True
    try:
        text = response.text[:2000].lower()
    except Exception:
        return False
    return "rate limit" in text


def wait_for(response: requests.Response, attempt: int, policy: RetryPolicy) -> float | None:
    """How long to wait before retrying this answer; None when it must not be retried."""
    status = response.status_code
    now = policy.clock()
    if status in RETRY_STATUSES:
        after = _retry_after(response.headers, now)
        return after if after is not None else policy.backoff(attempt)
    if is_rate_limited(response):
        after = _retry_after(response.headers, now)
        if after is not None:
            return after
        reset = _header_float(response.headers, "X-RateLimit-Reset")
        if response.headers.get("X-RateLimit-Remaining") == "0" and reset is not None:
            return max(0.0, reset - now) + 1.0
        # A secondary limit without headers: GitHub asks for at least a minute.
        return max(60.0, policy.backoff(attempt))
    return None


def rate_limit_detail(response: requests.Response, clock: Callable[[], float] = time.time) -> str:
    """A short phrase saying when a rate limit lifts, from the answer's headers."""
    now = clock()
    after = _retry_after(response.headers, now)
    if after is None:
        reset = _header_float(response.headers, "X-RateLimit-Reset")
        if reset is not None:
            after = max(0.0, reset - now)
    if after is None:
        return "no reset time given"
    at = dt.datetime.fromtimestamp(now + after, tz=dt.UTC).strftime("%H:%M:%S UTC")
    return f"it lifts in {after:.0f} s (at {at})"


def make_session(policy: RetryPolicy | None = None) -> Any:
    """A github3 GitHubSession whose `request` retries per `policy`."""
    import requests
    from github3.session import GitHubSession

    pol = policy or RetryPolicy()

    class RetryingSession(GitHubSession):  # type: ignore[misc]
        retry_policy: RetryPolicy = pol

        def __init__(self) -> None:
            super().__init__(default_connect_timeout=10, default_read_timeout=60)
            self.retries: list[tuple[str, str, int | str, float]] = []  # (method, url, status, waited)
            self.gave_up: str | None = None

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            waited = 0.0
            attempt = 0
            while True:
                try:
                    response = super().request(method, url, *args, **kwargs)
                except (requests.ConnectionError, requests.Timeout) as exc:
                    delay = self.retry_policy.backoff(attempt)
                    if not self._may_wait(attempt, waited, delay):
                        raise
                    self.retries.append((method.upper(), url, type(exc).__name__, delay))
                else:
                    delay_or_none = wait_for(response, attempt, self.retry_policy)
                    if delay_or_none is None:
                        return response
                    if not self._may_wait(attempt, waited, delay_or_none):
                        self.gave_up = (f"{method.upper()} {url}: {response.status_code} after {attempt + 1} "
                                        f"tries; would need to wait {delay_or_none:.0f} s more")
                        return response
                    delay = delay_or_none
                    self.retries.append((method.upper(), url, response.status_code, delay))
                self.retry_policy.sleep(delay)
                waited += delay
                attempt += 1

        def _may_wait(self, attempt: int, waited: float, delay: float) -> bool:
            p = self.retry_policy
            within_budget = delay <= p.max_delay and waited + delay <= p.max_total_wait
            return attempt + 1 < p.max_attempts and within_budget

    return RetryingSession()


def token_from_env(var: str) -> str:
    """The token in environment variable `var`; a clear InputError when it is missing or malformed."""
    token = os.environ.get(var, "").strip()
    if not token:
        raise InputError(f"no GitHub token: ${var} is not set or is empty", field="--token-env",
                         fix=f"export {var}=<token> (in Actions: env: {var}: ${{{{ github.token }}}}) "
                             "or name another variable with --token-env")
    if any(c.isspace() or ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise InputError(f"${var} does not look like a GitHub token (it has spaces or control characters)",
                         field="--token-env", fix=f"put only the token in ${var}")
    return token


def connect(token: str, base_url: str | None = None, policy: RetryPolicy | None = None) -> Any:
    """A github3 client for github.com, or for GitHub Enterprise Server at `base_url` (its web URL).

    The token is installed as an App installation token: Actions' GITHUB_TOKEN is one, and github3
    only lets such tokens call the Checks API. A personal token still works for comments and labels;
    GitHub itself refuses it check runs (reported clearly by `github_errors`).
    """
    import github3
    from github3.session import AppInstallationTokenAuth

    session = make_session(policy)
    url = (base_url or "").rstrip("/")
    if url and url not in PUBLIC_HOSTS:
        if not re.match(r"^https?://[^\s/]+", url):
            raise InputError(f"--base-url {base_url!r} is not an http(s) URL", field="--base-url",
                             fix="give the GitHub Enterprise web URL, e.g. https://github.example.com")
        if url.endswith("/api/v3"):
            url = url[: -len("/api/v3")]
        gh = github3.GitHubEnterprise(url, token=token, session=session)
    else:
        gh = github3.GitHub(token=token, session=session)
    expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
    gh.session.auth = AppInstallationTokenAuth(token, expires)
    return gh


def clock_of(gh: Any) -> Callable[[], float]:
    """The clock of a client made by `connect` (its retry policy's), for messages about reset times."""
    policy = getattr(getattr(gh, "session", None), "retry_policy", None)
    return policy.clock if isinstance(policy, RetryPolicy) else time.time


def split_repo(repo: str) -> tuple[str, str]:
    if not REPO_RE.match(repo) or repo.split("/", 1)[1] in (".", ".."):
        raise InputError(f"{repo!r} is not OWNER/NAME", field="--github-repo",
                         fix="e.g. --github-repo vllm-project/vllm")
    owner, name = repo.split("/", 1)
    return owner, name


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


@contextmanager
def github_errors(action: str, token_env: str = "GITHUB_TOKEN", clock: Callable[[], float] = time.time,
                  forbidden_fix: str = "give the token the permission this needs (see docs/github.md)"
                  ) -> Iterator[None]:
    """Turn github3's exceptions into one-line InputErrors (exit 2) that say what to do."""
    import github3.exceptions as gx

    try:
        yield
    except gx.AuthenticationFailed as exc:
        raise InputError(f"GitHub rejected the token while {action} (401 {_one_line(exc.msg)}): it is "
                         f"missing, expired or revoked", field="--token-env",
                         fix=f"put a valid token in ${token_env}") from None
    except gx.ForbiddenError as exc:
        if exc.response is not None and is_rate_limited(exc.response):
            raise InputError(f"GitHub rate limit while {action}: {rate_limit_detail(exc.response, clock)}, "
                             "beyond the bounded wait", fix="run again after the reset") from None
        raise InputError(f"GitHub refused {action} (403 {_one_line(exc.msg)})", fix=forbidden_fix) from None
    except gx.NotFoundError as exc:
        raise InputError(f"not found while {action} (404 {_one_line(exc.msg)})",
                         fix="check --github-repo and --pr, and that the token can see the repository",
                         ) from None
    except gx.ServerError as exc:
        raise InputError(f"GitHub kept failing while {action} ({exc.code} {_one_line(exc.msg)}) after "
                         "retries", fix="run again later") from None
    except gx.IncompleteResponse as exc:
        raise InputError(f"GitHub's answer while {action} lacked a field github3.py needs "
                         f"({exc.exception!r})",
                         fix="check --base-url points at a GitHub API") from None
    except gx.GitHubError as exc:
        code = getattr(exc, "code", "?")
        if code == 429 and exc.response is not None:
            raise InputError(f"GitHub rate limit while {action}: {rate_limit_detail(exc.response, clock)}, "
                             "beyond the bounded wait", fix="run again after the reset") from None
        raise InputError(f"GitHub answered {code} while {action}: {_one_line(exc)}") from None
    except gx.MissingAppInstallationAuthentication as exc:  # pragma: no cover - connect() installs it
        raise InputError(f"{action}: {exc}") from None
    except gx.TransportError as exc:
        raise InputError(f"could not reach GitHub while {action}: {_one_line(exc)}",
                         fix="check the network and --base-url") from None
