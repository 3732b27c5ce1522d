"""Hook checks: a hook file (e.g. vLLM's architecture registry) may change only by whole allowed entries.

For every run of consecutive added lines (and of removed lines) the run must split into whole matches of
the hook's `allowed_lines` (one line each) and `allowed_blocks` (several lines joined with "\\n"), with the
model's name substituted. A diff may show an inserted block "slid" by a few lines when the lines around it
repeat (a new four-line entry after another one that also ends in `),`); when the file's text is at hand,
every equivalent placement of the run is tried, and only placements that describe the same edit count.
The file as a whole may change by at most `max_changed_lines`, may only be modified (not added, deleted,
renamed, re-moded or made binary), and with `added_keys_unique` an added dict entry may not shadow an entry
for the same key elsewhere in the file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fasttrack.changes.model import Change
from fasttrack.policy import HookSpec
from fasttrack.verdict import ChangeStatus

Side = Literal["added", "removed", "file"]


@dataclass(frozen=True)
class HookViolation:
    """One edit to a hook file that the hook does not allow."""

    reason: str
    side: Side = "file"
    line: int | None = None  # head-side for added lines and file problems; base-side for removed lines
    text: str | None = None


def _runs(lines: Sequence[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Split numbered lines into runs of consecutive line numbers."""
    runs: list[list[tuple[int, str]]] = []
    for no, text in sorted(lines):
        if runs and runs[-1][-1][0] + 1 == no:
            runs[-1].append((no, text))
        else:
            runs.append([(no, text)])
    return runs


def splits_into_entries(lines: Sequence[str], singles: Sequence[re.Pattern[str]],
                        blocks: Sequence[re.Pattern[str]], max_block: int) -> bool:
    """Can `lines` be cut into consecutive whole matches of the single-line and block patterns?"""
    n = len(lines)
    reach = [False] * (n + 1)
    reach[0] = True
    for i in range(n):
        if not reach[i]:
            continue
        if any(p.fullmatch(lines[i]) for p in singles):
            reach[i + 1] = True
        for k in range(2, min(max_block, n - i) + 1):
            if not reach[i + k] and any(p.fullmatch("\n".join(lines[i:i + k])) for p in blocks):
                reach[i + k] = True
    return reach[n]


def _placements(run: list[tuple[int, str]], file_lines: Sequence[str] | None) -> list[list[str]]:
    """The run as shown, plus every equivalent slid placement the file's text confirms."""
    texts = [t for _, t in run]
    out = [texts]
    if file_lines is None:
        return out
    start, n = run[0][0], len(run)  # 1-based line numbers in the file the run belongs to
    idx = start - 1
    if file_lines[idx:idx + n] != texts:
        return out  # the text does not line up with the diff: judge the run as shown
    for k in range(1, n):
        down = file_lines[idx + k:idx + k + n]  # slide down by k: valid if the k lines after repeat
        if len(down) == n and file_lines[idx + n:idx + n + k] == texts[:k]:
            out.append(list(down))
        if idx - k >= 0 and file_lines[idx - k:idx] == texts[n - k:]:
            out.append(list(file_lines[idx - k:idx - k + n]))
    return out


def _shadowed_keys(hook_text: str, added_lines: set[int]) -> list[tuple[int, str, str]]:
    """(line, key, other value) for dict keys on added lines that map to something else elsewhere."""
    tree = ast.parse(hook_text)
    values: dict[str, set[str]] = {}
    added_keys: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key_node, value in zip(node.keys, node.values, strict=True):
            if isinstance(key_node, ast.Constant) and isinstance(key_node.value, str):
                name: str = key_node.value
                values.setdefault(name, set()).add(ast.unparse(value))
                if key_node.lineno in added_lines:
                    added_keys.append((key_node.lineno, name))
    problems = []
    for line, key in added_keys:
        if len(values[key]) > 1:
            others = sorted(values[key])
            problems.append((line, key, " vs ".join(others)))
    return problems


def check_hook_change(hook: HookSpec, change: Change, model: str | None, *, head_text: str | None = None,
                      base_text: str | None = None) -> list[HookViolation]:
    """Every edit in `change` (to `hook.path`) that the hook does not allow; empty when it is allowed."""
    if model is None:
        return [HookViolation("the target model is not known, so no hook edit can be allowed "
                              "(pass --model or confine the PR to one model)")]
    if change.status is not ChangeStatus.MODIFIED:
        return [HookViolation(f"a hook file may only be modified, not {change.status.value}")]
    if change.binary:
        return [HookViolation("the hook file is binary (or marked binary), so its edit cannot be checked")]
    if change.old_mode != change.new_mode:
        return [HookViolation(f"the hook file's mode changed ({change.old_mode} -> {change.new_mode})")]
    problems: list[HookViolation] = []
    added = [a for h in change.hunks for a in h.added]
    removed = [r for h in change.hunks for r in h.removed]
    total = len(added) + len(removed)
    if total > hook.max_changed_lines:
        problems.append(HookViolation(
            f"{total} lines changed; the hook allows at most {hook.max_changed_lines}", line=None))
    singles, blocks = hook.line_patterns(model), hook.block_patterns(model)
    head_lines = head_text.split("\n") if head_text is not None else None
    base_lines = base_text.split("\n") if base_text is not None else None
    sides: tuple[tuple[Side, list[tuple[int, str]], Sequence[str] | None], ...] = (
        ("added", added, head_lines), ("removed", removed, base_lines))
    for side, lines, file_lines in sides:
        for run in _runs(lines):
            if any(splits_into_entries(p, singles, blocks, hook.max_changed_lines)
                   for p in _placements(run, file_lines)):
                continue
            bad_no, bad_text = next(((no, t) for no, t in run
                                     if not any(p.fullmatch(t) for p in singles)), run[0])
            problems.append(HookViolation(
                f"{side} line is not an allowed entry for {model}", side=side, line=bad_no, text=bad_text))
    if hook.added_keys_unique and head_text is not None and hook.path.endswith(".py"):
        try:
            shadowed = _shadowed_keys(head_text, {no for no, _ in added})
        except SyntaxError as exc:
            problems.append(HookViolation(f"the hook file no longer parses: {exc.msg}", line=exc.lineno))
        else:
            for line, key, vals in shadowed:
                problems.append(HookViolation(
                    f"added entry {key!r} shadows an existing entry for the same key ({vals})",
                    side="added", line=line))
    return problems
