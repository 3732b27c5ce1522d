"""Stage 2: publish a verdict on its PR (check run with annotations, sticky comment, labels, step summary).

Order matters for safety: everything is read and checked first (the PR, its head, its file list), and only
then is anything written, so a verdict that is rejected publishes nothing.

Trust: the verdict was produced by a workflow the PR itself can edit (`pull_request` runs the PR's copy).
So beyond checking that the verdict names this PR's head commit, the publisher compares it with the file
list GitHub reports for the PR (trusted): a verdict that leaves out changed files, or a PR that edits the
workflow or action that produced the verdict (the guard paths), cannot make the PR eligible; the verdict
is still shown, marked as not trusted, and the label and check say blocked.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrack.errors import InputError
from fasttrack.findings import Finding, Severity
from fasttrack.github import markdown as md
from fasttrack.github.artifact import PrMeta, RejectedVerdict, check_claims
from fasttrack.github.client import clock_of, github_errors, split_repo
from fasttrack.sanitize import inert_references
from fasttrack.verdict import Verdict, decide, inconsistency

ANNOTATIONS_PER_REQUEST = 50  # GitHub's cap per check-run create/update
MAX_ANNOTATIONS = 1000  # beyond this the summary says how many were left out (20 requests at most)
LABEL_ELIGIBLE = "fast-track: eligible"
LABEL_BLOCKED = "fast-track: blocked"
# gitignore syntax: a PR changing these may have changed how its verdict was produced
DEFAULT_GUARDS = (".github/workflows/**", ".github/actions/**", "/action.yml", "/action.yaml")
MAX_LINE = 2**31 - 1  # GitHub's annotation lines are 32-bit
PR_FILES_CAP = 3000  # GitHub lists at most this many files of a PR

_LEVEL = {Severity.ERROR: "failure", Severity.WARNING: "warning", Severity.INFO: "notice"}


@dataclass(frozen=True)
class PublishOptions:
    repo: str  # OWNER/NAME
    pr: int | None  # None only for publish_rejection (no PR could be named)
    head_sha: str | None = None  # from the triggering event (trusted); None from a laptop
    meta: PrMeta | None = None
    check_name: str = "fasttrack"
    report_url: str | None = None
    summary_file: Path | None = None
    check_run: bool = True
    comment: bool = True
    labels: bool = True
    comment_author: str | None = None  # whose marker comment is ours; None: the token's user
    guards: tuple[str, ...] = DEFAULT_GUARDS
    max_annotations: int = MAX_ANNOTATIONS
    token_env: str = "GITHUB_TOKEN"
    source: str = "verdict"  # the verdict file, for error messages


@dataclass
class PublishResult:
    head_sha: str = ""
    outcome: md.Outcome | None = None
    skipped: str | None = None  # why nothing was published (superseded)
    rejected: str | None = None  # why no verdict was published (a failing check says so)
    check_run_id: int | None = None
    check_run_requests: int = 0
    annotations: int = 0
    annotations_dropped: int = 0
    not_annotated: int = 0  # findings whose path is not in the PR's file list: summary text only
    comment_id: int | None = None
    comment_action: str | None = None  # created | updated | unchanged
    labels_added: list[str] = field(default_factory=list)
    labels_removed: list[str] = field(default_factory=list)
    summary_bytes: int = 0

    def line(self, pr: int | None) -> str:
        if self.rejected:
            done = [f"failing check run {self.check_run_id}"] if self.check_run_id is not None else []
            done += [f"-{x}" for x in self.labels_removed]
            return (f"fasttrack: {self.head_sha[:12]}: no verdict published: "
                    + (", ".join(done) or "nothing written"))
        if self.skipped:
            return f"fasttrack: PR #{pr}: nothing published: {self.skipped}"
        assert self.outcome is not None
        parts = [f"fasttrack: PR #{pr} at {self.head_sha[:12]}: "
                 f"{'eligible' if self.outcome.eligible else 'blocked'}"
                 + ("" if self.outcome.trusted else " (verdict not trusted)")]
        if self.check_run_id is not None:
            dropped = f", {self.annotations_dropped} left out" if self.annotations_dropped else ""
            parts.append(f"check run {self.check_run_id} ({self.annotations} annotations in "
                         f"{self.check_run_requests} requests{dropped})")
        if self.comment_action:
            parts.append(f"comment {self.comment_id} {self.comment_action}")
        if self.labels_added or self.labels_removed:
            parts.append("labels " + ", ".join([f"+{x}" for x in self.labels_added]
                                                + [f"-{x}" for x in self.labels_removed]))
        if self.summary_bytes:
            parts.append(f"step summary {self.summary_bytes} bytes")
        return "; ".join(parts)


def annotation_path(path: str | None, pr_paths: frozenset[str]) -> str | None:
    """The finding's path when GitHub can anchor an annotation there: exactly a path of the PR's file list as
    GitHub serves it. `..`, absolute paths and files the PR does not touch give None (summary text only)."""
    if not path or path.startswith("/") or "\\" in path or ".." in path.split("/"):
        return None
    return path if path in pr_paths else None


def build_annotations(findings: Iterable[Finding], limit: int, pr_paths: frozenset[str] | None = None
                      ) -> tuple[list[dict[str, Any]], int, list[Finding]]:
    """Check-run annotations for findings on a PR file, errors first: (annotations, dropped, elsewhere).

    `pr_paths` is the PR's file list from GitHub (trusted); a finding whose path is not one of them (a `..`
    path, an absolute one, a file the PR does not touch) is not annotated but returned in `elsewhere`, for
    the summary. Every annotation carries a line (the finding's, else 1 for a file-level finding) so that it
    shows in the "Files changed" view; its text goes through `sanitize.inert_references`.
    """
    out: list[dict[str, Any]] = []
    placed: list[tuple[Finding, str]] = []
    elsewhere: list[Finding] = []
    for f in md.sort_findings(findings):
        if not f.path:
            continue
        where = annotation_path(f.path, frozenset({f.path}) if pr_paths is None else pr_paths)
        if where is None:
            elsewhere.append(f)
        else:
            placed.append((f, where))
    for f, where in placed[:limit]:
        # GitHub refuses (422) a line outside a 32-bit int, which would fail the whole check run: a line no
        # file can have is shown file-level, its number in the message.
        in_range = f.line is not None and 0 < f.line <= MAX_LINE
        line = f.line if in_range and f.line is not None else 1
        message = (f.message if in_range else f"{f.message} (file-level finding)" if not f.line
                   else f"{f.message} (at a line number out of range)")
        note: dict[str, Any] = {
            "path": where,
            "start_line": line,
            "end_line": line,
            "annotation_level": _LEVEL[f.severity],
            "title": inert_references(f.code)[:255],
            "message": inert_references(message)[:4000],
        }
        if f.fix:
            note["raw_details"] = inert_references(f"fix: {f.fix}")[:4000]
        out.append(note)
    return out, max(0, len(placed) - limit), elsewhere


def assess_trust(verdict: Verdict, pr_files: list[dict[str, Any]], pr_changed_files: int | None,
                 guards: tuple[str, ...]) -> md.Outcome:
    """Compare the verdict with GitHub's own (trusted) view of the PR's files."""
    import pathspec

    notes: list[str] = []
    api_paths: set[str] = set()
    for f in pr_files:
        api_paths.add(str(f.get("filename", "")))
        if f.get("previous_filename"):
            api_paths.add(str(f["previous_filename"]))
    api_paths.discard("")
    claimed = {cf.path for cf in verdict.changed_files} | {cf.old_path for cf in verdict.changed_files
                                                          if cf.old_path}
    missing = sorted(api_paths - claimed)
    if missing:
        shown = ", ".join(md.code(p, 120) for p in missing[:5])
        more = ", …" if len(missing) > 5 else ""
        notes.append(f"**Not trusted:** the verdict leaves out {len(missing)} file(s) GitHub lists for this "
                     f"PR ({shown}{more}).")
    if pr_changed_files is not None and pr_changed_files > len(pr_files):
        notes.append(f"**Not trusted:** GitHub lists only {len(pr_files)} of the PR's {pr_changed_files} "
                     "files, so the verdict cannot be checked against them.")
    spec = pathspec.PathSpec.from_lines("gitignore", guards)
    guarded = sorted(p for p in api_paths if spec.match_file(p))
    if guarded:
        shown = ", ".join(md.code(p, 120) for p in guarded[:5])
        notes.append(f"**Not trusted:** this PR changes the workflow or action that produced the verdict "
                     f"({shown}); a maintainer must review it the normal way.")
    trusted = not notes
    # Recomputed from the findings, never read from the verdict field (publish refuses a mismatch anyway).
    return md.Outcome(eligible=trusted and decide(verdict.findings) == "pass", trusted=trusted,
                      notes=tuple(notes))


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_run_title(verdict: Verdict, outcome: md.Outcome) -> str:
    c = verdict.counts()
    if outcome.eligible:
        return f"Eligible for fast-track ({c['warning']} warnings)"
    if not outcome.trusted:
        return "Blocked: the verdict cannot be trusted"
    return f"Blocked: {c['error']} errors, {c['warning']} warnings"


def publish(gh: Any, verdict: Verdict, opts: PublishOptions,
            me: Callable[[], str] | None = None) -> PublishResult:
    """Check, then publish. Raises RejectedVerdict / InputError before any write when the claims fail."""
    owner, name = split_repo(opts.repo)
    clock = clock_of(gh)

    def err(action: str) -> AbstractContextManager[None]:
        return github_errors(action, opts.token_env, clock)

    result = PublishResult()
    refuse_inconsistent(verdict, opts.source)
    if opts.pr is None:
        raise RejectedVerdict("no PR number to publish on", path=opts.source, field="pr")

    # ---- read and check (no writes) ----
    with err(f"reading PR #{opts.pr} of {opts.repo}"):
        pr = gh.pull_request(owner, name, opts.pr)
    if pr is None:
        raise RejectedVerdict(f"PR #{opts.pr} does not exist in {opts.repo}", path=opts.source, field="pr")
    pr_head = str(pr.head.sha).lower()
    if opts.head_sha is not None and pr_head != opts.head_sha.lower():
        with err(f"listing the commits of PR #{opts.pr}"):
            shas = {str(c.sha).lower() for c in pr.commits()}
        if opts.head_sha.lower() in shas:
            check_claims(verdict, pr=opts.pr, head_sha=opts.head_sha, meta=opts.meta, source=opts.source)
            result.skipped = (f"the verdict is for {opts.head_sha[:12]}, an older push; PR #{opts.pr} is now "
                              f"at {pr_head[:12]} and that run will publish")
            return result
        raise RejectedVerdict(f"PR #{opts.pr} has no commit {opts.head_sha[:12]} (its head is "
                              f"{pr_head[:12]}): the artifact claims a PR it was not built from",
                              path=opts.source, field="pr", fix="nothing was published")
    head = opts.head_sha.lower() if opts.head_sha else pr_head
    check_claims(verdict, pr=opts.pr, head_sha=head, meta=opts.meta, source=opts.source)
    result.head_sha = head
    with err(f"listing the files of PR #{opts.pr}"):
        files = [f.as_dict() for f in pr.files()]
    changed = pr.as_dict().get("changed_files")
    outcome = assess_trust(verdict, files, changed if isinstance(changed, int) else None, opts.guards)
    result.outcome = outcome
    issue = None
    if opts.comment or opts.labels:
        with err(f"reading issue #{opts.pr}"):
            issue = pr.issue()

    # ---- write ----
    if opts.summary_file is not None:
        result.summary_bytes = write_step_summary(opts.summary_file, verdict, outcome, opts.report_url)
    if opts.check_run:
        publish_check_run(gh, pr, verdict, outcome, head, opts, result, pr_paths=pr_paths(files))
    if opts.comment and issue is not None:
        author = opts.comment_author or (me() if me else None)
        body = md.render(verdict, outcome, limit=md.COMMENT_LIMIT, report_url=opts.report_url,
                         marker=md.STICKY_MARKER)
        with err(f"updating the fasttrack comment on PR #{opts.pr}"):
            upsert_sticky_comment(issue, body, author, result)
    if opts.labels and issue is not None:
        with err(f"setting labels on PR #{opts.pr}"):
            set_labels(issue, outcome.eligible, result)
    return result


def pr_paths(files: list[dict[str, Any]]) -> frozenset[str]:
    """The paths of the PR's file list as GitHub serves it (the head side: annotations anchor there)."""
    return frozenset(str(f["filename"]) for f in files
                     if isinstance(f.get("filename"), str) and f["filename"])


def publish_check_run(gh: Any, pr: Any, verdict: Verdict, outcome: md.Outcome, head: str,
                      opts: PublishOptions, result: PublishResult, pr_paths: frozenset[str] | None = None
                      ) -> None:
    """Create the check run with the first 50 annotations, then add the rest 50 at a time; the last
    request completes it, so the conclusion only appears once every annotation is in. Findings on paths
    outside the PR's file list are listed in the summary as text instead."""
    notes, dropped, elsewhere = build_annotations(verdict.findings, opts.max_annotations, pr_paths)
    result.annotations, result.annotations_dropped = len(notes), dropped
    result.not_annotated = len(elsewhere)
    extra = [f"{dropped} more findings with a file were not annotated (cap {opts.max_annotations}); "
             "they are all in the report."] if dropped else []
    if elsewhere:
        shown = ", ".join(f"{md.esc(f.code, 10)} on {md.code(f.path, 160)}" for f in elsewhere[:10])
        more = f" and {len(elsewhere) - 10} more" if len(elsewhere) > 10 else ""
        extra.append(f"**Not annotated:** {len(elsewhere)} finding(s) name a path that is not in the PR's "
                     f"file list on GitHub (outside the PR, `..` or absolute): {shown}{more}.")
    summary_outcome = md.Outcome(outcome.eligible, outcome.trusted,
                                 outcome.notes + tuple(extra))  # safe Markdown: untrusted parts escaped
    output = {"title": check_run_title(verdict, outcome),
              "summary": md.render(verdict, summary_outcome, limit=md.COMMENT_LIMIT,
                                   report_url=opts.report_url)}
    per = ANNOTATIONS_PER_REQUEST
    batches = [notes[i:i + per] for i in range(0, len(notes), per)] or [[]]
    conclusion = "success" if outcome.eligible else "failure"
    repo = pr.base.repository
    clock = clock_of(gh)
    fix = ("check runs need an App installation token with checks: write (Actions' GITHUB_TOKEN); "
           "with a personal token pass --no-check-run")
    with github_errors(f"creating the {opts.check_name!r} check run", opts.token_env, clock, fix):
        first = dict(output, annotations=batches[0])
        if len(batches) == 1:
            run = repo.create_check_run(name=opts.check_name, head_sha=head, details_url=opts.report_url,
                                        status="completed", conclusion=conclusion, completed_at=_now(),
                                        output=first)
        else:
            run = repo.create_check_run(name=opts.check_name, head_sha=head, details_url=opts.report_url,
                                        status="in_progress", started_at=_now(), output=first)
        result.check_run_requests = 1
        if run is None:
            raise RejectedVerdict("GitHub did not return the created check run", path=opts.source)
        result.check_run_id = int(run.id)
    for i, batch in enumerate(batches[1:], start=1):
        last = i == len(batches) - 1
        with github_errors(f"adding annotations to check run {result.check_run_id}", opts.token_env, clock):
            kwargs: dict[str, Any] = {"output": dict(output, annotations=batch)}
            if last:
                kwargs.update(status="completed", conclusion=conclusion, completed_at=_now())
            run.update(**kwargs)
        result.check_run_requests += 1


def refuse_inconsistent(verdict: Verdict, source: str | Path) -> None:
    """Pass/fail is recomputed from the findings; a verdict whose `verdict` field disagrees is refused."""
    problem = inconsistency(verdict)
    if problem is not None:
        raise RejectedVerdict(f"the verdict is inconsistent: {problem}", path=source, field="verdict",
                              fix="nothing was published; a real verdict's field follows from its findings")


def upsert_sticky_comment(issue: Any, body: str, author: str | None, result: PublishResult) -> None:
    """Update our marker comment in place, or create it once ; others' marker comments are ignored."""
    ours = None
    for c in issue.comments():
        login = getattr(getattr(c, "user", None), "login", None)
        if md.STICKY_MARKER in (c.body or "") and (author is None or login == author):
            ours = c
            break
    if ours is None:
        created = issue.create_comment(body)
        result.comment_id, result.comment_action = (int(created.id) if created else None), "created"
    elif ours.body == body:
        result.comment_id, result.comment_action = int(ours.id), "unchanged"
    else:
        ours.edit(body)
        result.comment_id, result.comment_action = int(ours.id), "updated"


def set_labels(issue: Any, eligible: bool, result: PublishResult) -> None:
    want, other = (LABEL_ELIGIBLE, LABEL_BLOCKED) if eligible else (LABEL_BLOCKED, LABEL_ELIGIBLE)
    current = {str(lbl.name) for lbl in (issue.original_labels or [])}
    if want not in current:
        issue.add_labels(want)
        result.labels_added.append(want)
    if other in current:
        issue.remove_label(other)
        result.labels_removed.append(other)


def write_step_summary(path: Path, verdict: Verdict, outcome: md.Outcome, report_url: str | None) -> int:
    """Append the report to $GITHUB_STEP_SUMMARY, keeping the file under GitHub's 1 MiB per step."""
    try:
        existing = path.stat().st_size if path.exists() else 0
    except OSError:
        existing = 0
    room = md.STEP_SUMMARY_LIMIT - existing
    if room < md.MIN_LIMIT:
        return 0
    text = md.render(verdict, outcome, limit=room, report_url=report_url)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)
    return md.size(text)


def write_rejection_summary(path: Path, message: str) -> None:
    """On a rejected artifact, say so in the step summary (no verdict is published to the PR)."""
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"### fasttrack: verdict rejected, no verdict published\n\n{md.esc(message, 2000)}\n\n"
                     "With the head commit known, a failing `fasttrack` check says why.\n")
    except OSError:
        pass


# ---- when no verdict can be published ----


def find_pr_at(gh: Any, repo: str, head_sha: str, claimed_pr: int | None, head_label: str | None,
               token_env: str = "GITHUB_TOKEN") -> Any | None:
    """The open PR whose head is `head_sha` (trusted, from the event), or None.

    The claimed PR number (from the artifact, untrusted) is only used when GitHub agrees that PR is at
    `head_sha`; otherwise the PR is looked up by `head_label` (`owner:branch` from the event)."""
    owner, name = split_repo(repo)
    sha = head_sha.lower()
    clock = clock_of(gh)
    if claimed_pr is not None:
        try:
            with github_errors(f"reading PR #{claimed_pr} of {repo}", token_env, clock):
                pr = gh.pull_request(owner, name, claimed_pr)
        except InputError:
            pr = None  # no such PR (a false claim): look it up by the head label
        if pr is not None and str(pr.head.sha).lower() == sha:
            return pr
    if head_label:
        with github_errors(f"finding the PR of {head_label!r} in {repo}", token_env, clock):
            repository = gh.repository(owner, name)
            for short in repository.pull_requests(state="open", head=head_label, number=30):
                if str(short.head.sha).lower() == sha:
                    return gh.pull_request(owner, name, int(short.number))
    return None


def publish_rejection(gh: Any, opts: PublishOptions, reason: str, head_label: str | None = None
                      ) -> PublishResult:
    """Stage 2 could not publish a verdict for `opts.head_sha`: a failing check run there saying why, and
    the `fast-track: eligible` label removed from the PR at that head. Nothing else: no comment, no
    "blocked" label, nothing that reads as a verdict."""
    if opts.head_sha is None:
        raise InputError("a failing check needs the head commit", field="--head-sha",
                         fix="pass github.event.workflow_run.head_sha")
    head = opts.head_sha.lower()
    result = PublishResult(head_sha=head, rejected=reason)
    clock = clock_of(gh)
    pr = find_pr_at(gh, opts.repo, head, opts.pr, head_label, opts.token_env)
    owner, name = split_repo(opts.repo)
    if opts.check_run:
        summary = (f"### fasttrack: ⛔ no verdict published\n\n{md.esc(reason, 3000)}\n\n"
                   "This commit has no fasttrack verdict, so it is not eligible for fast-track. Push again "
                   "or ask a maintainer to re-run the workflows.")
        output = {"title": "No verdict published", "summary": summary}
        with github_errors(f"creating the failing {opts.check_name!r} check run", opts.token_env, clock,
                           "check runs need an App installation token with checks: write (docs/github.md)"):
            repository = gh.repository(owner, name)
            run = repository.create_check_run(name=opts.check_name, head_sha=head,
                                              details_url=opts.report_url, status="completed",
                                              conclusion="failure", completed_at=_now(), output=output)
        result.check_run_requests = 1
        result.check_run_id = int(run.id) if run is not None else None
    if opts.labels and pr is not None:
        with github_errors(f"removing {LABEL_ELIGIBLE!r} from PR #{pr.number}", opts.token_env, clock):
            issue = pr.issue()
            if LABEL_ELIGIBLE in {str(lbl.name) for lbl in (issue.original_labels or [])}:
                issue.remove_label(LABEL_ELIGIBLE)
                result.labels_removed.append(LABEL_ELIGIBLE)
    return result


