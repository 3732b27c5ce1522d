"""The policy: which paths are a model's own, which shared zones are off limits, the envelope's bounds and
what evidence must show. Loaded from `policies/<engine>.toml`; every field is validated here."""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Literal

import pathspec
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fasttrack.loading import load_toml_model

POLICY_SCHEMA_VERSION = 1
MODEL_PLACEHOLDER = "{model}"
MODEL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ZoneKind(StrEnum):
    """What touching a zone means for a fast-track PR."""

    MODEL_LOCAL = "model-local"  # the target model's own code: allowed
    FORBIDDEN = "forbidden"  # shared paths a fast-track PR may never touch (sampling, KV cache, ...)
    INELIGIBLE = "ineligible"  # shared code that sends the PR to normal review (layers, build, CI)
    JUDGE = "judge"  # the judge itself: policy, allowed signers, workflows, fasttrack
    HOOK = "hook"  # files outside the model root where only declared small edits are allowed


class ZoneSpec(Strict):
    name: str = Field(min_length=1, max_length=64)
    kind: Literal["forbidden", "ineligible", "judge"]
    description: str = ""
    patterns: list[str] = Field(min_length=1)

    @cached_property
    def spec(self) -> pathspec.PathSpec:
        return pathspec.PathSpec.from_lines("gitwildmatch", self.patterns)


class HookSpec(Strict):
    """A file outside the model root where specific one-line edits are allowed, checked per hunk."""

    name: str
    path: str
    description: str = ""
    # Regexes (with {model} substituted, escaped) that every added or removed line must match in full.
    allowed_lines: list[str] = Field(min_length=1)
    max_changed_lines: int = Field(default=4, ge=1, le=100)

    def line_patterns(self, model: str) -> list[re.Pattern[str]]:
        return [re.compile(p.replace(MODEL_PLACEHOLDER, re.escape(model))) for p in self.allowed_lines]


class ModelLayout(Strict):
    """Where model units live in the engine tree."""

    # gitwildmatch patterns with {model}: the paths a fast-track PR for {model} may change.
    local_roots: list[str] = Field(min_length=1)
    # The import package of a model-local unit, e.g. "vllm.models.{model}".
    package: str
    # Directory holding model-local packages (each child directory is one model unit).
    packages_dir: str
    # Packages under packages_dir that are not a model (shared helpers such as vllm/models/common).
    shared_packages: list[str] = Field(default_factory=list)
    # Directory of older single-file model units (vllm/model_executor/models/<name>.py).
    legacy_dir: str | None = None
    # Non-model helper modules inside legacy_dir (utils, interfaces, registry, ...).
    legacy_shared: list[str] = Field(default_factory=list)
    # The architecture registry file, read statically.
    registry: str | None = None

    def local_spec(self, model: str) -> pathspec.PathSpec:
        return pathspec.PathSpec.from_lines(
            "gitwildmatch", [p.replace(MODEL_PLACEHOLDER, model) for p in self.local_roots]
        )

    @field_validator("local_roots")
    @classmethod
    def _roots_name_model(cls, roots: list[str]) -> list[str]:
        for r in roots:
            if MODEL_PLACEHOLDER not in r:
                raise ValueError(f"root {r!r} must contain {MODEL_PLACEHOLDER}")
        return roots


class BlastRadiusSpec(Strict):
    """How the import graph is cut so the blast radius stays small and true."""

    root_package: str = "vllm"
    # Modules whose importers are not followed further: hub modules that import everything.
    hub_modules: list[str] = Field(default_factory=list)
    # Follow imports made inside functions (lazy imports)? They are real but usually registry plumbing.
    include_lazy_imports: bool = False
    exclude_type_checking_imports: bool = True
    max_witnesses: int = Field(default=50, ge=1, le=10_000)


class EnvelopeBounds(Strict):
    """What a contribution's envelope may declare at most."""

    max_hardware_kinds: int = Field(ge=1, le=16)
    known_hardware: dict[str, str]  # GPU name -> compute capability, e.g. "NVIDIA H200" -> "9.0"
    tp_sizes: list[int] = Field(min_length=1)
    nvlink_domain: int = Field(ge=1)
    allow_pipeline_parallel: bool = False
    allow_expert_parallel: bool = False
    max_batch: int = Field(ge=1)
    max_context: int = Field(ge=1)
    dtypes: list[str] = Field(min_length=1)
    cuda_graph_modes: list[str] = Field(min_length=1)
    max_spec_decode_width: int = Field(default=8, ge=1)
    max_grid_points: int = Field(default=4096, ge=1)


class EvidenceRequirements(Strict):
    """What a bundle must show (the evidence rules read these)."""

    allowed_signers: str  # repository-relative path of an ssh allowed_signers file
    namespace: str = "fasttrack-evidence"
    required_batches: list[int] = Field(default_factory=lambda: [1, 2])
    min_samples: int = Field(default=20, ge=1)
    bootstrap_resamples: int = Field(default=2000, ge=100)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    max_plausible_speedup: float = Field(default=10.0, gt=1.0)
    # Peak memory bandwidth (bytes/s) per GPU name: a measurement above it is a finding.
    peak_bandwidth: dict[str, float] = Field(default_factory=dict)
    sanitizer_not_run: Literal["warning", "error"] = "warning"
    max_age_days: int = Field(default=90, ge=1)


class Policy(Strict):
    schema_version: Literal[1]
    engine: str
    engine_version: str
    models: ModelLayout
    zones: list[ZoneSpec]
    hooks: list[HookSpec] = Field(default_factory=list)
    blast_radius: BlastRadiusSpec = Field(default_factory=BlastRadiusSpec)
    envelope: EnvelopeBounds
    evidence: EvidenceRequirements

    @model_validator(mode="after")
    def _unique_zone_names(self) -> Policy:
        names = [z.name for z in self.zones]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate zone names: {sorted(dupes)}")
        return self

    def hook_for(self, path: str) -> HookSpec | None:
        for hook in self.hooks:
            if hook.path == path:
                return hook
        return None


class Zone(BaseModel):
    """The classification of one path."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: ZoneKind
    model: str | None = None  # for model-local paths: which model's root it is in


def load_policy(path: Path) -> Policy:
    return load_toml_model(path, Policy, "policy")
