"""A fake GitHub (the subset of the REST API the publisher uses) on 127.0.0.1, served by pytest-httpserver.

It answers as GitHub Enterprise does under /api/v3 (so `--base-url` is exercised), keeps state (comments,
labels, check runs with their annotations), checks the token, paginates with Link headers, and can be told
to fail the next matching request (502, 403 rate limit, ...). Tests assert on `httpserver.log`, the
requests it really received.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pytest
from werkzeug import Request, Response

from fasttrack.findings import Finding, Severity
from fasttrack.verdict import ChangedFile, ChangeStatus, Verdict

TOKEN = "ghs_test_installation_token"
OWNER, NAME, PR = "acme", "engine", 7
HEAD = "a" * 40
BASE = "b" * 40
BOT = "github-actions[bot]"
WRITE_METHODS = {"POST", "PATCH", "PUT", "DELETE"}


@pytest.fixture(scope="session")
def httpserver_listen_address() -> tuple[str, int]:
    return ("127.0.0.1", 0)


def _user(api: str, web: str, login: str, uid: int = 1, kind: str = "User") -> dict[str, Any]:
    u = f"{api}/users/{login}"
    return {
        "login": login,
        "id": uid,
        "type": kind,
        "url": u,
        "html_url": f"{web}/{login}",
        "avatar_url": "",
        "gravatar_id": "",
        "events_url": u + "/events{/privacy}",
        "followers_url": u + "/followers",
        "following_url": u + "/following{/other_user}",
        "gists_url": u + "/gists{/gist_id}",
        "organizations_url": u + "/orgs",
        "received_events_url": u + "/received_events",
        "repos_url": u + "/repos",
        "starred_url": u + "/starred{/owner}{/repo}",
        "subscriptions_url": u + "/subscriptions",
        "site_admin": False,
    }


def _repo(api: str, web: str, owner: str, name: str) -> dict[str, Any]:
    r = f"{api}/repos/{owner}/{name}"
    keys = [
        "archive_url",
        "assignees_url",
        "blobs_url",
        "branches_url",
        "collaborators_url",
        "comments_url",
        "commits_url",
        "compare_url",
        "contents_url",
        "contributors_url",
        "deployments_url",
        "downloads_url",
        "events_url",
        "forks_url",
        "git_commits_url",
        "git_refs_url",
        "git_tags_url",
        "hooks_url",
        "issue_comment_url",
        "issue_events_url",
        "issues_url",
        "keys_url",
        "labels_url",
        "languages_url",
        "merges_url",
        "milestones_url",
        "notifications_url",
        "pulls_url",
        "releases_url",
        "stargazers_url",
        "statuses_url",
        "subscribers_url",
        "subscription_url",
        "tags_url",
        "teams_url",
        "trees_url",
    ]
    out: dict[str, Any] = {k: f"{r}/{k.removesuffix('_url')}" for k in keys}
    out.update(
        id=42,
        name=name,
        full_name=f"{owner}/{name}",
        owner=_user(api, web, owner, 2, "Organization"),
        private=False,
        fork=False,
        description="fake",
        url=r,
        html_url=f"{web}/{owner}/{name}",
    )
    return out


def _full_repo(api: str, web: str, owner: str, name: str) -> dict[str, Any]:
    """`GET /repos/{owner}/{name}`: the short payload plus what github3's Repository requires."""
    out = _repo(api, web, owner, name)
    out.update(
        archived=False,
        clone_url=f"{web}/{owner}/{name}.git",
        created_at="2020-01-01T00:00:00Z",
        default_branch="main",
        forks_count=0,
        git_url="",
        has_downloads=True,
        has_issues=True,
        has_pages=False,
        has_projects=False,
        has_wiki=False,
        homepage=None,
        language="Python",
        mirror_url=None,
        network_count=0,
        open_issues_count=1,
        pushed_at="2026-01-01T00:00:00Z",
        size=1,
        ssh_url="",
        stargazers_count=0,
        subscribers_count=0,
        svn_url="",
        updated_at="2026-01-01T00:00:00Z",
        watchers_count=0,
    )
    return out


@dataclass
class FakeGitHub:
    api: str
    web: str
    head_sha: str = HEAD
    files: list[dict[str, Any]] = field(default_factory=list)
    changed_files: int | None = None  # what the PR payload claims (default: len(files))
    commits: list[str] = field(default_factory=lambda: [HEAD])
    comments: list[dict[str, Any]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    annotations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    failures: list[tuple[str, re.Pattern[str], Response]] = field(default_factory=list)
    token: str = TOKEN
    me_login: str = "octocat"
    author: str = BOT  # who the token is: new comments are theirs
    head_label: str = "contributor:kimi-fused-moe"
    artifacts: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # run id -> listing entries
    artifact_zips: dict[int, bytes] = field(default_factory=dict)  # artifact id -> zip bytes
    download_token: str | None = None  # a second token accepted (e.g. actions: read only)
    _next_id: int = 1000

    def add_artifact(
        self,
        run_id: int,
        data: bytes,
        *,
        name: str = "fasttrack-verdict",
        size: int | None = None,
        head_sha: str | None = None,
    ) -> int:
        aid = self.new_id()
        self.artifact_zips[aid] = data
        self.artifacts.setdefault(run_id, []).append(
            {
                "id": aid,
                "name": name,
                "size_in_bytes": len(data) if size is None else size,
                "expired": False,
                "archive_download_url": f"{self.api}/repos/{OWNER}/{NAME}/actions/artifacts/{aid}/zip",
                "workflow_run": {"id": run_id, "head_sha": head_sha or self.head_sha},
            }
        )
        return aid

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int,
        headers: dict[str, str] | None = None,
        message: str = "failure",
    ) -> None:
        self.failures.append(
            (
                method,
                re.compile(path_regex),
                Response(
                    json.dumps({"message": message}),
                    status=status,
                    headers=headers or {},
                    content_type="application/json",
                ),
            )
        )

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    # ---- payloads ----
    def pull(self) -> dict[str, Any]:
        r = f"{self.api}/repos/{OWNER}/{NAME}"
        p = f"{r}/pulls/{PR}"
        repo = _repo(self.api, self.web, OWNER, NAME)
        fork = _repo(self.api, self.web, "contributor", NAME)
        return {
            "url": p,
            "id": 9,
            "number": PR,
            "state": "open",
            "title": "Fused MoE for Kimi",
            "body": "",
            "body_html": "",
            "body_text": "",
            "html_url": f"{self.web}/{OWNER}/{NAME}/pull/{PR}",
            "diff_url": p + ".diff",
            "patch_url": p + ".patch",
            "issue_url": f"{r}/issues/{PR}",
            "commits_url": p + "/commits",
            "review_comments_url": p + "/comments",
            "review_comment_url": r + "/pulls/comments{/number}",
            "comments_url": f"{r}/issues/{PR}/comments",
            "statuses_url": f"{r}/statuses/{self.head_sha}",
            "active_lock_reason": None,
            "assignee": None,
            "assignees": [],
            "closed_at": None,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-02T00:00:00Z",
            "merged_at": None,
            "merge_commit_sha": None,
            "locked": False,
            "user": _user(self.api, self.web, "contributor", 5),
            "_links": {
                "self": {"href": p},
                "comments": {"href": f"{r}/issues/{PR}/comments"},
                "issue": {"href": f"{r}/issues/{PR}"},
            },
            "head": {
                "ref": "kimi-fused-moe",
                "label": "contributor:kimi-fused-moe",
                "sha": self.head_sha,
                "user": _user(self.api, self.web, "contributor", 5),
                "repo": fork,
            },
            "base": {
                "ref": "main",
                "label": f"{OWNER}:main",
                "sha": BASE,
                "user": _user(self.api, self.web, OWNER, 2),
                "repo": repo,
            },
            "additions": 10,
            "deletions": 2,
            "author_association": "CONTRIBUTOR",
            "comments": len(self.comments),
            "commits": len(self.commits),
            "draft": False,
            "mergeable": True,
            "mergeable_state": "clean",
            "merged": False,
            "merged_by": None,
            "review_comments": 0,
            "requested_teams": [],
            "requested_reviewers": [],
            "changed_files": len(self.files) if self.changed_files is None else self.changed_files,
        }

    def issue(self) -> dict[str, Any]:
        r = f"{self.api}/repos/{OWNER}/{NAME}"
        i = f"{r}/issues/{PR}"
        return {
            "url": i,
            "id": 9,
            "number": PR,
            "title": "Fused MoE for Kimi",
            "body": "",
            "body_html": "",
            "body_text": "",
            "state": "open",
            "assignee": None,
            "assignees": [],
            "closed_at": None,
            "closed_by": None,
            "comments": len(self.comments),
            "comments_url": i + "/comments",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-02T00:00:00Z",
            "events_url": i + "/events",
            "html_url": f"{self.web}/{OWNER}/{NAME}/pull/{PR}",
            "labels": [self.label(n) for n in self.labels],
            "labels_url": i + "/labels{/name}",
            "locked": False,
            "milestone": None,
            "user": _user(self.api, self.web, "contributor", 5),
            "pull_request": {"url": f"{r}/pulls/{PR}"},
        }

    def label(self, name: str) -> dict[str, Any]:
        return {"name": name, "color": "ededed", "url": f"{self.api}/repos/{OWNER}/{NAME}/labels/{name}"}

    def comment(self, cid: int, body: str, login: str) -> dict[str, Any]:
        r = f"{self.api}/repos/{OWNER}/{NAME}"
        kind = "Bot" if login.endswith("[bot]") else "User"
        return {
            "url": f"{r}/issues/comments/{cid}",
            "id": cid,
            "body": body,
            "body_html": "",
            "body_text": "",
            "author_association": "NONE",
            "created_at": "2026-01-03T00:00:00Z",
            "updated_at": "2026-01-03T00:00:00Z",
            "html_url": f"{self.web}/{OWNER}/{NAME}/pull/{PR}",
            "issue_url": f"{r}/issues/{PR}",
            "user": _user(self.api, self.web, login, 77, kind),
        }

    def add_comment(self, body: str, login: str) -> int:
        cid = self.new_id()
        self.comments.append(self.comment(cid, body, login))
        return cid

    def check_run(self, rid: int) -> dict[str, Any]:
        run = self.check_runs[rid]
        r = f"{self.api}/repos/{OWNER}/{NAME}"
        out = run.get("output") or {}
        return {
            "url": f"{r}/check-runs/{rid}",
            "id": rid,
            "html_url": f"{self.web}/runs/{rid}",
            "status": run.get("status", "queued"),
            "conclusion": run.get("conclusion"),
            "started_at": run.get("started_at"),
            "completed_at": run.get("completed_at"),
            "head_sha": run["head_sha"],
            "name": run["name"],
            "external_id": None,
            "pull_requests": [],
            "check_suite": {"id": 5},
            "app": {
                "id": 15368,
                "name": "GitHub Actions",
                "description": "",
                "external_url": self.web,
                "html_url": f"{self.web}/apps/github-actions",
                "owner": _user(self.api, self.web, "github"),
            },
            "output": {
                "title": out.get("title"),
                "summary": out.get("summary"),
                "text": None,
                "annotations_count": len(self.annotations.get(rid, [])),
                "annotations_url": f"{r}/check-runs/{rid}/annotations",
            },
        }

    # ---- the handler ----
    def handle(self, request: Request) -> Response:
        for i, (method, pattern, response) in enumerate(self.failures):
            if request.method == method and pattern.search(request.path):
                del self.failures[i]
                return response
        tokens = {f"token {self.token}"} | (
            {f"token {self.download_token}"} if self.download_token else set()
        )
        if request.headers.get("Authorization") not in tokens:
            return _json({"message": "Bad credentials"}, 401)
        path = unquote(request.path)
        prefix = f"/api/v3/repos/{OWNER}/{NAME}"
        m = request.method
        body = json.loads(request.get_data() or b"null")
        if path == "/api/v3/user" and m == "GET":
            profile = {
                "bio": None,
                "blog": "",
                "company": None,
                "email": None,
                "hireable": None,
                "location": None,
                "name": "The Octocat",
                "followers": 0,
                "following": 0,
                "public_gists": 0,
                "public_repos": 0,
                "created_at": "2020-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
            return _json(_user(self.api, self.web, self.me_login, 3) | profile)
        if not path.startswith(prefix):
            return _json({"message": "Not Found"}, 404)
        rest = path[len(prefix) :]
        if (am := re.fullmatch(r"/actions/runs/(\d+)/artifacts", rest)) and m == "GET":
            listed = [
                a
                for a in self.artifacts.get(int(am.group(1)), [])
                if request.args.get("name") in (None, a["name"])
            ]
            return _json({"total_count": len(listed), "artifacts": listed})
        if (zm := re.fullmatch(r"/actions/artifacts/(\d+)/zip", rest)) and m == "GET":
            blob = self.artifact_zips.get(int(zm.group(1)))
            if blob is None:
                return _json({"message": "Not Found"}, 404)
            return Response(blob, status=200, content_type="application/zip")
        if rest == "" and m == "GET":
            return _json(_full_repo(self.api, self.web, OWNER, NAME))
        if rest == "/pulls" and m == "GET":
            state_ok = request.args.get("state", "open") in ("open", "all")
            mine = request.args.get("head") in (None, self.head_label)
            return self._page(request, [self.pull()] if state_ok and mine else [])
        if rest == f"/pulls/{PR}" and m == "GET":
            return _json(self.pull())
        if rest == f"/pulls/{PR}/files" and m == "GET":
            return self._page(request, self.files)
        if rest == f"/pulls/{PR}/commits" and m == "GET":
            return self._page(
                request,
                [
                    {
                        "sha": s,
                        "url": "",
                        "html_url": "",
                        "comments_url": "",
                        "author": None,
                        "committer": None,
                        "parents": [],
                        "commit": {
                            "message": "m",
                            "url": "",
                            "author": {},
                            "committer": {},
                            "tree": {"sha": "0" * 40, "url": ""},
                            "comment_count": 0,
                        },
                    }
                    for s in self.commits
                ],
            )
        if rest == f"/issues/{PR}" and m == "GET":
            return _json(self.issue())
        if rest == f"/issues/{PR}/comments" and m == "GET":
            return self._page(request, self.comments)
        if rest == f"/issues/{PR}/comments" and m == "POST":
            cid = self.add_comment(body["body"], self.author)
            return _json(self.comments[-1] | {"id": cid}, 201)
        if (cm := re.fullmatch(r"/issues/comments/(\d+)", rest)) and m == "PATCH":
            for c in self.comments:
                if c["id"] == int(cm.group(1)):
                    c["body"] = body["body"]
                    return _json(c)
            return _json({"message": "Not Found"}, 404)
        if rest == f"/issues/{PR}/labels" and m == "POST":
            names = body if isinstance(body, list) else body.get("labels", [])
            for n in names:
                if n not in self.labels:
                    self.labels.append(n)
            return _json([self.label(n) for n in self.labels])
        if (lm := re.fullmatch(rf"/issues/{PR}/labels/(.+)", rest)) and m == "DELETE":
            name = lm.group(1)
            if name not in self.labels:
                return _json({"message": "Label does not exist"}, 404)
            self.labels.remove(name)
            return _json([self.label(n) for n in self.labels])
        if rest == "/check-runs" and m == "POST":
            rid = self.new_id()
            self.check_runs[rid] = dict(body)
            self.annotations[rid] = list((body.get("output") or {}).get("annotations") or [])
            return _json(self.check_run(rid), 201)
        if (rm := re.fullmatch(r"/check-runs/(\d+)", rest)) and m == "PATCH":
            rid = int(rm.group(1))
            self.check_runs[rid].update({k: v for k, v in body.items() if k != "output"})
            if body.get("output"):
                self.check_runs[rid]["output"] = body["output"]
                self.annotations[rid] += list(body["output"].get("annotations") or [])
            return _json(self.check_run(rid))
        return _json({"message": f"fake GitHub has no route {m} {rest}"}, 404)

    def _page(self, request: Request, items: list[dict[str, Any]]) -> Response:
        per_page = int(request.args.get("per_page", 30))
        page = int(request.args.get("page", 1))
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            nxt = f"{self.web}{request.path}?per_page={per_page}&page={page + 1}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return _json(chunk, headers=headers)


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(payload), status=status, headers=headers or {}, content_type="application/json"
    )


@pytest.fixture
def fake_github(httpserver: Any) -> Iterator[FakeGitHub]:
    web = httpserver.url_for("/").rstrip("/")
    fake = FakeGitHub(api=web + "/api/v3", web=web)
    httpserver.expect_request(re.compile(r"^/.*")).respond_with_handler(fake.handle)
    yield fake
    httpserver.clear()


def requests_seen(httpserver: Any) -> list[tuple[str, str]]:
    return [(req.method, unquote(req.path)) for req, _ in httpserver.log]


def writes_seen(httpserver: Any) -> list[tuple[str, str]]:
    return [(m, p) for m, p in requests_seen(httpserver) if m in WRITE_METHODS]


@pytest.fixture
def seen() -> Callable[[Any], list[tuple[str, str]]]:
    return requests_seen


@pytest.fixture
def writes() -> Callable[[Any], list[tuple[str, str]]]:
    return writes_seen


def make_verdict(
    findings: list[Finding] | None = None,
    *,
    verdict: str | None = None,
    head: str | None = HEAD,
    pr: int | None = None,
    paths: list[str] | None = None,
) -> Verdict:
    findings = findings or []
    paths = paths if paths is not None else ["vllm/model_executor/models/kimi_k3/fused_moe.py"]
    return Verdict(
        tool_version="0.1.0",
        verdict=verdict or ("fail" if any(f.severity is Severity.ERROR for f in findings) else "pass"),
        mode="range",
        base=BASE,
        head=head,
        pr=pr,
        model="kimi_k3",
        changed_files=[ChangedFile(path=p, status=ChangeStatus.MODIFIED) for p in paths],
        findings=findings,
        rules_run=["FT101", "FT102"],
        generated_at="2026-01-05T12:00:00Z",
    )


def many_findings(n: int, path: str = "vllm/model_executor/models/kimi_k3/fused_moe.py") -> list[Finding]:
    sev = [Severity.INFO, Severity.WARNING, Severity.ERROR]
    return [
        Finding(
            code=f"FT{101 + i % 3}",
            severity=sev[i % 3],
            message=f"finding {i}",
            path=path,
            line=i + 1,
            fix="do the thing",
        )
        for i in range(n)
    ]


@pytest.fixture
def verdicts() -> Any:
    class V:
        make = staticmethod(make_verdict)
        many = staticmethod(many_findings)
        head, base, pr, owner, name, token, bot = HEAD, BASE, PR, OWNER, NAME, TOKEN, BOT
        repo = f"{OWNER}/{NAME}"

    return V


@pytest.fixture
def pr_file() -> Callable[..., dict[str, Any]]:
    def make(filename: str, status: str = "modified", **kw: Any) -> dict[str, Any]:
        entry = {
            "sha": "c" * 40,
            "filename": filename,
            "status": status,
            "additions": 1,
            "deletions": 0,
            "changes": 1,
            "blob_url": "",
            "raw_url": "",
            "contents_url": "",
            "patch": "@@ -1 +1,2 @@\n x\n+y",
        }
        entry.update(kw)
        return entry

    return make
