"""The verify pipeline's overlap (issue 16): grimp's Rust scan runs in a thread while this process gathers
the facts, and the cheaper lookups beside it (one `rev-parse` per revision, grimp's version without
importlib.metadata). Each test checks that what the faster
path gives is what the careful one gives."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from blast_fake_tree import write_tree
from git_helpers import GitRepo

from fasttrack.changes import git as git_mod
from fasttrack.changes.git import resolve_commit
from fasttrack.confinement import graph as graph_mod
from fasttrack.confinement.graph import build_module_graph, start_module_graph_build
from fasttrack.context import Context
from fasttrack.errors import InputError
from fasttrack.facts import gather
from fasttrack.facts.model import Facts
from fasttrack.pipeline import build
from fasttrack.verdict import BlastRadius

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_the_scan_runs_in_a_thread_beside_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build's first step returns while grimp's scan still waits for the caller (a scan run inside that
    step would wait in vain), and the graph it finishes is the graph built in one go."""
    from grimp.application import usecases as uc

    tree = write_tree(tmp_path / "head")
    whole = build_module_graph(tree, "vllm", exclude_type_checking=True)
    gate = threading.Event()
    waited: list[bool] = []
    real = uc._scan_packages

    def gated(**kw: Any) -> Any:
        waited.append(gate.wait(10))
        return real(**kw)

    monkeypatch.setattr(uc, "_scan_packages", gated)
    finish = start_module_graph_build(tree, "vllm", exclude_type_checking=True)
    gate.set()  # the caller's work is done: the scan may answer
    graph, seconds = finish()
    assert waited == [True]
    assert graph.importers_of == whole.importers_of and graph.modules == whole.modules
    assert graph.namers_of == whole.namers_of and graph.files == whole.files
    assert seconds > 0


def test_a_failing_scan_in_its_thread_is_a_graph_build_error(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: the scan raises in its thread (grimp's own exception): the build fails with the reason, as
    when it ran in the caller's thread (FT113 then fails closed)."""
    from grimp.application import usecases as uc

    def broken(**_kw: Any) -> Any:
        raise RuntimeError("planted scan failure")

    monkeypatch.setattr(uc, "_scan_packages", broken)
    finish = start_module_graph_build(write_tree(tmp_path / "head"), "vllm", exclude_type_checking=True)
    with pytest.raises(graph_mod.GraphBuildError, match="planted scan failure"):
        finish()


def _context() -> Context:
    policy = REPO_ROOT / "policies" / "vllm.toml"
    from fasttrack.policy import load_policy

    return Context(policy=load_policy(policy), policy_path=policy, mode="range", head_dir=REPO_ROOT,
                   changes=(), model=None)


def test_the_facts_are_gathered_between_the_radius_start_and_its_finish(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The radius is started before the facts are gathered and finished after; the Context handed to the
    judge carries the radius, and its facts (gathered without the radius) carry it too."""
    events: list[str] = []
    real = gather.gather_facts

    def recording(ctx: Context) -> Facts:
        events.append("facts")
        return real(ctx)

    monkeypatch.setattr(gather, "gather_facts", recording)
    radius = BlastRadius(computed=True, note="planted radius")

    def start() -> Any:
        events.append("start")

        def finish() -> BlastRadius:
            events.append("finish")
            return radius

        return finish

    judged = build._facts_with_radius(_context(), start)
    assert events == ["start", "facts", "finish"]
    assert judged.blast_radius == radius and not isinstance(judged, Facts)
    facts = real(judged)  # the judge's read: the facts gathered beside the scan, not a second gathering
    assert facts is judged._memo[gather.GATHERED] and facts.blast_radius == radius
    assert events == ["start", "facts", "finish"]


def test_a_derived_context_gathers_its_own_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: a Context derived from the judged one (`dataclasses.replace`, as a caller re-judging another
    head would) never reads the facts gathered for the first: they would be stale."""
    judged = build._facts_with_radius(_context(), lambda: (lambda: BlastRadius()))
    other = dataclasses.replace(judged, head_dir=REPO_ROOT / "fasttrack")
    assert gather.GATHERED not in other._memo
    facts = gather.gather_facts(other)
    assert facts is not judged._memo[gather.GATHERED] and facts.head_dir == REPO_ROOT / "fasttrack"


def _tagged_repo(tmp_path: Path) -> tuple[GitRepo, str, str]:
    repo = GitRepo(tmp_path / "r")
    repo.path.mkdir()
    repo.git("init", "-q", "-b", "main")
    repo.commit({"a.py": "x = 1\n"}, message="one")
    first = repo.git("rev-parse", "HEAD").strip()
    repo.commit({"a.py": "x = 2\n"}, message="two")
    repo.git("tag", "-a", "-m", "annotated", "v2")
    return repo, first, repo.git("rev-parse", "HEAD").strip()


@pytest.mark.parametrize("fast", [True, False])
def test_one_rev_parse_resolves_as_the_careful_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    fast: bool) -> None:
    """Honest twin: a commit, a branch and an annotated tag (peeled to its commit) resolve the same with the
    one-run lookup and without it; a range, a tree and a missing name are still refused with the careful
    path's words."""
    repo, first, second = _tagged_repo(tmp_path)
    if not fast:
        monkeypatch.setattr(git_mod, "_commit_and_tree", lambda *_a: None)
    tree = repo.git("rev-parse", "HEAD^{tree}").strip()
    for rev, oid in ((second, second), ("main", second), ("v2", second), (first, first)):
        got = resolve_commit(repo.path, rev, "--head")
        assert (got.oid, got.tree) == (oid, repo.git("rev-parse", f"{oid}^{{tree}}").strip())
    assert git_mod._commit_and_tree(repo.path, f"{first}..{second}") is None  # two ids and a ^: not one
    with pytest.raises(InputError, match="names a tree"):
        resolve_commit(repo.path, tree, "--head")
    with pytest.raises(InputError, match="does not exist"):
        resolve_commit(repo.path, "no-such-branch", "--head")


def test_grimps_version_is_its_metadata_version() -> None:
    assert graph_mod._grimp_version() == graph_mod._grimp_version_from_metadata() != "absent"
