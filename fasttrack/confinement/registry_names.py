"""vLLM's architecture registry read statically, and the architecture-name fallback it applies.

A checkpoint's `config.json` names its architectures (`"architectures": ["DeepseekV3ForCausalLM"]`); vLLM
0.33 resolves each name against `_VLLM_MODELS` (vllm/model_executor/models/registry.py) in
`_ModelRegistry._normalize_arch`:

1. the name itself, when it is a key;
2. else the first suffix of `_SUFFIX_TO_DEFAULTS` (vllm/config/model.py; only the suffixes whose runner and
   convert type fit the model config, all of them before those are known) that the name ends with is
   swapped, with `str.replace` (every occurrence), for each suffix of that table in order, and the first
   result that is a key wins (`FooChatModel` is served by `FooForCausalLM`, then
   `FooForConditionalGeneration`, ...);
3. else the name as given (unsupported, or the Transformers backend).

There is no case folding: keys are compared exactly. `_resolve_module_name` turns a relative module name
(`"llama"`) into `vllm.model_executor.models.llama`, and keeps fully qualified ones (`vllm.models.kimi_k3`).

Speculative drafts are named after their target (vllm/transformers_utils/configs/eagle.py rewrites a draft's
architectures to `Eagle{arch}`, `Eagle3{arch}`, `DFlash{arch}`), so an added key with such a prefix whose
rest resolves to another model's key names that model's drafts, whether or not they were served before.

So a new key can capture checkpoints of another model without shadowing any key: adding
`DeepseekV3ForConditionalGeneration` for kimi_k3 takes every checkpoint that declares that name, which
resolved to `DeepseekV3ForCausalLM` (deepseek_v2) before. `captures` finds these by resolving, before and
after the edit, every key and every suffix variant of every key, under every runner/convert filter.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

LEGACY_PACKAGE = "vllm.model_executor.models"
# vllm 0.33.0 vllm/config/model.py `_SUFFIX_TO_DEFAULTS`, in order (earlier entries take priority).
SUFFIX_DEFAULTS: tuple[tuple[str, tuple[str, str]], ...] = (
    ("ForCausalLM", ("generate", "none")),
    ("ForConditionalGeneration", ("generate", "none")),
    ("ChatModel", ("generate", "none")),
    ("LMHeadModel", ("generate", "none")),
    ("ForTextEncoding", ("pooling", "embed")),
    ("EmbeddingModel", ("pooling", "embed")),
    ("ForSequenceClassification", ("pooling", "classify")),
    ("ForTokenClassification", ("pooling", "classify")),
    ("ForAudioClassification", ("pooling", "classify")),
    ("ForImageClassification", ("pooling", "classify")),
    ("ForVideoClassification", ("pooling", "classify")),
    ("ClassificationModel", ("pooling", "classify")),
    ("ForRewardModeling", ("pooling", "embed")),
    ("RewardModel", ("pooling", "embed")),
    ("Model", ("pooling", "embed")),
)
_FILTERS: tuple[tuple[str | None, str | None], ...] = (
    (None, None), *sorted({d for _, d in SUFFIX_DEFAULTS}))
_AGGREGATE = "_VLLM_MODELS"


def resolve_module_name(rel: str) -> str:
    """vLLM's `_resolve_module_name`."""
    return rel if rel.startswith("vllm.") else f"{LEGACY_PACKAGE}.{rel}"


def _entries(node: ast.Dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in zip(node.keys, node.values, strict=True):
        if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Tuple) and \
                len(v.elts) >= 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                         for e in v.elts[:2]):
            mod = v.elts[0]
            assert isinstance(mod, ast.Constant)
            out[k.value] = resolve_module_name(str(mod.value))
    return out


def read_registry(text: str) -> dict[str, str]:
    """architecture -> module, as `_VLLM_MODELS` merges the registry's tables (later tables win); every
    module-level table of `"Arch": ("module", "Class")` entries when there is no `_VLLM_MODELS`."""
    tree = ast.parse(text)
    tables: dict[str, ast.Dict] = {}
    order: list[str] = []
    aggregate: ast.Dict | None = None
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
            continue
        if target.id == _AGGREGATE:
            aggregate = value
        else:
            tables[target.id] = value
            order.append(target.id)
    if aggregate is not None:
        merged: dict[str, str] = {}
        for k, v in zip(aggregate.keys, aggregate.values, strict=True):
            if k is None and isinstance(v, ast.Name) and v.id in tables:
                merged.update(_entries(tables[v.id]))
            elif isinstance(k, ast.Constant):
                merged.update(_entries(ast.Dict(keys=[k], values=[v])))
        return merged
    merged = {}
    for name in order:
        merged.update(_entries(tables[name]))
    return merged


def normalize_arch(arch: str, models: dict[str, str], runner: str | None = None,
                   convert: str | None = None) -> str | None:
    """The key vLLM 0.33 serves `arch` with (`_normalize_arch`), or None when it is no key."""
    if arch in models:
        return arch
    for suffix, (r, c) in SUFFIX_DEFAULTS:  # try_match_architecture_defaults: the first fitting suffix
        if (runner is None or runner == r) and (convert is None or convert == c) and arch.endswith(suffix):
            for repl, _ in SUFFIX_DEFAULTS:
                base = arch.replace(suffix, repl)
                if base in models:
                    return base
            return None
    return None


def variants(arch: str) -> set[str]:
    """`arch` with its suffix (every one it ends with) swapped for every other suffix: names the checkpoints
    of that model family may declare."""
    out = {arch}
    for suffix, _ in SUFFIX_DEFAULTS:
        if arch.endswith(suffix):
            stem = arch[: -len(suffix)]
            out.update(stem + repl for repl, _ in SUFFIX_DEFAULTS)
    return out


# vllm/transformers_utils/configs/eagle.py: a speculative draft's architectures are the target model's with
# a method prefix (`Eagle{arch}`, `Eagle3{arch}`, `DFlash{arch}`), longest first.
DRAFT_PREFIXES = ("Eagle3", "DFlash", "Eagle")


@dataclass(frozen=True)
class Capture:
    """A checkpoint architecture that the edit moves from another model to the target model's new key."""

    architecture: str  # what a checkpoint declares
    new_key: str  # the added key that now serves it
    old_key: str  # the key that served it before (for a draft: the key serving the model it drafts for)
    old_module: str
    draft: bool = False  # the new key is a speculative-draft name of another model's architecture


def owns(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def captures(base: dict[str, str], head: dict[str, str], package: str) -> list[Capture]:
    """Architectures served before the edit by another package's key and after it by a key added for
    `package` (resolved under every runner/convert filter vLLM may apply)."""
    added = {k for k, m in head.items() if k not in base and owns(m, package)}
    if not added:
        return []
    names: set[str] = set()
    for key in (*base, *head):
        names |= variants(key)
    # A name resolves to an added key K only as K itself or as K with its suffix swapped (a variant of K),
    # unless a suffix occurs in it twice (`str.replace` swaps every occurrence): only those are resolved.
    near = {v for k in added for v in variants(k)}
    names = {n for n in names if n in near or any(n.count(sfx) > 1 for sfx, _ in SUFFIX_DEFAULTS)}
    found: dict[tuple[str, str], Capture] = {}
    for name in sorted(names):
        for runner, convert in _FILTERS:
            now = normalize_arch(name, head, runner, convert)
            if now not in added:
                continue
            before = normalize_arch(name, base, runner, convert)
            if before is None or owns(base[before], package):
                continue
            assert now is not None
            found.setdefault((name, now), Capture(name, now, before, base[before]))
    for key in sorted(added):  # `Eagle3DeepseekV3ForCausalLM` names DeepSeek's drafts, served or not before
        prefix = next((p for p in DRAFT_PREFIXES if key.startswith(p) and len(key) > len(p)), None)
        if prefix is None or (key, key) in found:
            continue
        drafted = key[len(prefix):]
        for runner, convert in _FILTERS:
            before = normalize_arch(drafted, base, runner, convert)
            if before is not None and not owns(base[before], package):
                found[(key, key)] = Capture(key, key, before, base[before], draft=True)
                break
    return sorted(found.values(), key=lambda c: (c.new_key, c.architecture))


def models_mapped(models: dict[str, str], packages: str) -> set[str]:
    """Model package names (`<packages>.<name>`) some architecture maps to."""
    prefix = packages + "."
    return {m[len(prefix):].split(".", 1)[0] for m in models.values() if m.startswith(prefix)}
