"""SARIF 2.1.0 from a Verdict, for GitHub code scanning (`github/codeql-action/upload-sarif`) and IDEs.

One `reportingDescriptor` per rule that ran, from the verdict's own rule metadata (id = FT code,
shortDescription = the one-line summary, fullDescription = what it checks, help = what / why / example,
defaultConfiguration = its default severity, properties = family, tags and checklist group; a verdict
without metadata falls back to the installed catalogue, said in the run's properties). One result per
finding with its level, message and location (the file and line when the finding has them; else the
evidence file). Findings with no place at all stay in the log without a location: valid SARIF, though
code scanning only shows results that have one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fasttrack.findings import Finding, Severity
from fasttrack.render.catalogue import rules_of
from fasttrack.ruleinfo import RulesInfo
from fasttrack.verdict import Verdict

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/fasttrack-ci/fasttrack"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rules(info: RulesInfo) -> list[dict[str, Any]]:
    out = []
    for r in sorted(info.rules, key=lambda r: r.code):
        group = info.group_of(r.code)
        d = r.doc
        out.append({
            "id": r.code,
            "name": _camel(r.summary) or r.code,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": d.what},
            "help": {"text": f"{d.what}\n\nWhy: {d.why}\n\nExample: {d.example}",
                     "markdown": f"**{r.code}**: {d.what}\n\n**Why:** {d.why}\n\n**Example:** {d.example}"},
            "defaultConfiguration": {"level": _LEVEL[r.severity]},
            "properties": {"family": r.family, "group": group.title if group else None,
                           "tags": ["fasttrack", *([r.family] if r.family else []), *r.tags]},
        })
    return out


def _camel(text: str) -> str:
    words = [w for w in "".join(c if c.isalnum() else " " for c in text).split() if w][:8]
    return "".join(w[:1].upper() + w[1:] for w in words)


def _location(f: Finding) -> list[dict[str, Any]]:
    path = f.path or f.evidence_file
    if not path:
        return []
    physical: dict[str, Any] = {"artifactLocation": {"uri": path.lstrip("/"), "uriBaseId": "%SRCROOT%"}}
    if f.path and f.line:
        physical["region"] = {"startLine": f.line}
    return [{"physicalLocation": physical}]


def _fingerprint(f: Finding) -> str:
    point = json.dumps(f.point, sort_keys=True, default=str)
    key = "\0".join([f.code, f.path or "", f.evidence_file or "", point, f.message])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def to_sarif(verdict: Verdict) -> dict[str, Any]:
    meta = rules_of(verdict)
    rules = _rules(meta.info)
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for f in verdict.findings:
        if f.code not in index:  # a code outside the catalogue still gets a descriptor (never dropped)
            index[f.code] = len(rules)
            rules.append({"id": f.code, "shortDescription": {"text": f.code},
                          "fullDescription": {"text": f.code}})
        result: dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": _LEVEL[f.severity],
            "message": {"text": f.message + (f"\nFix: {f.fix}" if f.fix else "")},
            "locations": _location(f),
            "partialFingerprints": {"fasttrackFinding/v1": _fingerprint(f)},
        }
        props: dict[str, Any] = {"severity": f.severity.value}
        if f.fix:
            props["fix"] = f.fix
        if f.point:
            props["point"] = f.point
        if f.evidence_file:
            props["evidenceFile"] = f.evidence_file
        result["properties"] = props
        results.append(result)
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "fasttrack", "version": verdict.tool_version, "semanticVersion":
                            verdict.tool_version, "informationUri": INFORMATION_URI, "rules": rules}},
        "automationDetails": {"id": f"fasttrack/{verdict.mode}/"},
        "columnKind": "unicodeCodePoints",
        "results": results,
        "invocations": [{"executionSuccessful": True, "endTimeUtc": verdict.generated_at}],
        "properties": {"verdict": verdict.verdict, "mode": verdict.mode, "model": verdict.model,
                       "base": verdict.base, "head": verdict.head, "pr": verdict.pr,
                       "policyDigest": verdict.policy_digest, "rulesRun": verdict.rules_run},
    }
    if meta.note:
        run["properties"]["ruleMetadataNote"] = meta.note
    if verdict.head and _is_sha(verdict.head) and verdict.repo and verdict.repo.startswith(("https://", "http://")):
        run["versionControlProvenance"] = [{"repositoryUri": verdict.repo, "revisionId": verdict.head}]
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text.lower())


def render(verdict: Verdict) -> str:
    """The verdict as a SARIF 2.1.0 log (JSON text)."""
    return json.dumps(to_sarif(verdict), indent=2, ensure_ascii=False) + "\n"
