"""FT2xx the manifest's envelope against the policy.

The manifest's schema (`fasttrack.manifest`) already rejects what is self-evidently wrong (unknown keys,
min > max, grid points outside the ranges) as an input error. These rules judge what the *policy* bounds:
which GPUs, TP sizes, batch and context ranges, dtypes, graph modes and grid sizes a fast-track
contribution may claim, and whether its fallback is real (the guard and stock path exist in the
contribution, the metric is created in its code). Every finding names the manifest field.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterator
from math import prod

from fasttrack.facts.model import Facts
from fasttrack.facts.paths import contribution_root, manifest_path, module_candidates
from fasttrack.findings import Finding
from fasttrack.manifest import MANIFEST_FILE, Manifest
from fasttrack.rules.base import Catalogue

catalogue = Catalogue("envelope")

_REF_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def _manifest_path(ctx: Facts) -> str:
    return manifest_path(ctx)


def _contribution_dir(ctx: Facts) -> str:
    return contribution_root(ctx)


def _field_line(ctx: Facts, field: str) -> int | None:
    """The line of a dotted manifest field (`envelope.batch.max`, `claims[1].gpu`), found in the TOML text
    by its table header and key; None when it cannot be placed (it is a hint for annotations only)."""
    text = ctx.head_text(_manifest_path(ctx))
    if text is None:
        return None
    parts = re.findall(r"[A-Za-z_][\w-]*|\[\d+\]", field)
    index = 0
    keys: list[str] = []
    for p in parts:
        if p.startswith("["):
            index = int(p[1:-1])
        else:
            keys.append(p)
    lines = text.splitlines()
    # Try the deepest table header first: [envelope.batch] + "max =", then [envelope] + "batch =" ...
    for split in range(len(keys) - 1, 0, -1):
        table, key = ".".join(keys[:split]), keys[split]
        headers = [i for i, line in enumerate(lines)
                   if re.match(rf"^\s*\[\[?\s*{re.escape(table)}\s*\]\]?\s*(#.*)?$", line)]
        if not headers:
            continue
        start = headers[min(index, len(headers) - 1)]
        for i in range(start + 1, len(lines)):
            if re.match(r"^\s*\[", lines[i]):
                break
            if re.match(rf"^\s*{re.escape(key)}\s*=", lines[i]):
                return i + 1
        return start + 1
    return None


def _error(ctx: Facts, code: str, field: str, message: str, fix: str) -> Finding:
    return Finding.error(code, f"{field}: {message}", path=_manifest_path(ctx), line=_field_line(ctx, field),
                         fix=fix)


@catalogue.rule("FT200", "The contribution has no fasttrack.toml manifest.")
def manifest_missing(ctx: Facts) -> Iterator[Finding]:
    """Without a manifest there is no declared envelope, fallback or evidence suite, so nothing beyond
    confinement can be judged: the PR cannot pass as fast-track."""
    if ctx.manifest is not None:
        return
    if ctx.contribution_dir:
        where = ctx.contribution_dir
    elif ctx.model:
        where = f"{ctx.policy.models.packages_dir.rstrip('/')}/{ctx.model}/<vendor>/specialized_decode"
    else:
        where = "the contribution's directory inside the model's package"
    path = posixpath.join(ctx.contribution_dir, MANIFEST_FILE) if ctx.contribution_dir else None
    yield Finding.error(
        "FT200", "no contribution manifest (fasttrack.toml): the envelope, the fallback and the evidence "
        "suite are undeclared", path=path,
        fix=f"add {where}/{MANIFEST_FILE} with schema_version = 1 and the [contribution] (name, model, "
            "target_path), [envelope], [fallback] (metric, stock_path, guard) and [evidence] (kernel_tests) "
            "tables; `fasttrack schema manifest` prints the schema and docs/escapes-and-envelope.md has an "
            "example")


@catalogue.rule("FT201", "The envelope's hardware is not bounded by the policy.")
def hardware(ctx: Facts) -> Iterator[Finding]:
    """At most `envelope.max_hardware_kinds` GPU kinds, each one the policy knows (`known_hardware`), with
    the compute capability the policy records for it, and no GPU listed twice."""
    m = ctx.manifest
    if m is None:
        return
    bounds = ctx.policy.envelope
    hw = m.envelope.hardware
    names = [h.name for h in hw]
    if len(hw) > bounds.max_hardware_kinds:
        yield _error(ctx, "FT201", "envelope.hardware", f"{len(hw)} GPU kinds declared, the policy allows at "
                     f"most {bounds.max_hardware_kinds}",
                     fix="declare only the GPUs the evidence covers; send the rest as separate contributions")
    for i, h in enumerate(hw):
        if names.index(h.name) != i:
            yield _error(ctx, "FT201", f"envelope.hardware[{i}].name", f"{h.name!r} is listed twice",
                         fix="list each GPU once")
            continue
        known = bounds.known_hardware.get(h.name)
        if known is None:
            listed = ", ".join(sorted(bounds.known_hardware)) or "none"
            yield _error(ctx, "FT201", f"envelope.hardware[{i}].name", f"unknown GPU {h.name!r} (the policy "
                         f"knows: {listed})", fix="use the name torch.cuda.get_device_name reports for a GPU "
                         "the policy lists, or ask the maintainers to add it to the policy")
        elif known != h.compute_capability:
            yield _error(ctx, "FT201", f"envelope.hardware[{i}].compute_capability",
                         f"{h.name} is compute capability {known}, not {h.compute_capability}",
                         fix=f'set compute_capability = "{known}"')


@catalogue.rule("FT202", "The envelope's TP sizes are not allowed or exceed the NVLink domain.")
def tensor_parallel(ctx: Facts) -> Iterator[Finding]:
    """Every TP size must be one of the policy's `tp_sizes` and fit in one NVLink domain
    (`nvlink_domain` GPUs): a contribution's collectives may not cross the node fabric."""
    m = ctx.manifest
    if m is None:
        return
    bounds = ctx.policy.envelope
    for i, tp in enumerate(m.envelope.tp):
        if tp > bounds.nvlink_domain:
            yield _error(ctx, "FT202", f"envelope.tp[{i}]", f"TP {tp} spans more than one NVLink domain "
                         f"({bounds.nvlink_domain} GPUs)", fix=f"limit TP to {bounds.nvlink_domain} or fewer")
        elif tp not in bounds.tp_sizes:
            yield _error(ctx, "FT202", f"envelope.tp[{i}]", f"TP {tp} is not an allowed size "
                         f"({', '.join(map(str, bounds.tp_sizes))})",
                         fix="declare only TP sizes the policy allows")


@catalogue.rule("FT203", "The envelope declares pipeline or expert parallelism the policy does not allow.")
def pipeline_expert(ctx: Facts) -> Iterator[Finding]:
    """Pipeline parallelism (`envelope.pp` other than [1]) and expert parallelism (`expert_parallel`)
    change which ranks hold which layers and experts; a fast-track contribution may declare them only when
    the policy allows it (`allow_pipeline_parallel`, `allow_expert_parallel`)."""
    m = ctx.manifest
    if m is None:
        return
    bounds = ctx.policy.envelope
    pp = [p for p in m.envelope.pp if p != 1]
    if pp and not bounds.allow_pipeline_parallel:
        yield _error(ctx, "FT203", "envelope.pp", f"pipeline parallelism {pp} is declared but the policy "
                     "does not allow it for fast-track", fix="set pp = [1] and fall back to stock under PP")
    if m.envelope.expert_parallel and not bounds.allow_expert_parallel:
        yield _error(ctx, "FT203", "envelope.expert_parallel", "expert parallelism is declared but the "
                     "policy does not allow it for fast-track",
                     fix="set expert_parallel = false and fall back to stock under EP")


@catalogue.rule("FT204", "The envelope's batch range exceeds the policy's maximum.")
def batch_range(ctx: Facts) -> Iterator[Finding]:
    """`envelope.batch.max` (decode rows per step) may not exceed the policy's `max_batch`."""
    m = ctx.manifest
    if m is None:
        return
    limit = ctx.policy.envelope.max_batch
    if m.envelope.batch.max > limit:
        yield _error(ctx, "FT204", "envelope.batch.max", f"batch {m.envelope.batch.max} exceeds the policy's "
                     f"max_batch {limit}", fix=f"set envelope.batch.max to at most {limit}")


@catalogue.rule("FT205", "The envelope's context range exceeds the policy's maximum.")
def context_range(ctx: Facts) -> Iterator[Finding]:
    """`envelope.context.max` (tokens of KV cache per request) may not exceed the policy's `max_context`."""
    m = ctx.manifest
    if m is None:
        return
    limit = ctx.policy.envelope.max_context
    if m.envelope.context.max > limit:
        yield _error(ctx, "FT205", "envelope.context.max", f"context {m.envelope.context.max} exceeds the "
                     f"policy's max_context {limit}", fix=f"set envelope.context.max to at most {limit}")


@catalogue.rule("FT206", "The envelope declares dtypes the policy does not allow.")
def dtypes(ctx: Facts) -> Iterator[Finding]:
    """Every entry of `envelope.dtypes` must be one of the policy's `dtypes`, each listed once."""
    m = ctx.manifest
    if m is None:
        return
    allowed = ctx.policy.envelope.dtypes
    seen: set[str] = set()
    for i, dt in enumerate(m.envelope.dtypes):
        if dt in seen:
            yield _error(ctx, "FT206", f"envelope.dtypes[{i}]", f"{dt!r} is listed twice",
                         fix="list each dtype once")
        elif dt not in allowed:
            yield _error(ctx, "FT206", f"envelope.dtypes[{i}]", f"dtype {dt!r} is not allowed "
                         f"({', '.join(allowed)})", fix="declare only dtypes the policy allows")
        seen.add(dt)


@catalogue.rule("FT207", "The envelope's CUDA-graph mode is not allowed.")
def cuda_graph(ctx: Facts) -> Iterator[Finding]:
    """`envelope.cuda_graph` must be one of the policy's `cuda_graph_modes`."""
    m = ctx.manifest
    if m is None:
        return
    modes = ctx.policy.envelope.cuda_graph_modes
    if m.envelope.cuda_graph not in modes:
        yield _error(ctx, "FT207", "envelope.cuda_graph", f"CUDA-graph mode {m.envelope.cuda_graph!r} is not "
                     f"allowed ({', '.join(modes)})", fix="declare a mode the policy allows")


@catalogue.rule("FT208", "The envelope's speculative-decoding widths exceed the policy's bound.")
def spec_decode(ctx: Facts) -> Iterator[Finding]:
    """Each of `envelope.spec_decode_widths` (query rows per request in verification: 1 + draft tokens)
    may not exceed the policy's `max_spec_decode_width`."""
    m = ctx.manifest
    if m is None:
        return
    limit = ctx.policy.envelope.max_spec_decode_width
    for i, w in enumerate(m.envelope.spec_decode_widths):
        if w > limit:
            yield _error(ctx, "FT208", f"envelope.spec_decode_widths[{i}]", f"width {w} exceeds the policy's "
                         f"max_spec_decode_width {limit}", fix=f"declare widths of at most {limit}")


def grid_size(manifest: Manifest) -> int:
    """Points of the evidence grid (hardware x TP x batch x context x dtype x spec width), counted
    without building it."""
    env = manifest.envelope
    return prod((len(env.hardware), len(env.tp), len(env.batches()), len(env.contexts()), len(env.dtypes),
                 len(env.spec_decode_widths)))


@catalogue.rule("FT209", "The envelope's evidence grid is larger than the policy allows.")
def grid(ctx: Facts) -> Iterator[Finding]:
    """The envelope expands into a grid of points that evidence must cover: hardware x TP x batches
    (declared points plus 1, 2 and the ends) x contexts x dtypes x spec-decode widths. More points than the
    policy's `max_grid_points` cannot be covered with evidence: the envelope is effectively unbounded."""
    m = ctx.manifest
    if m is None:
        return
    limit = ctx.policy.envelope.max_grid_points
    n = grid_size(m)
    if n > limit:
        yield _error(ctx, "FT209", "envelope", f"the grid has {n} points, more than the policy's "
                     f"max_grid_points {limit}", fix="narrow the envelope (fewer GPUs, TP sizes, dtypes, "
                     "widths) or sample fewer grid_batches/grid_contexts")


def _split_ref(ref: str) -> tuple[str, str] | None:
    if not _REF_RE.match(ref):
        return None
    module, _, name = ref.partition(":")
    return module, name


def _module_file(ctx: Facts, module: str) -> tuple[str | None, str | None]:
    """(file inside the contribution, file found outside it) for a dotted module, looked up the way
    `fasttrack collect` imports it: from the contribution's parent directory, the contribution itself,
    the head's root, and (for `<contribution name>.x`) inside the contribution directory."""
    contrib = _contribution_dir(ctx)
    outside: str | None = None
    for path in module_candidates(ctx, module):
        if ctx.head_text(path) is None:
            continue
        if contrib and (path == contrib or path.startswith(contrib + "/")):
            return path, None
        outside = outside or path
    return None, outside


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level (defs, classes, assignments, imports; also inside top-level
    if/try blocks), which is what `module:callable` can name."""
    names: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.If | ast.Try | ast.With):
            todo.extend(node.body)
            todo.extend(getattr(node, "orelse", []))
            todo.extend(getattr(node, "finalbody", []))
            for h in getattr(node, "handlers", []):
                todo.extend(h.body)
    return names


def _check_ref(ctx: Facts, field: str, ref: str, code: str = "FT210") -> Iterator[Finding]:
    split = _split_ref(ref)
    if split is None:
        yield _error(ctx, code, field, f"{ref!r} is not `module:callable`",
                     fix="name it as a dotted module and a top-level callable, e.g. kimi_k3.guard:decide")
        return
    module, name = split
    path, outside = _module_file(ctx, module)
    if path is None:
        where = f"; it resolves to {outside}, outside the contribution" if outside else ""
        yield _error(ctx, code, field, f"module {module!r} is not a file of the contribution "
                     f"({_contribution_dir(ctx) or '.'}){where}",
                     fix="point it at a module inside the contribution (importable from its parent "
                         "directory)")
        return
    text = ctx.head_text(path) or ""
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError) as exc:
        yield _error(ctx, code, field, f"{path} does not parse ({exc}), so {name!r} cannot be found",
                     fix=f"fix the syntax of {path}")
        return
    if name not in _top_level_names(tree):
        yield _error(ctx, code, field, f"{path} defines no top-level {name!r}",
                     fix=f"define {name} at the top level of {path}, or name the callable that exists")


def _source_files(ctx: Facts) -> Iterator[tuple[str, str]]:
    """(path, text) of the contribution's non-test Python files in the head."""
    yield from ctx.contribution_sources


def _creates_counter(tree: ast.Module, names: set[str]) -> bool:
    """Whether the module builds a prometheus_client Counter whose name is one of `names` (a literal, or
    a module-level constant holding one)."""
    counter_names: set[str] = set()  # local names of prometheus_client.Counter
    module_names: set[str] = set()  # local names of the prometheus_client module
    constants: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus_client"):
            counter_names.update(a.asname or a.name for a in node.names if a.name == "Counter")
        elif isinstance(node, ast.Import):
            module_names.update(a.asname or a.name for a in node.names if a.name == "prometheus_client")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    constants[t.id] = node.value.value
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        is_counter = (isinstance(f, ast.Name) and f.id in counter_names) or (
            isinstance(f, ast.Attribute) and f.attr == "Counter" and isinstance(f.value, ast.Name)
            and f.value.id in module_names)
        if not is_counter:
            continue
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
        if isinstance(arg, ast.Constant) and arg.value in names:
            return True
        if isinstance(arg, ast.Name) and constants.get(arg.id) in names:
            return True
    return False


@catalogue.rule("FT210", "The fallback is not real: guard, stock path or metric missing from the code.")
def fallback(ctx: Facts) -> Iterator[Finding]:
    """The manifest's `[fallback]` must name a guard and a stock path (`module:callable`) that exist in the
    contribution (checked statically: the module's file is inside the contribution directory and defines
    the name at top level; nothing is imported), and a Prometheus counter (`fallback.metric`) that the
    contribution's non-test code creates with `prometheus_client.Counter` (the name, or the name without
    its `_total` suffix, as prometheus_client adds it). A declared counter that is never created is not a
    visible fallback."""
    m = ctx.manifest
    if m is None:
        return
    yield from _check_ref(ctx, "fallback.guard", m.fallback.guard)
    yield from _check_ref(ctx, "fallback.stock_path", m.fallback.stock_path)
    metric = m.fallback.metric
    names = {metric, metric.removesuffix("_total")} if metric.endswith("_total") else {metric}
    mentioned = False
    for path, text in _source_files(ctx):
        if not any(n in text for n in names):
            continue
        try:
            tree = ast.parse(text, filename=path)
        except (SyntaxError, ValueError):
            continue
        literal = any(isinstance(n, ast.Constant) and n.value in names for n in ast.walk(tree))
        mentioned = mentioned or literal
        if literal and _creates_counter(tree, names):
            return
    if mentioned:
        yield _error(ctx, "FT210", "fallback.metric", f"{metric!r} appears in the contribution but no "
                     "prometheus_client.Counter is created with it", fix="create the counter with "
                     f"prometheus_client.Counter({metric.removesuffix('_total')!r}, ..., ['reason']) and "
                     "increment it on every fallback")
    else:
        yield _error(ctx, "FT210", "fallback.metric", f"{metric!r} does not appear in the contribution's "
                     "code, so fallbacks are not visible", fix="create the counter with "
                     f"prometheus_client.Counter({metric.removesuffix('_total')!r}, ..., ['reason']) in the "
                     "guard and increment it on every fallback")


@catalogue.rule("FT212", "The manifest names no [trace] smoke and guard_input for the trace to call.")
def trace_calls(ctx: Facts) -> Iterator[Finding]:
    """The effect trace imports the changed modules and then calls `[trace] smoke` (no arguments, tiny CPU
    inputs) and the `[fallback] guard` at envelope points (`[trace] guard_input` turns a point into the
    guard's argument), so a patch made only when a function runs is seen too (FT138, FT130). A manifest
    without them leaves that unseen: fail closed. Both must name a top-level callable of a contribution
    module (checked statically, like FT210)."""
    m = ctx.manifest
    if m is None:
        return
    if m.trace is None:
        yield _error(ctx, "FT212", "trace", "the manifest has no [trace] table: the effect trace would only "
                     "import the code, never call it", fix='add [trace] smoke = "pkg.module:function" (no '
                     'arguments, tiny CPU inputs, a few seconds) and guard_input = "pkg.module:function" '
                     "(an envelope point dict -> the guard's argument)")
        return
    yield from _check_ref(ctx, "trace.smoke", m.trace.smoke, "FT212")
    if m.trace.guard_input is None:
        yield _error(ctx, "FT212", "trace.guard_input", "no guard_input: the trace cannot ask the guard "
                     "about points inside and outside the envelope",
                     fix='add guard_input = "pkg.module:function"')
    else:
        yield from _check_ref(ctx, "trace.guard_input", m.trace.guard_input, "FT212")


@catalogue.rule("FT211", "A claim names a point outside the envelope.")
def claims(ctx: Facts) -> Iterator[Finding]:
    """Each claim's GPU must be declared hardware, and its TP, batch, context and dtype must lie in the
    envelope (evidence is only collected there); `gpus` must be at least its TP."""
    m = ctx.manifest
    if m is None:
        return
    env = m.envelope
    gpus = {h.name for h in env.hardware}
    fix = "claim only points inside the envelope (or widen the envelope, with evidence)"
    for i, c in enumerate(m.claims):
        if c.gpu not in gpus:
            yield _error(ctx, "FT211", f"claims[{i}].gpu", f"claim {c.name!r} is on {c.gpu!r}, which "
                         "envelope.hardware does not declare", fix=fix)
        if c.tp not in env.tp:
            yield _error(ctx, "FT211", f"claims[{i}].tp", f"claim {c.name!r} is at TP {c.tp}, not in "
                         f"envelope.tp {env.tp}", fix=fix)
        if not env.batch.contains(c.batch):
            yield _error(ctx, "FT211", f"claims[{i}].batch", f"claim {c.name!r} is at batch {c.batch}, "
                         f"outside envelope.batch {env.batch.min}..{env.batch.max}", fix=fix)
        if not env.context.contains(c.context):
            yield _error(ctx, "FT211", f"claims[{i}].context", f"claim {c.name!r} is at context {c.context}, "
                         f"outside envelope.context {env.context.min}..{env.context.max}", fix=fix)
        if c.dtype not in env.dtypes:
            yield _error(ctx, "FT211", f"claims[{i}].dtype", f"claim {c.name!r} is in {c.dtype!r}, not in "
                         f"envelope.dtypes {env.dtypes}", fix=fix)
        if c.gpus < c.tp:
            yield _error(ctx, "FT211", f"claims[{i}].gpus", f"claim {c.name!r} uses {c.gpus} GPU(s) at TP "
                         f"{c.tp}", fix="set gpus to at least the claim's TP")

