"""What a Verdict records about the rules that judged it: each rule's metadata and the checklist groups.

The catalogue (`fasttrack.rules.catalogue`) declares this metadata; the pipeline copies it into the Verdict
(`Verdict.catalogue`), and every renderer (the dashboard, SARIF, the GitHub output) reads groups, tags and
docs from there, so an old verdict renders with the metadata of the rules that judged it, not today's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fasttrack.findings import Severity

# Tags the renderers give a meaning to (other tags are descriptive only).
ANTI_GAMING: str = "anti-gaming"  # catches a harness being gamed or the judge being edited
PRESENCE: str = "presence"  # whether evidence exists and is for this contribution
CUSTODY: str = "custody"  # whether the evidence belongs to this exact code and is signed


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleDoc(_Strict):
    """A rule's documentation in ruff's shape: what it checks, why it matters, an example that fails."""

    what: str = Field(min_length=1)
    why: str = Field(min_length=1)
    example: str = Field(min_length=1)


class GroupInfo(_Strict):
    """One checklist item of the review dashboard that the tool decides (its rules' errors fail it)."""

    id: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    title: str = Field(min_length=1)
    detail: str = ""


class RuleInfo(_Strict):
    code: str = Field(pattern=r"^FT\d{3}$")
    family: str
    summary: str
    group: str  # a GroupInfo.id of the same RulesInfo
    severity: Severity  # what its main finding is (a rule may also say less, e.g. a warning beside errors)
    tags: tuple[str, ...] = ()
    doc: RuleDoc


class RulesInfo(_Strict):
    """The metadata of every rule that ran, and the checklist groups they belong to (in checklist order)."""

    groups: tuple[GroupInfo, ...] = Field(min_length=1)
    rules: tuple[RuleInfo, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> RulesInfo:
        ids = [g.id for g in self.groups]
        if len(set(ids)) != len(ids):
            raise ValueError(f"groups: duplicate group ids {sorted({i for i in ids if ids.count(i) > 1})}")
        codes = [r.code for r in self.rules]
        if len(set(codes)) != len(codes):
            raise ValueError(f"rules: duplicate codes {sorted({c for c in codes if codes.count(c) > 1})}")
        orphans = sorted(r.code for r in self.rules if r.group not in ids)
        if orphans:
            raise ValueError(f"rules: {', '.join(orphans)} name a group that is not in groups")
        return self

    def rule(self, code: str) -> RuleInfo | None:
        return next((r for r in self.rules if r.code == code), None)

    def group_of(self, code: str) -> GroupInfo | None:
        """The checklist group a code belongs to (None: a code this catalogue does not hold)."""
        r = self.rule(code)
        return None if r is None else next(g for g in self.groups if g.id == r.group)

    def tagged(self, tag: str) -> frozenset[str]:
        return frozenset(r.code for r in self.rules if tag in r.tags)


class RuleCode(str):
    """A rule code that carries its rule's metadata (only in the process that ran the rule; JSON holds the
    plain code). `Verdict` fills `catalogue` from `rules_run` entries of this type when it is not given, so
    the pipeline records the metadata of exactly the rules it ran."""

    info: RuleInfo
    groups: tuple[GroupInfo, ...]

    def __new__(cls, info: RuleInfo, groups: tuple[GroupInfo, ...]) -> RuleCode:
        self = super().__new__(cls, info.code)
        self.info = info
        self.groups = groups
        return self

    def __reduce__(self) -> tuple[type[str], tuple[str]]:  # pickles (xdist, caches) as the plain code
        return (str, (str(self),))
