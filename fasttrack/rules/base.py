"""Rules: small pure functions `(Facts) -> Iterable[Finding]` with a stable code and a one-line doc.

Each rules module builds its own `Catalogue`; `fasttrack.rules.ALL_RULES` joins them. No global registry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fasttrack.facts.model import Facts
from fasttrack.findings import Finding
from fasttrack.ruleinfo import RuleInfo

Check = Callable[[Facts], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    code: str
    summary: str
    check: Check
    doc: str = ""
    family: str = ""
    # The catalogue's metadata (fasttrack.rules.catalogue), joined by `fasttrack.rules.all_rules()`.
    info: RuleInfo | None = None
    fixture_exempt: str | None = None

    def run(self, ctx: Facts) -> list[Finding]:
        """Run the rule over the gathered facts (`fasttrack.facts.gather.gather_facts`); a rule that crashes
        yields an error finding (fail closed), never a pass."""
        if not isinstance(ctx, Facts):
            raise TypeError(f"rule {self.code} reads Facts (gather_facts(ctx)), not a {type(ctx).__name__}")
        try:
            found = list(self.check(ctx))
        except Exception as exc:
            return [Finding.error(self.code, f"rule {self.code} crashed: {type(exc).__name__}: {exc}",
                                  fix="report this to the fasttrack maintainers; the verdict fails closed")]
        for f in found:
            if f.code != self.code:
                raise AssertionError(f"rule {self.code} produced a finding with code {f.code}")
        return found


@dataclass
class Catalogue:
    """Collects the rules of one family with a decorator."""

    family: str
    rules: list[Rule] = field(default_factory=list)

    def rule(self, code: str, summary: str) -> Callable[[Check], Check]:
        def register(fn: Check) -> Check:
            if any(r.code == code for r in self.rules):
                raise ValueError(f"duplicate rule code {code}")
            self.rules.append(Rule(code=code, summary=summary, check=fn,
                                   doc=inspect.cleandoc(fn.__doc__ or summary), family=self.family))
            return fn

        return register
