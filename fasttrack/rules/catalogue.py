"""The catalogue's declared metadata: for every rule code its checklist group, tags, default severity, why
it matters, a failing example, and (only where a rule is hard to fixture) why it has no fixture pair.

The rule itself (its check, its one-line summary and its docstring, the "what") lives in its family's
module; `fasttrack.rules.all_rules()` joins the two and refuses a rule without metadata or metadata without
a rule. The checklist groups are the dashboard's tool-decided items, in checklist order; every code belongs
to exactly one (the renderers read them from the Verdict, never from here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fasttrack.findings import Severity
from fasttrack.ruleinfo import ANTI_GAMING, CUSTODY, PRESENCE, GroupInfo

JUDGE = GroupInfo(
    id="judge", title="The judge is untouched",
    detail="no edit to the policy, allowed signers, baselines, workflows or fasttrack; an accepted harness")
CONFINED = GroupInfo(
    id="confined", title="Confined to one model's own code",
    detail="path zones, hooks, symlinks, modes, loadable files, escapes and the effect trace, and nothing "
           "else importing the changed code")
ENVELOPE = GroupInfo(
    id="envelope", title="Envelope bounded and honoured",
    detail="finite hardware, TP in one NVLink domain, bounded batch and context, guard agrees with the "
           "manifest")
EVIDENCE = GroupInfo(
    id="evidence", title="Evidence is for this code, fresh and signed",
    detail="bundle parses, digests match the head and the engine baseline, signature from an allowed signer, "
           "raw logs match")
NUMERICAL = GroupInfo(
    id="numerical", title="Numerical check: kernel tests at every envelope point, timed outputs match stock",
    detail="a maintainer countersigns below after reading the tolerances")
PERFORMANCE = GroupInfo(
    id="performance", title="Performance claims hold",
    detail="recomputed from raw samples at the CI's lower bound against the engine's stock, like with like, "
           "never slower than stock, audits agree")
EVALS = GroupInfo(
    id="evals", title="Model-level evals within thresholds",
    detail="every eval on the right side of a threshold the policy bounds")
SANITIZERS = GroupInfo(
    id="sanitizers", title="Sanitizers clean",
    detail="memcheck, racecheck and synccheck ran and found nothing")

GROUPS: Final = (JUDGE, CONFINED, ENVELOPE, EVIDENCE, NUMERICAL, PERFORMANCE, EVALS, SANITIZERS)


@dataclass(frozen=True)
class Meta:
    group: GroupInfo
    why: str
    example: str
    severity: Severity = Severity.ERROR
    tags: tuple[str, ...] = ()
    # Why this rule has no passing/failing fixture pair in tests/rule_pairs (None: it must have one).
    fixture_exempt: str | None = None


W, INFO = Severity.WARNING, Severity.INFO

META: Final[dict[str, Meta]] = {
    # ----------------------------------------------------------------------------- confinement: paths
    "FT100": Meta(CONFINED, "an empty change set has nothing to confine and nothing to measure",
                  "a range whose base and head hold the same tree", tags=("paths",)),
    "FT101": Meta(CONFINED, "shared code runs for every model; a fast-track PR must not reach it",
                  "a PR that edits vllm/model_executor/layers/linear.py beside its model files",
                  tags=("paths",)),
    "FT102": Meta(CONFINED, "the scheduler, sampler and KV cache are shared by every request",
                  "a PR that edits vllm/v1/core/sched/scheduler.py", tags=("paths",)),
    "FT103": Meta(CONFINED, "fast-track serves one model; a change to two is a change to shared behaviour",
                  "a PR that edits vllm/models/kimi_k3/ and vllm/models/llama/", tags=("paths",)),
    "FT104": Meta(CONFINED, "a hook file is shared: only the model's own entries may change in it",
                  "a registry.py edit that adds another model's architecture or rewrites a lookup",
                  tags=("paths", "hooks")),
    "FT105": Meta(CONFINED, "a link out of the model root lets model code read or shadow shared files",
                  "vllm/models/kimi_k3/layers.py -> ../../model_executor/layers/linear.py",
                  tags=("paths", "symlinks")),
    "FT106": Meta(CONFINED, "a binary or a submodule cannot be reviewed or analysed",
                  "an added vllm/models/kimi_k3/kernel.so", tags=("paths",)),
    "FT107": Meta(CONFINED, "an executable bit turns data into something a build or CI step may run",
                  "chmod +x on an existing vllm/models/kimi_k3/config.py", severity=W, tags=("paths",)),
    "FT108": Meta(CONFINED, "with several manifests no single envelope or evidence bundle can be judged",
                  "changed files under two directories that each hold a fasttrack.toml", tags=("manifest",)),
    "FT109": Meta(CONFINED, "a manifest for another model or place would judge the PR by the wrong envelope",
                  "contribution.model = \"llama\" in a manifest under vllm/models/kimi_k3/",
                  tags=("manifest",)),
    # ---------------------------------------------------------------------- confinement: blast radius
    "FT110": Meta(CONFINED, "code another model imports changes that model's behaviour without its review",
                  "vllm/models/llama/model.py imports the changed vllm.models.kimi_k3.layers",
                  tags=("imports",)),
    "FT111": Meta(CONFINED, "model code imported by shared code runs on every model's path",
                  "vllm/model_executor/warmup.py imports the changed vllm.models.kimi_k3.ops",
                  tags=("imports",)),
    "FT112": Meta(CONFINED, "a reviewer reads how far the change reaches before trusting the other checks",
                  "(information) 'the PR changes 3 modules; no other model imports them'", severity=INFO,
                  tags=("imports",),
                  fixture_exempt="a summary, never a failure: it has no failing input"),
    "FT113": Meta(CONFINED, "without the import graph nobody can say what the change reaches (fail closed)",
                  "a changed file grimp cannot parse", tags=("imports",)),
    "FT114": Meta(CONFINED, "importing a.b.c runs a/__init__: a changed package __init__ runs for every "
                            "importer below it",
                  "a changed vllm/models/kimi_k3/__init__.py that registers at import, imported through by "
                  "shared code", tags=("imports",)),
    # ------------------------------------------------------------------------- confinement: escapes
    "FT120": Meta(CONFINED, "a monkeypatch changes shared code for every model while the diff stays local",
                  "from vllm.model_executor.layers.linear import RowParallelLinear; "
                  "RowParallelLinear.forward = fast_forward", tags=("escape",)),
    "FT121": Meta(CONFINED, "the call form of a monkeypatch is the same escape",
                  "setattr(vllm.model_executor.layers.linear.RowParallelLinear, 'forward', f)",
                  tags=("escape",)),
    "FT122": Meta(CONFINED, "sys.modules, the import system and builtins can replace any shared module",
                  "sys.modules['vllm.model_executor.layers.linear'] = my_linear", tags=("escape",)),
    "FT123": Meta(CONFINED, "the environment and global torch flags change every model in the process",
                  "os.environ['VLLM_ATTENTION_BACKEND'] = 'FLASHINFER' at module level", tags=("escape",)),
    "FT124": Meta(CONFINED, "a global registry serves every model: an entry there is shared behaviour",
                  "@CustomOp.register('rms_norm') on a class of the contribution", tags=("escape",)),
    "FT125": Meta(CONFINED, "an op outside the contribution's namespace overrides what other models call",
                  "torch.library.Library('vllm', 'IMPL').impl('rms_norm', f, 'CUDA')", tags=("escape",)),
    "FT126": Meta(CONFINED, "loading or reloading shared modules by string hides the change from the graph",
                  "importlib.reload(vllm.model_executor.layers.linear)", tags=("escape",)),
    "FT127": Meta(CONFINED, "code built from strings hides everything the other escape rules look for",
                  "exec(open('patch.txt').read())", severity=W, tags=("escape",)),
    "FT128": Meta(CONFINED, "a file that cannot be parsed cannot be checked (fail closed)",
                  "a changed .py file with a syntax error", tags=("escape",)),
    "FT146": Meta(CONFINED, "process-wide state outside the policy's allow-list changes every model",
                  "torch.backends.cuda.enable_flash_sdp(False) at module level", tags=("escape",)),
    # ---------------------------------------------------------------------- confinement: effect trace
    "FT130": Meta(CONFINED, "what a module does when imported counts, whatever spelling did it",
                  "operator.setitem(vars(linear_mod), 'RowParallelLinear', Mine) seen by the trace",
                  tags=("trace",)),
    "FT131": Meta(CONFINED, "an effect nobody can attribute is still an effect (fail closed)",
                  "a thread started at import that patches a shared class later", tags=("trace",)),
    "FT132": Meta(CONFINED, "a module that cannot be imported in the sandbox cannot be shown confined",
                  "a changed module that imports a package the sandbox does not have", tags=("trace",)),
    "FT133": Meta(CONFINED, "sockets, processes and native code reach past what the analysis can see",
                  "ctypes.CDLL(None).setenv(b'X', b'1', 1) at import", tags=("trace",)),
    "FT134": Meta(CONFINED, "generated code and interpreter walks build what the static scan cannot read",
                  "[o for o in gc.get_objects() if type(o).__name__ == 'RowParallelLinear']",
                  tags=("trace",)),
    "FT138": Meta(CONFINED, "code that patches only when called is seen only when the trace calls it",
                  "a smoke function that sets json.dumps, or a guard that answers fused at batch max + 1",
                  tags=("trace",)),
    # ---------------------------------------------------------------------------- confinement: source
    "FT135": Meta(CONFINED, "Python would run other text than the UTF-8 a reviewer and the analysis read",
                  "a .py file that starts with '# coding: utf-7'", tags=("source",)),
    "FT136": Meta(CONFINED, "loadable non-source files run code nobody reviewed",
                  "an added vllm/models/kimi_k3/fast.pyc or fast.so", tags=("source",)),
    "FT137": Meta(CONFINED, "a module symlink is imported as whatever it points to",
                  "vllm/models/kimi_k3/ops.py -> notes.txt", tags=("source", "symlinks")),
    # ------------------------------------------------------------------------------ confinement: repo
    "FT140": Meta(CONFINED, "git metadata files change how fasttrack's own git reads the diff",
                  "an added .gitattributes with '*.py -diff'", tags=("repo",)),
    "FT141": Meta(CONFINED, "a new model needs a full review (weights loading, config, registry)",
                  "an added vllm/models/newmodel/ package that the registry maps an architecture to",
                  tags=("repo",)),
    "FT142": Meta(CONFINED, "a registry key that captures another model's checkpoints serves them new code",
                  "an added 'LlamaModel' key mapped to this model", tags=("repo", "hooks")),
    "FT143": Meta(CONFINED, "only the registry makes a directory a model: an unregistered one is shared code",
                  "an added vllm/models/helpers/ that no architecture maps to", tags=("repo",)),
    # --------------------------------------------------------------------------------------- envelope
    "FT200": Meta(ENVELOPE, "without a manifest there is no envelope, fallback or evidence to judge",
                  "a contribution directory with no fasttrack.toml", tags=("manifest",)),
    "FT201": Meta(ENVELOPE, "evidence only speaks for the hardware it ran on",
                  "hardware = [{ name = \"NVIDIA A100\" }] where the policy allows H200 only"),
    "FT202": Meta(ENVELOPE, "a TP size past one NVLink domain is a different deployment",
                  "tp = [16] on an 8-GPU NVLink domain"),
    "FT203": Meta(ENVELOPE, "pipeline and expert parallelism change the code path being judged",
                  "pipeline_parallel = [2] where the policy allows none"),
    "FT204": Meta(ENVELOPE, "an unbounded batch range cannot be covered by evidence",
                  "batch = { min = 1, max = 100000 }"),
    "FT205": Meta(ENVELOPE, "an unbounded context range cannot be covered by evidence",
                  "context = { min = 1, max = 10000000 }"),
    "FT206": Meta(ENVELOPE, "a dtype the policy does not know has no tolerance to check against",
                  "dtypes = [\"float8_e5m2\"] where the policy allows bfloat16"),
    "FT207": Meta(ENVELOPE, "the CUDA-graph mode decides what is timed and what runs in production",
                  "cuda_graph = \"none\" where the policy requires full"),
    "FT208": Meta(ENVELOPE, "speculative-decoding widths multiply the points the kernel must serve",
                  "spec_decode_widths = [64]"),
    "FT209": Meta(ENVELOPE, "an evidence grid past the policy's bound cannot be collected and checked",
                  "grid_batches with 500 sizes"),
    "FT210": Meta(ENVELOPE, "outside the envelope the stock path must run, and production must see it",
                  "a guard module that never counts a fallback", tags=("fallback",)),
    "FT211": Meta(ENVELOPE, "a claim outside the envelope is about code production never runs",
                  "a claim at batch 512 in an envelope of batch <= 64"),
    "FT212": Meta(ENVELOPE, "a trace that only imports never runs what patches only when called",
                  "a manifest without [trace] smoke", tags=("fallback",)),
    # --------------------------------------------------------------------------------------- evidence
    "FT300": Meta(EVIDENCE, "a contribution's only proof is its evidence bundle",
                  "evidence/kimi_k3/ missing", tags=(PRESENCE,)),
    "FT301": Meta(EVIDENCE, "a bundle that does not parse cannot say anything",
                  "a statement.json with an unknown field predicate.bogus", tags=(PRESENCE,)),
    "FT302": Meta(EVIDENCE, "evidence for other code says nothing about this code",
                  "a kernel.py edited after the bundle was collected", tags=(CUSTODY,)),
    "FT303": Meta(EVIDENCE, "only an allowed signer vouches that the figures came from a real run",
                  "a statement signed with a key not in allowed_signers", tags=(CUSTODY,)),
    "FT304": Meta(NUMERICAL, "a point without a passing kernel test is a point nobody checked",
                  "no kernel test recorded at batch 4, context 1"),
    "FT305": Meta(PERFORMANCE, "decode at batch 1 and 2 is where most kernels regress",
                  "no accepted timed benchmark at batch 2"),
    "FT306": Meta(NUMERICAL, "evidence from other hardware says nothing about this hardware",
                  "an envelope with B200 and a bundle collected on H200 only"),
    "FT307": Meta(NUMERICAL, "a failing kernel test is a wrong answer",
                  "a kernel test with outcome = failed"),
    "FT308": Meta(PERFORMANCE, "a claim must hold at the lower bound of its interval, not on a lucky median",
                  "min_speedup = 2.5 against a measured 2x"),
    "FT309": Meta(PERFORMANCE, "a candidate on two GPUs against stock on one is not a speedup",
                  "fused timed on 2 x H200 and stock on 1", tags=(ANTI_GAMING,)),
    "FT310": Meta(PERFORMANCE, "a fast-track kernel may never make any point slower",
                  "fused at 120 us where stock takes 100 us at batch 4"),
    "FT311": Meta(PERFORMANCE, "a result past the hardware's limits is a broken or gamed measurement",
                  "a variant moving bytes at 250 TB/s", tags=(ANTI_GAMING,)),
    "FT312": Meta(PERFORMANCE, "too few samples cannot bound a ratio",
                  "5 samples where the policy needs 20"),
    "FT313": Meta(NUMERICAL, "a fast kernel that computes something else is not faster",
                  "fused's timed outputs differ from stock's", tags=(ANTI_GAMING,)),
    "FT314": Meta(EVALS, "kernel tests can pass while the model's outputs drift",
                  "logit_max_abs_diff = 0.1 over a threshold of 0.05"),
    "FT315": Meta(SANITIZERS, "a race or an out-of-bounds access is a bug even when tests pass",
                  "racecheck reported 2 hazards"),
    "FT316": Meta(SANITIZERS, "a sanitizer that did not run found nothing because it looked at nothing",
                  "synccheck did not run (compute-sanitizer not found)", severity=W),
    "FT317": Meta(EVIDENCE, "figures without their machine cannot be compared or reproduced",
                  "environment.driver missing"),
    "FT318": Meta(EVIDENCE, "old evidence may describe a different driver, engine or kernel",
                  "a bundle collected 200 days ago over a 90-day limit", severity=W),
    "FT319": Meta(PERFORMANCE, "a timing protocol other than fasttrack's can flatter any kernel",
                  "benchmarks not timed as CUDA-graph replays", tags=(ANTI_GAMING,)),
    "FT320": Meta(EVIDENCE, "raw logs that do not match the statement mean an edited statement or log",
                  "a pytest.log edited after signing", tags=(ANTI_GAMING,)),
    "FT321": Meta(EVIDENCE, "a bundle for another contribution proves nothing about this one",
                  "predicate.contribution = \"other\"", tags=(PRESENCE, ANTI_GAMING)),
    "FT322": Meta(EVIDENCE, "parts collected on different stacks are not one measurement",
                  "statement.tp2.json collected with another driver", severity=W),
    "FT330": Meta(EVIDENCE, "an importable file the digest does not bind can change after the evidence",
                  "a .pth or importable data file outside the digest's listing", tags=(ANTI_GAMING,)),
    # ---------------------------------------------------------------------------------------- yardstick
    "FT335": Meta(EVIDENCE, "a speedup over a baseline of one's own choosing is no speedup",
                  "a bundle whose stock is demo.bench:my_stock", tags=(ANTI_GAMING,)),
    "FT336": Meta(PERFORMANCE, "stock on a slow backend the engine would never pick flatters the candidate",
                  "stock timed on the Triton MLA fallback where the engine runs FlashInfer on H200",
                  tags=(ANTI_GAMING,)),
    "FT337": Meta(PERFORMANCE, "claims against a variant the contribution supplies measure nothing",
                  "a claim against the contribution's own 'stock'", tags=(ANTI_GAMING,)),
    "FT338": Meta(NUMERICAL, "a loose tolerance passes any output", "a kernel test with tolerance = 1e9",
                  tags=(ANTI_GAMING,)),
    "FT339": Meta(NUMERICAL, "every variant, stock too, must match the engine's fp32 oracle",
                  "no oracle check recorded for fused at batch 1", tags=(ANTI_GAMING,)),
    "FT340": Meta(NUMERICAL, "point tests that do not run or do not record an error prove nothing",
                  "a manifest with no point_tests"),
    "FT341": Meta(PERFORMANCE, "a point left untimed must be one the machine cannot run, not a bad one",
                  "a benchmark marked not_run at a point the machine can run"),
    "FT343": Meta(PERFORMANCE, "a stock far below the roofline is a sign of a handicapped baseline",
                  "stock at 10% of the measured roofline at a claimed point", severity=W),
    "FT344": Meta(PERFORMANCE, "bandwidth and plausibility checks need the engine's byte count",
                  "a timed variant with no bytes_moved", tags=(ANTI_GAMING,)),
    "FT345": Meta(EVALS, "a threshold the contributor sets can pass anything",
                  "logit_max_abs_diff with threshold = 5.0"),
    "FT346": Meta(PERFORMANCE, "a maintainer's signed re-run that disagrees outweighs the contributor's",
                  "an audit that did not reproduce fused's speedup at batch 1", tags=(ANTI_GAMING,)),
    "FT347": Meta(PERFORMANCE, "stock timed by the contribution's own process can be slowed by it",
                  "a benchmark with no engine-pass stock"),
    "FT348": Meta(PERFORMANCE, "the policy may require maintainers to reproduce figures before a merge",
                  "no agreeing audit where the policy requires one"),
    "FT349": Meta(EVIDENCE, "results resumed from an earlier run's work dir were on disk while that run's "
                  "later phases ran contribution code",
                  "a statement whose collector.custody says tests: resumed",
                  tags=(ANTI_GAMING,)),
    # ---------------------------------------------------------------------------------------- integrity
    "FT401": Meta(JUDGE, "a PR that edits its judge is judged by rules it wrote",
                  "a PR that edits policies/vllm.toml or fasttrack/", tags=("judge", ANTI_GAMING)),
    "FT402": Meta(JUDGE, "an edited harness can produce any figure",
                  "a statement whose harness digest is not in accepted_harness_digests",
                  tags=("judge", ANTI_GAMING)),
}
