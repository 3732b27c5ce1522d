"""A tiny fake `vllm` package for the blast radius unit tests, and the policy that goes with it.

Layout (model `alpha` is the target in most tests):

    vllm/models/alpha/        model package: model.py, kernels.py, private.py, attn.py, lazy_ops.py,
                              typing_only.py, hubbed.py, chain_a.py <- chain_b.py, nsdir/ (no __init__.py)
    vllm/models/beta/         model package; beta/model.py imports alpha.chain_b
    vllm/models/common/       shared package (policy shared_packages)
    vllm/model_executor/models/gamma.py   legacy model importing alpha.kernels; serves Gamma, GammaV2
    vllm/model_executor/models/delta.py   legacy model importing gamma (so Delta runs through gamma too)
    vllm/model_executor/models/registry.py  the registry (strings only), a hub
    vllm/model_executor/layers/fancy.py     shared, imports alpha.attn at module level
    vllm/model_executor/layers/lazy_user.py shared, imports alpha.lazy_ops inside a function
    vllm/model_executor/layers/typed.py     shared, imports alpha.typing_only under TYPE_CHECKING
    vllm/model_executor/layers/linear.py    shared, imported by gamma, delta and alpha.model
    vllm/model_executor/layers/ns_user.py   shared, imports alpha.nsdir.hidden (grimp cannot see it)
    vllm/model_executor/warmup/hub.py       a policy hub; imports alpha.hubbed
    vllm/v1/sample/sampler.py               forbidden zone
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fasttrack.policy import Policy

FILES: dict[str, str] = {
    "vllm/__init__.py": "",
    "vllm/logger.py": "import logging\n",
    "vllm/models/__init__.py": "",
    "vllm/models/common/__init__.py": "",
    "vllm/models/common/ops.py": "from vllm.logger import logging\n",
    "vllm/models/alpha/__init__.py": "from .model import AlphaForCausalLM\n",
    "vllm/models/alpha/model.py": (
        "from vllm.models.common import ops\n"
        "from vllm.model_executor.layers.linear import Linear\n"
        "from . import kernels, private, chain_b\n\n"
        "class AlphaForCausalLM:\n    pass\n"
    ),
    "vllm/models/alpha/kernels.py": "def fused():\n    return 1\n",
    "vllm/models/alpha/private.py": "X = 1\n",
    "vllm/models/alpha/attn.py": "def attend():\n    return 2\n",
    "vllm/models/alpha/lazy_ops.py": "def op():\n    return 3\n",
    "vllm/models/alpha/typing_only.py": "class T:\n    pass\n",
    "vllm/models/alpha/hubbed.py": "H = 1\n",
    "vllm/models/alpha/chain_a.py": "A = 1\n",
    "vllm/models/alpha/chain_b.py": "from .chain_a import A\nB = A\n",
    "vllm/models/alpha/nsdir/hidden.py": "HIDDEN = 1\n",
    "vllm/models/beta/__init__.py": "from .model import BetaForCausalLM\n",
    "vllm/models/beta/model.py": (
        "from vllm.models.common.ops import logging\n"
        "from vllm.models.alpha.chain_b import B\n\n"
        "class BetaForCausalLM:\n    pass\n"
    ),
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "from .registry import MODELS\n",
    "vllm/model_executor/models/utils.py": "U = 1\n",
    "vllm/model_executor/models/registry.py": (
        "_TEXT = {\n"
        '    "AlphaForCausalLM": ("vllm.models.alpha", "AlphaForCausalLM"),\n'
        '    "BetaForCausalLM": ("vllm.models.beta", "BetaForCausalLM"),\n'
        '    "GammaForCausalLM": ("gamma", "Gamma"),\n'
        '    "GammaV2ForCausalLM": ("gamma", "GammaV2"),\n'
        '    "DeltaForCausalLM": ("delta", "Delta"),\n'
        "}\n"
        '_OLD = {"Ancient": "0.1.0"}\n'
        "MODELS = {**_TEXT}\n"
    ),
    "vllm/model_executor/models/gamma.py": (
        "from vllm.models.alpha.kernels import fused\n"
        "from vllm.model_executor.layers.linear import Linear\n\n"
        "class Gamma:\n    pass\n\nclass GammaV2(Gamma):\n    pass\n"
    ),
    "vllm/model_executor/models/delta.py": (
        "from .gamma import Gamma\nfrom vllm.model_executor.layers.linear import Linear\n\n"
        "class Delta(Gamma):\n    pass\n"
    ),
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/linear.py": "class Linear:\n    pass\n",
    "vllm/model_executor/layers/fancy.py": "from vllm.models.alpha.attn import attend\n",
    "vllm/model_executor/layers/lazy_user.py": (
        "import os\n\n"
        "if os.environ.get('X'):\n    import json\n\n"
        "def run():\n    from vllm.models.alpha import lazy_ops\n    return lazy_ops.op()\n"
    ),
    "vllm/model_executor/layers/typed.py": (
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from vllm.models.alpha.typing_only import T\n"
    ),
    "vllm/model_executor/layers/ns_user.py": "from vllm.models.alpha.nsdir.hidden import HIDDEN\n",
    "vllm/model_executor/warmup/__init__.py": "",
    "vllm/model_executor/warmup/hub.py": "from vllm.models.alpha import hubbed\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/sample/__init__.py": "",
    "vllm/v1/sample/sampler.py": "from vllm.logger import logging\n",
}


def write_tree(root: Path, files: dict[str, str | None] | None = None) -> Path:
    """Write the fake tree (with `files` overriding or, for None, deleting entries) under `root`."""
    merged: dict[str, str | None] = {**FILES, **(files or {})}
    for rel, text in merged.items():
        if text is None:
            continue
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def policy_data(**blast: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "engine": "vllm",
        "engine_version": "0.0-test",
        "models": {
            "local_roots": ["/vllm/models/{model}/**", "/tests/models/{model}/**"],
            "package": "vllm.models.{model}",
            "packages_dir": "vllm/models",
            "shared_packages": ["common"],
            "legacy_dir": "vllm/model_executor/models",
            "legacy_shared": ["__init__", "utils", "registry"],
            "registry": "vllm/model_executor/models/registry.py",
        },
        "zones": [
            {"name": "sampling", "kind": "forbidden", "patterns": ["/vllm/v1/sample/**"]},
            {"name": "shared-layers", "kind": "ineligible", "patterns": ["/vllm/model_executor/layers/**"]},
            {"name": "shared-model-code", "kind": "ineligible",
             "patterns": ["/vllm/model_executor/models/**", "/vllm/models/common/**"]},
        ],
        "hooks": [{"name": "architecture-registry", "path": "vllm/model_executor/models/registry.py",
                   "allowed_lines": ['.*"vllm\\.models\\.{model}".*']}],
        "blast_radius": {"root_package": "vllm",
                         "hub_modules": ["vllm.model_executor.warmup.hub",
                                         "vllm.model_executor.models.registry"],
                         **blast},
        "envelope": {"max_hardware_kinds": 2, "known_hardware": {"NVIDIA H200": "9.0"}, "tp_sizes": [1],
                     "nvlink_domain": 8, "max_batch": 64, "max_context": 4096, "dtypes": ["bfloat16"],
                     "cuda_graph_modes": ["full"]},
        "evidence": {"allowed_signers": "policies/allowed_signers"},
    }


def make_policy(**blast: Any) -> Policy:
    return Policy.model_validate(policy_data(**blast))
