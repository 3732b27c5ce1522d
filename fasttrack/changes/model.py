"""The change-set model shared by every source of changes (git range, GitHub file list, contribution dir)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fasttrack.domain import ChangeStatus


@dataclass(frozen=True)
class Hunk:
    """One diff hunk: the lines it adds (new-side line numbers) and removes (old-side line numbers)."""

    added: tuple[tuple[int, str], ...] = ()
    removed: tuple[tuple[int, str], ...] = ()
    # The hunk header's ranges (@@ -old_start,old_count +new_start,new_count @@); 0 when unknown.
    old_start: int = 0
    old_count: int = 0
    new_start: int = 0
    new_count: int = 0


@dataclass(frozen=True)
class Change:
    status: ChangeStatus
    path: str  # new side (for deletions: the deleted path)
    old_path: str | None = None  # renames/copies: the source path
    old_mode: str | None = None  # git modes: 100644, 100755, 120000 (symlink), 160000 (submodule)
    new_mode: str | None = None
    binary: bool = False
    symlink_target: str | None = None  # new-side target when the new side is a symlink
    hunks: tuple[Hunk, ...] = field(default=())
    added_lines: int | None = None
    removed_lines: int | None = None

    @property
    def is_symlink(self) -> bool:
        return self.new_mode == "120000"

    @property
    def is_submodule(self) -> bool:
        return "160000" in (self.old_mode, self.new_mode)

    def paths(self) -> tuple[str, ...]:
        """Every path this change touches: both sides of a rename or copy count."""
        if self.old_path and self.old_path != self.path:
            return (self.old_path, self.path)
        return (self.path,)
