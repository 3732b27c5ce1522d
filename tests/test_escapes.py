"""Escapes (FT12x): the AST analysis over many snippets (true positives and near-misses that must not
fire), the rules over Contexts built directly, and the analysis on the real vLLM 0.33.0 model packages.

Snippets mark the line a finding must point at with `# <-`. Each true positive is checked for its code,
its severity and its line; each near-miss must produce no finding at all.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack.changes.model import Change
from fasttrack.confinement.escapes import Escape, analyse_source, find_escapes, module_name_for
from fasttrack.context import Context
from fasttrack.facts import escapes as escape_facts
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import Manifest
from fasttrack.policy import EscapesSpec, Policy, load_policy
from fasttrack.rules import escapes as escape_rules
from fasttrack.verdict import ChangeStatus

REPO = Path(__file__).resolve().parents[1]
POLICY = REPO / "policies" / "vllm.toml"
MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}


def scan(src: str, path: str = MODEL_FILE, own: set[str] | None = None, **kw: object) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), path, OWN if own is None else own,
                        own_op_namespaces={"kimi_k3"}, **kw)  # type: ignore[arg-type]


def marked_line(src: str) -> int:
    for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1):
        if "# <-" in line:
            return i
    raise AssertionError("snippet has no `# <-` marker")


# (id, source, code, severity). Every snippet must yield exactly one finding of `code` at the marked line
# (other findings of other codes may accompany it; they are listed where they do).
TRUE_POSITIVES: list[tuple[str, str, str, str]] = [
    ("alias-import-class-attr", """
        import vllm.model_executor.layers.linear as lin
        lin.ColumnParallelLinear.forward = lambda self, x: x  # <-
        """, "FT120", "error"),
    ("from-import-class", """
        from vllm.model_executor.layers.layernorm import RMSNorm
        RMSNorm.eps = 1e-3  # <-
        """, "FT120", "error"),
    ("dotted-module-function", """
        import torch
        torch.nn.functional.silu = None  # <-
        """, "FT120", "error"),
    ("augmented-assignment", """
        import vllm.envs as envs
        envs.VLLM_SOMETHING += 1  # <-
        """, "FT120", "error"),
    ("annotated-assignment", """
        from vllm.model_executor.layers import linear
        linear.CAP: int = 4  # <-
        """, "FT120", "error"),
    ("delete-attribute", """
        from vllm.v1.sample.sampler import Sampler
        del Sampler.forward  # <-
        """, "FT120", "error"),
    ("inside-function", """
        from vllm.model_executor.layers.layernorm import RMSNorm
        def install():
            RMSNorm.forward_cuda = my_forward  # <-
        """, "FT120", "error"),
    ("alias-through-assignment", """
        import vllm.model_executor.layers.fused_moe as fm
        target = fm.FusedMoE
        target.forward = None  # <-
        """, "FT120", "error"),
    ("alias-through-getattr", """
        import vllm.model_executor.layers.linear as lin
        cls = getattr(lin, "RowParallelLinear")
        cls.forward = None  # <-
        """, "FT120", "error"),
    ("loop-over-foreign-modules", """
        from vllm.model_executor.layers import linear, layernorm
        for mod in (linear, layernorm):
            mod.DEBUG = True  # <-
        """, "FT120", "error"),
    ("shadowing-comprehension-does-not-hide", """
        import vllm.model_executor.layers.linear as m
        def f(xs):
            ys = [m for m in xs]
            m.DEBUG = True  # <-
        """, "FT120", "error"),
    ("foreign-dict-item", """
        from vllm.model_executor.models.registry import _TEXT_GENERATION_MODELS
        _TEXT_GENERATION_MODELS["KimiK3ForCausalLM"] = ("kimi_k3", "X")  # <-
        """, "FT120", "error"),
    ("foreign-registry-mutator", """
        from vllm.multimodal import MULTIMODAL_REGISTRY
        MULTIMODAL_REGISTRY._processor_factories.clear()  # <-
        """, "FT120", "error"),
    ("hf-mapping-setdefault", """
        from transformers.models.auto import video_processing_auto as vpa
        vpa.VIDEO_PROCESSOR_MAPPING_NAMES.setdefault("k3", "X")  # <-
        """, "FT120", "error"),
    ("unbound-dict-update-on-foreign", """
        from vllm.model_executor.models.registry import _VLLM_MODELS
        dict.update(_VLLM_MODELS, {"A": ("a", "A")})  # <-
        """, "FT120", "error"),
    ("import-module-then-patch", """
        import importlib
        m = importlib.import_module("flashinfer.gemm")
        m.autotune = None  # <-
        """, "FT120", "error"),
    ("sys-modules-lookup-then-patch", """
        import sys
        sys.modules["vllm.v1.sample.sampler"].Sampler = None  # <-
        """, "FT120", "error"),
    ("class-of-local-object", """
        def f(layer):
            layer.__class__.forward = None  # <-
        """, "FT120", "warning"),
    ("type-of-local-object", """
        def f(layer):
            type(layer).forward = None  # <-
        """, "FT120", "warning"),
    ("global-rebinding", """
        import vllm.model_executor.layers.linear as lin
        target = None
        def f():
            global target
            target = lin.LinearBase
        def g():
            target.forward = None  # <-
        """, "FT120", "error"),
    ("star-import", """
        from vllm.model_executor.layers.linear import *
        LinearBase.forward = None  # <-
        """, "FT120", "error"),
    ("relative-import-escaping-the-package", """
        from ...model_executor.layers import linear
        linear.DEBUG = True  # <-
        """, "FT120", "error"),
    ("setattr-module", """
        import vllm.model_executor.layers.linear as lin
        setattr(lin.LinearBase, "forward", None)  # <-
        """, "FT121", "error"),
    ("delattr-class", """
        from vllm.v1.sample.sampler import Sampler
        delattr(Sampler, "forward")  # <-
        """, "FT121", "error"),
    ("object-setattr-foreign", """
        from vllm.config import VllmConfig
        object.__setattr__(VllmConfig, "x", 1)  # <-
        """, "FT121", "error"),
    ("class-dunder-setattr", """
        from vllm.config import VllmConfig
        VllmConfig.__setattr__("x", 1)  # <-
        """, "FT121", "error"),
    ("vars-item", """
        import vllm.model_executor.layers.linear as lin
        vars(lin)["LinearBase"] = object  # <-
        """, "FT121", "error"),
    ("dunder-dict-item", """
        import vllm.model_executor.layers.linear as lin
        lin.__dict__["LinearBase"] = object  # <-
        """, "FT121", "error"),
    ("dunder-dict-update", """
        import vllm.model_executor.layers.linear as lin
        lin.__dict__.update(LinearBase=object)  # <-
        """, "FT121", "error"),
    ("mock-patch-string", """
        from unittest import mock
        mock.patch("vllm.v1.sample.sampler.Sampler.forward", f).start()  # <-
        """, "FT121", "error"),
    ("mock-patch-object", """
        from unittest.mock import patch
        from vllm.v1.sample.sampler import Sampler
        patch.object(Sampler, "forward", f).start()  # <-
        """, "FT121", "error"),
    ("sys-modules-item", """
        import sys
        sys.modules["vllm.v1.sample.sampler"] = object()  # <-
        """, "FT122", "error"),
    ("sys-modules-setdefault", """
        import sys
        sys.modules.setdefault("vllm.v1.core.sched", object())  # <-
        """, "FT122", "error"),
    ("sys-modules-update", """
        from sys import modules
        modules.update({"vllm.x": object()})  # <-
        """, "FT122", "error"),
    ("sys-modules-pop", """
        import sys
        def reset():
            sys.modules.pop("vllm.v1.sample.sampler")  # <-
        """, "FT122", "error"),
    ("sys-modules-del", """
        import sys
        del sys.modules["vllm.v1.sample.sampler"]  # <-
        """, "FT122", "error"),
    ("meta-path", """
        import sys
        sys.meta_path.insert(0, Finder())  # <-
        """, "FT122", "error"),
    ("builtins-attr", """
        import builtins
        builtins.print = lambda *a: None  # <-
        """, "FT122", "error"),
    ("dunder-builtins-item", """
        __builtins__["open"] = None  # <-
        """, "FT122", "error"),
    ("setattr-builtins", """
        import builtins
        setattr(builtins, "len", None)  # <-
        """, "FT122", "error"),
    ("settrace", """
        import sys
        sys.settrace(tracer)  # <-
        """, "FT122", "error"),
    ("sys-path-insert", """
        import sys
        sys.path.insert(0, "/opt/x")  # <-
        """, "FT122", "warning"),
    ("environ-item-at-import", """
        import os
        os.environ["VLLM_USE_V2"] = "1"  # <-
        """, "FT123", "error"),
    ("environ-from-import", """
        from os import environ
        environ.setdefault("NCCL_P2P_DISABLE", "1")  # <-
        """, "FT123", "error"),
    ("environ-update", """
        import os as _os
        _os.environ.update({"A": "1"})  # <-
        """, "FT123", "error"),
    ("environ-pop", """
        import os
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # <-
        """, "FT123", "error"),
    ("environ-del", """
        import os
        del os.environ["X"]  # <-
        """, "FT123", "error"),
    ("environ-ior", """
        import os
        os.environ |= {"A": "1"}  # <-
        """, "FT123", "error"),
    ("putenv", """
        import os
        os.putenv("A", "1")  # <-
        """, "FT123", "error"),
    ("chdir", """
        import os
        os.chdir("/tmp")  # <-
        """, "FT123", "error"),
    ("class-body-runs-at-import", """
        import os
        class K:
            os.environ["A"] = "1"  # <-
        """, "FT123", "error"),
    ("torch-backends-flag", """
        import torch
        torch.backends.cuda.matmul.allow_tf32 = True  # <-
        """, "FT123", "error"),
    ("cudnn-alias", """
        import torch.backends.cudnn as cudnn
        cudnn.benchmark = True  # <-
        """, "FT123", "error"),
    ("inductor-config", """
        import torch._inductor.config as ic
        ic.max_autotune = True  # <-
        """, "FT123", "error"),
    ("set-default-dtype", """
        import torch
        torch.set_default_dtype(torch.bfloat16)  # <-
        """, "FT123", "error"),
    ("set-default-device", """
        from torch import set_default_device
        set_default_device("cuda")  # <-
        """, "FT123", "error"),
    ("environ-inside-function-warns", """
        import os
        def build():
            os.environ["TRITON_CACHE"] = "/tmp"  # <-
        """, "FT123", "warning"),
    ("flag-inside-function-warns", """
        import torch
        def setup():
            torch.backends.cudnn.allow_tf32 = False  # <-
        """, "FT123", "warning"),
    ("main-guard-is-not-import-time", """
        import os
        if __name__ == "__main__":
            os.environ["A"] = "1"  # <-
        """, "FT123", "warning"),
    ("model-registry", """
        from vllm import ModelRegistry
        ModelRegistry.register_model("KimiK3ForCausalLM", "vllm.models.kimi_k3:K3")  # <-
        """, "FT124", "error"),
    ("custom-op-register-decorator", """
        from vllm.model_executor.custom_op import CustomOp
        @CustomOp.register("kimi_k3_rms_norm")  # <-
        class K3Norm(CustomOp):
            pass
        """, "FT124", "error"),
    ("register-oot-bare-decorator", """
        from vllm.model_executor.custom_op import PluggableLayer
        @PluggableLayer.register_oot  # <-
        class RMSNorm(PluggableLayer):
            pass
        """, "FT124", "error"),
    ("attention-backend", """
        from vllm.v1.attention.backends.registry import register_backend
        register_backend("FLASH_ATTN", "kimi_k3.attn:Backend")  # <-
        """, "FT124", "error"),
    ("quantization-config", """
        from vllm.model_executor.layers.quantization import register_quantization_config
        @register_quantization_config("k3fp4")  # <-
        class K3Fp4Config:
            pass
        """, "FT124", "error"),
    ("generic-register-on-foreign-object", """
        from vllm.multimodal.video import VIDEO_LOADER_REGISTRY
        VIDEO_LOADER_REGISTRY.register("k3")(Loader)  # <-
        """, "FT124", "error"),
    ("global-module-hook", """
        import torch
        torch.nn.modules.module.register_module_forward_hook(hook)  # <-
        """, "FT124", "error"),
    ("hf-auto-register", """
        from transformers import AutoConfig
        AutoConfig.register("kimi_k3", K3Config)  # <-
        """, "FT124", "error"),
    ("allowed-registration-on-foreign-class", """
        from vllm.multimodal import MULTIMODAL_REGISTRY
        from vllm.model_executor.models.qwen3_vl import Qwen3VLForConditionalGeneration as Qwen
        MULTIMODAL_REGISTRY.register_processor(P, info=I, dummy_inputs=D)(Qwen)  # <-
        """, "FT124", "error"),
    ("library-impl-aten", """
        import torch
        lib = torch.library.Library("aten", "IMPL")  # <-
        """, "FT125", "error"),
    ("library-def-foreign", """
        from torch.library import Library
        Library("vllm", "DEF")  # <-
        """, "FT125", "error"),
    ("library-fragment-aten", """
        import torch
        torch.library.Library("aten", "FRAGMENT")  # <-
        """, "FT125", "error"),
    ("library-non-literal-namespace", """
        import torch
        torch.library.Library(NS, "FRAGMENT")  # <-
        """, "FT125", "error"),
    ("impl-decorator-aten", """
        import torch
        @torch.library.impl("aten::mm", "CUDA")  # <-
        def mm(a, b):
            return a
        """, "FT125", "error"),
    ("register-fake-vllm-op", """
        import torch
        torch.library.register_fake("vllm::fused_add_rms_norm")(fake)  # <-
        """, "FT125", "error"),
    ("register-kernel-ops-object", """
        import torch
        torch.library.register_kernel(torch.ops._C.rms_norm, "cuda")(k)  # <-
        """, "FT125", "error"),
    ("custom-op-foreign-ns", """
        from torch.library import custom_op
        @custom_op("_C::silu_and_mul", mutates_args=())  # <-
        def silu(x):
            return x
        """, "FT125", "error"),
    ("triton-op-vllm-ns", """
        import torch
        @torch.library.triton_op("vllm::fused_moe", mutates_args=())  # <-
        def f(x):
            return x
        """, "FT125", "error"),
    ("fragment-on-shared-ns-defines-foreign-name", """
        import torch
        lib = torch.library.Library("vllm", "FRAGMENT")
        lib.define("rms_norm(Tensor x) -> Tensor")  # <-
        """, "FT125", "error"),
    ("engine-library-impl", """
        from vllm.utils.torch_utils import vllm_lib
        vllm_lib.impl("rms_norm", my_impl, "CUDA")  # <-
        """, "FT125", "error"),
    ("direct-register-unprefixed", """
        from vllm.utils.torch_utils import direct_register_custom_op
        direct_register_custom_op("fused_add", impl)  # <-
        """, "FT125", "error"),
    ("load-library", """
        import torch
        torch.ops.load_library("/opt/libk3.so")  # <-
        """, "FT125", "error"),
    ("cpp-extension-warns", """
        from torch.utils.cpp_extension import load_inline
        load_inline("k3", cpp_sources=[src])  # <-
        """, "FT125", "warning"),
    ("other-model-namespace", """
        import torch
        torch.library.define("deepseek_v4::op(Tensor x) -> Tensor")  # <-
        """, "FT125", "error"),
    ("import-module-engine-literal", """
        import importlib
        importlib.import_module("vllm.v1.sample.sampler")  # <-
        """, "FT126", "warning"),
    ("import-module-computed", """
        import importlib
        def load(name):
            return importlib.import_module("vllm." + name)  # <-
        """, "FT126", "warning"),
    ("dunder-import-computed", """
        mod = __import__(NAME)  # <-
        """, "FT126", "warning"),
    ("reload-shared", """
        import importlib
        import vllm.v1.sample.sampler as s
        importlib.reload(s)  # <-
        """, "FT126", "error"),
    ("spec-from-file-shared-name", """
        import importlib.util
        spec = importlib.util.spec_from_file_location("vllm.v1.sample.sampler", path)  # <-
        """, "FT126", "error"),
    ("spec-from-file-warns", """
        from importlib.util import spec_from_file_location
        spec = spec_from_file_location(name, path)  # <-
        """, "FT126", "warning"),
    ("run-module", """
        import runpy
        runpy.run_module("vllm.entrypoints.cli.main")  # <-
        """, "FT126", "error"),
    ("exec", """
        exec(code)  # <-
        """, "FT127", "warning"),
    ("eval", """
        x = eval("1 + 1")  # <-
        """, "FT127", "warning"),
    ("builtin-compile", """
        c = compile(src, "<k3>", "exec")  # <-
        """, "FT127", "warning"),
    ("exec-literal-is-checked", """
        exec("import vllm.envs as e\\ne.X = 1")  # <-
        """, "FT120", "error"),
]


@pytest.mark.parametrize(("source", "code", "severity"), [t[1:] for t in TRUE_POSITIVES],
                         ids=[t[0] for t in TRUE_POSITIVES])
def test_true_positive(source: str, code: str, severity: str) -> None:
    found = [e for e in scan(source) if e.code == code]
    assert [(e.line, e.severity) for e in found] == [(marked_line(source), severity)], scan(source)
    assert found[0].path == MODEL_FILE and found[0].message


# Code that must not fire at all: writes to self, to local objects, to the model's own modules and
# classes, environment reads, the own op namespace, ordinary calls that look like mutators, and so on.
NEAR_MISSES: list[tuple[str, str]] = [
    ("self-attribute", """
        class K3(object):
            def __init__(self):
                self.weight = None
                self.__class__.counter = 0
                type(self).cache = {}
        """),
    ("local-object", """
        from vllm.model_executor.layers.layernorm import RMSNorm
        def build():
            norm = RMSNorm(7168)
            norm.eps = 1e-6
            norm.weight.data.fill_(1.0)
            return norm
        """),
    ("module-level-instance", """
        from vllm.model_executor.layers.linear import ReplicatedLinear
        proj = ReplicatedLinear(8, 8)
        proj.quant_method = None
        """),
    ("own-package-absolute", """
        import vllm.models.kimi_k3.common.config as cfg
        from vllm.models.kimi_k3 import nvidia
        cfg.BLOCK = 64
        nvidia.ENABLED = True
        setattr(cfg, "X", 1)
        """),
    ("own-package-through-vllm-root-import", """
        import vllm.models.kimi_k3.common
        vllm.models.kimi_k3.common.FLAG = 1
        """),
    ("relative-imports-inside-the-package", """
        from . import ops
        from ..common import layers
        ops.KERNEL = None
        layers.Norm.forward = None
        """),
    ("own-class-and-function", """
        class K3Layer:
            pass
        def helper():
            pass
        K3Layer.forward = helper
        helper.cache = {}
        """),
    ("subclass-own", """
        from vllm.model_executor.layers.layernorm import RMSNorm
        class K3Norm(RMSNorm):
            pass
        K3Norm.forward_cuda = lambda self, x: x
        """),
    ("env-reads", """
        import os
        A = os.environ.get("VLLM_K3", "0")
        B = os.getenv("X")
        C = os.environ["PATH"]
        D = "X" in os.environ
        E = dict(os.environ)
        """),
    ("own-op-namespace", """
        import torch
        lib = torch.library.Library("kimi_k3", "DEF")
        lib.define("fused(Tensor x) -> Tensor")
        lib.impl("fused", impl, "CUDA")
        torch.library.define("kimi_k3::decode(Tensor x) -> Tensor")
        @torch.library.custom_op("kimi_k3::moe", mutates_args=())
        def moe(x):
            return x
        moe.register_fake(lambda x: x)
        torch.library.register_fake("kimi_k3::moe")(lambda x: x)
        """),
    ("own-prefixed-namespace-and-names", """
        import torch
        from vllm.utils.torch_utils import direct_register_custom_op
        LIB = "kimi_k3_stock"
        def register(name):
            return torch.library.triton_op(f"{LIB}::{name}", mutates_args=())
        direct_register_custom_op("kimi_k3_fused_moe", impl)
        frag = torch.library.Library("vllm", "FRAGMENT")
        frag.define("kimi_k3_gate(Tensor x) -> Tensor")
        """),
    ("calls-named-like-mutators", """
        import os
        import torch
        y = torch.add(a, b)
        p = os.path.join("a", "b")
        values = {}
        values.update(a=1)
        d = dict()
        dict.update(d, {"a": 1})
        """),
    ("registration-onto-local-object", """
        import torch
        from torch.nn.utils import parametrize
        def setup(layer):
            parametrize.register_parametrization(layer, "weight", P())
            layer.register_forward_hook(hook)
            layer.register_buffer("b", torch.zeros(1))
        """),
    ("allowed-registration-own-class", """
        from vllm.multimodal import MULTIMODAL_REGISTRY
        from vllm.model_executor.models.qwen3_vl import Qwen3VLMultiModalProcessor
        @MULTIMODAL_REGISTRY.register_processor(Qwen3VLMultiModalProcessor, info=Info, dummy_inputs=Dummy)
        class KimiK3ForConditionalGeneration:
            pass
        """),
    ("warmup-registration", """
        from vllm.model_executor.kernels.mhc.warmup import MHC_PRE_NORM_KERNEL
        MHC_PRE_NORM_KERNEL.register_warmup(7168, 4)
        """),
    ("atexit-own-function", """
        import atexit
        def _cleanup():
            pass
        atexit.register(_cleanup)
        """),
    ("own-module-lookup", """
        import sys
        mod = sys.modules[__name__]
        setattr(mod, "X", 1)
        globals()["Y"] = 2
        """),
    ("relative-import-module-by-string", """
        import importlib
        def load(name):
            return importlib.import_module(f".{name}", __name__)
        """),
    ("third-party-import-module-literal", """
        import importlib
        flashinfer = importlib.import_module("flashinfer")
        """),
    ("scoped-context-managers", """
        import torch
        from unittest import mock
        def run(x):
            with torch.backends.cuda.sdp_kernel(enable_flash=True):
                with torch._dynamo.config.patch(cache_size_limit=8):
                    return x
        """),
    ("method-named-compile-or-exec", """
        import re
        import torch
        pat = re.compile("a+")
        f = torch.compile(model)
        cursor.execute("select 1")
        """),
    ("frozen-dataclass-setattr-self", """
        class Frozen:
            def __post_init__(self):
                object.__setattr__(self, "x", 1)
                super().__setattr__("y", 2)
        """),
    ("ctypes-prototype", """
        import ctypes
        ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
        """),
    ("parameter-shadows-import", """
        import vllm.model_executor.layers.linear as lin
        def f(lin):
            lin.x = 1
        """),
    ("annotation-only", """
        from vllm.config import VllmConfig
        cfg: VllmConfig
        def f(config: VllmConfig) -> VllmConfig:
            return config
        """),
]


@pytest.mark.parametrize("source", [t[1] for t in NEAR_MISSES], ids=[t[0] for t in NEAR_MISSES])
def test_near_miss_does_not_fire(source: str) -> None:
    assert scan(source) == []


def test_relative_imports_count_as_own_when_the_module_is_unknown() -> None:
    src = "from ...model_executor.layers import linear\nlinear.DEBUG = True\n"
    assert scan(src, path="scratch/k3.py") == []  # no importable module name: relative imports are own
    assert [e.code for e in scan(src)] == ["FT120"]  # placed under vllm.models.kimi_k3.nvidia: escapes


def test_no_own_packages_makes_every_import_foreign() -> None:
    src = "import vllm.models.kimi_k3.common as c\nc.X = 1\n"
    assert scan(src) == []
    assert [e.target for e in scan(src, own=set())] == ["vllm.models.kimi_k3.common.X"]


def test_settings_change_registries_and_flags() -> None:
    src = "from vllm.plugins import hooks\nhooks.install(k3)\nimport torch\ntorch.manual_seed(0)\n"
    assert [e.code for e in scan(src)] == ["FT123"]
    custom = EscapesSpec(registry_callables=["vllm.plugins.hooks.install"], global_flag_calls=[])
    assert [e.code for e in scan(src, settings=custom)] == ["FT124"]


def test_syntax_error_is_a_finding_not_a_crash() -> None:
    found = scan("def broken(:\n    pass\n")
    assert [(e.code, e.severity, e.line) for e in found] == [("FT128", "error", 1)]
    assert "does not parse" in found[0].message
    assert [e.code for e in scan("x = 1\x00\n")] == ["FT128"]


def test_deep_nesting_is_a_finding_not_a_crash() -> None:
    src = "x = " + "(" * 2000 + "1" + ")" * 2000 + "\n"
    assert {e.code for e in scan(src)} <= {"FT128"}
    deep = "x = " + "[" * 180 + "]" * 180 + "\n"  # parses, and must analyse without recursion trouble
    assert scan(deep) == []


def test_many_reassignments_stay_linear() -> None:
    # s = s.a; s = s.b; ... used to make name resolution exponential; it is memoised now.
    lines = ["import vllm.model_executor.layers.linear as s"] + [f"s = s.a{i}" for i in range(400)]
    src = "\n".join([*lines, "s.forward = None"]) + "\n"
    t0 = time.perf_counter()
    found = scan(src)
    assert time.perf_counter() - t0 < 5.0
    assert [e.code for e in found] == ["FT120"]


def test_imports_are_collected_for_the_test_file_rule() -> None:
    facts = analyse_source("from .tests import helpers\nimport kimi_k3.guard\n", "kimi_k3/layer.py",
                           {"kimi_k3"})
    assert {"kimi_k3.tests", "kimi_k3.tests.helpers", "kimi_k3.guard"} <= facts.imports


def test_module_name_for() -> None:
    assert module_name_for("vllm/models/kimi_k3/__init__.py") == "vllm.models.kimi_k3"
    assert module_name_for("vllm/models/kimi_k3/nvidia/model.py") == "vllm.models.kimi_k3.nvidia.model"
    assert module_name_for("scripts/run-me.py") is None
    assert module_name_for("README.md") is None


# ------------------------------------------------------------------------------------------------------
# The rules, on Contexts built directly (no git, no pipeline)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def make_ctx(tmp_path: Path, policy: Policy, files: dict[str, str | bytes], *, mode: str = "range",
             model: str | None = "kimi_k3", changed: list[str] | None = None,
             statuses: dict[str, ChangeStatus] | None = None, manifest: Manifest | None = None,
             contribution_dir: str | None = None, engine_paths: dict[str, str] | None = None) -> Context:
    for rel, content in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(textwrap.dedent(content))
    paths = list(files) if changed is None else changed
    changes = tuple(Change(status=(statuses or {}).get(p, ChangeStatus.MODIFIED), path=p,
                           new_mode="100644", binary=isinstance(files.get(p), bytes)) for p in paths)
    return Context(policy=policy, policy_path=POLICY, mode=mode, head_dir=tmp_path,  # type: ignore[arg-type]
                   changes=changes, model=model, manifest=manifest, contribution_dir=contribution_dir,
                   engine_paths=engine_paths or {},
                   manifest_path=f"{contribution_dir}/fasttrack.toml" if contribution_dir else None)


RULES = {r.code: r for r in escape_rules.catalogue.rules}

# code -> (a file that must fail with that code, a file that must pass it)
RULE_CASES: dict[str, tuple[str, str]] = {
    "FT120": ("from vllm.v1.sample.sampler import Sampler\nSampler.forward = None\n",
              "from vllm.v1.sample.sampler import Sampler\nclass K3Sampler(Sampler):\n    pass\n"),
    "FT121": ("import vllm.envs as e\nsetattr(e, 'X', 1)\n", "import vllm.envs as e\nX = getattr(e, 'X')\n"),
    "FT122": ("import sys\nsys.modules['vllm.x'] = None\n", "import sys\nm = sys.modules.get('vllm.x')\n"),
    "FT123": ("import os\nos.environ['A'] = '1'\n", "import os\nA = os.environ.get('A')\n"),
    "FT124": ("from vllm import ModelRegistry\nModelRegistry.register_model('A', 'b:C')\n",
              "from vllm import ModelRegistry\nARCHS = ModelRegistry.get_supported_archs()\n"),
    "FT125": ("import torch\ntorch.library.Library('aten', 'IMPL')\n",
              "import torch\ntorch.library.Library('kimi_k3', 'DEF')\n"),
    "FT126": ("import importlib\nimport vllm.envs as e\nimportlib.reload(e)\n",
              "import importlib\nfrom . import helpers\nimportlib.reload(helpers)\n"),
    "FT127": ("x = eval('1')\n", "import ast\nx = ast.literal_eval('1')\n"),
    "FT128": ("def f(:\n", "def f():\n    pass\n"),
}


@pytest.mark.parametrize("code", sorted(RULE_CASES))
def test_rule_fails_and_passes(code: str, tmp_path: Path, policy: Policy) -> None:
    bad, good = RULE_CASES[code]
    path = "vllm/models/kimi_k3/nvidia/k3.py"
    failing = RULES[code].run(gather_facts(make_ctx(tmp_path / "bad", policy, {path: bad})))
    assert [(f.code, f.path, f.line) for f in failing] == [(code, path, failing[0].line)]
    assert failing[0].line is not None and failing[0].fix
    passing = RULES[code].run(gather_facts(make_ctx(tmp_path / "good", policy, {path: good})))
    assert passing == []


def run_all(ctx: Context) -> list[Finding]:
    facts = gather_facts(ctx)  # the escape analysis is a fact: computed once, read by every rule
    return [f for r in escape_rules.catalogue.rules for f in r.run(facts)]


def test_only_added_modified_renamed_copied_python_files_are_read(tmp_path: Path, policy: Policy) -> None:
    bad = "import os\nos.environ['A'] = '1'\n"
    files: dict[str, str | bytes] = {"a.py": bad, "b.py": bad, "c.py": bad, "d.py": bad, "notes.txt": bad,
                                     "e.py": bad}
    statuses = {"a.py": ChangeStatus.ADDED, "b.py": ChangeStatus.RENAMED, "c.py": ChangeStatus.COPIED,
                "d.py": ChangeStatus.DELETED, "notes.txt": ChangeStatus.ADDED,
                "e.py": ChangeStatus.MODE_CHANGED}
    found = run_all(make_ctx(tmp_path, policy, files, statuses=statuses))
    assert sorted(f.path or "" for f in found) == ["a.py", "b.py", "c.py"]


def test_unreadable_python_file_fails_closed(tmp_path: Path, policy: Policy) -> None:
    files: dict[str, str | bytes] = {"vllm/models/kimi_k3/blob.py": b"\xff\xfe\x00 not utf-8"}
    found = run_all(make_ctx(tmp_path, policy, files))
    assert [(f.code, f.severity) for f in found] == [("FT128", Severity.ERROR)]


def test_test_files_are_warnings_unless_shipping_code_imports_them(tmp_path: Path, policy: Policy) -> None:
    patch = "from vllm.v1.sample.sampler import Sampler\nSampler.forward = None\n"
    files: dict[str, str | bytes] = {
        "tests/models/kimi_k3/test_k3.py": patch,
        "vllm/models/kimi_k3/tests/helpers.py": patch,
        "vllm/models/kimi_k3/model.py": "from .tests import helpers\n",
    }
    found = {f.path: f for f in RULES["FT120"].run(gather_facts(make_ctx(tmp_path, policy, files)))}
    assert found["tests/models/kimi_k3/test_k3.py"].severity == Severity.WARNING
    assert "test file" in found["tests/models/kimi_k3/test_k3.py"].message
    # helpers.py sits under tests/ but the model imports it, so it ships: an error.
    assert found["vllm/models/kimi_k3/tests/helpers.py"].severity == Severity.ERROR


def test_range_mode_own_packages_come_from_the_policy(tmp_path: Path, policy: Policy) -> None:
    ctx = make_ctx(tmp_path, policy, {})
    # vllm.toml's local roots: /vllm/models/{model}/**, /tests/models/{model}/**, /docs/models/{model}/**
    assert escape_facts.own_packages(ctx) == {"vllm.models.kimi_k3", "tests.models.kimi_k3",
                                              "docs.models.kimi_k3"}
    unknown = make_ctx(tmp_path, policy, {}, model=None)
    assert escape_facts.own_packages(unknown) == set()


def test_contribution_mode_own_packages_and_engine_modules(tmp_path: Path, policy: Policy) -> None:
    manifest = reference_manifest()
    target = manifest.contribution.target_path
    files: dict[str, str | bytes] = {
        # absolute import of the contribution's own package, and a relative one climbing to the model
        "kernels/kimi_k3/guard.py": "import kimi_k3.stock as s\ns.FLAG = 1\nfrom .. import common\n"
                                    "common.X = 1\n",
    }
    ctx = make_ctx(tmp_path, policy, files, mode="contribution", manifest=manifest,
                   contribution_dir="kernels/kimi_k3",
                   engine_paths={"kernels/kimi_k3/guard.py": f"{target}/guard.py"})
    assert escape_facts.own_packages(ctx) == {"kimi_k3", target.replace("/", ".")}
    assert escape_facts.module_of(ctx, "kernels/kimi_k3/guard.py") == target.replace("/", ".") + ".guard"
    found = run_all(ctx)
    # `from .. import common` lands in vllm.models.kimi_k3.nvidia.specialized_decode: outside the target
    assert [(f.code, f.line) for f in found] == [("FT120", 4)]


def test_own_op_namespace_comes_from_the_manifest(tmp_path: Path, policy: Policy) -> None:
    manifest = reference_manifest(op_namespace="k3ops")
    files: dict[str, str | bytes] = {"kernels/kimi_k3/ops.py": "import torch\n"
                                     "torch.library.Library('k3ops', 'DEF')\n"
                                     "torch.library.Library('kimi_k3', 'DEF')\n"}
    ctx = make_ctx(tmp_path, policy, files, mode="contribution", manifest=manifest,
                   contribution_dir="kernels/kimi_k3")
    assert escape_facts.own_op_namespaces(ctx) == {"k3ops"}
    assert [(f.code, f.line) for f in run_all(ctx)] == [("FT125", 3)]


def reference_manifest(**contribution: str) -> Manifest:
    return Manifest.model_validate({
        "schema_version": 1,
        "contribution": {"name": "kimi_k3", "model": "kimi_k3", **contribution,
                         "target_path": "vllm/models/kimi_k3/nvidia/specialized_decode/hopper"},
        "envelope": {"hardware": [{"name": "NVIDIA H200", "compute_capability": "9.0"}], "tp": [1],
                     "batch": {"min": 1, "max": 64}, "context": {"min": 1, "max": 32768},
                     "dtypes": ["bfloat16"], "cuda_graph": "full"},
        "fallback": {"metric": "k3_fallback_total", "stock_path": "kimi_k3.stock:forward",
                     "guard": "kimi_k3.guard:decide"},
        "evidence": {"kernel_tests": ["tests/test_gpu.py"]},
    })


def test_analysis_is_shared_between_rules(tmp_path: Path, policy: Policy,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = escape_facts.analyse_source

    def counting(source: str, path: str, *a: object, **kw: object) -> object:
        calls.append(path)
        return real(source, path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(escape_facts, "analyse_source", counting)
    ctx = make_ctx(tmp_path, policy, {"vllm/models/kimi_k3/a.py": "x = 1\n"})
    run_all(ctx)
    assert calls == ["vllm/models/kimi_k3/a.py"]


# ------------------------------------------------------------------------------------------------------
# The real vLLM 0.33.0 tree


@pytest.fixture(scope="module")
def vllm_models() -> Path:
    from fasttrack.engine_tree import EngineTreeError, ensure_tree

    try:
        return ensure_tree("0.33.0") / "vllm" / "models"
    except EngineTreeError as exc:
        pytest.fail(f"the vLLM 0.33.0 tree is not available: {exc}")


@pytest.mark.vllm_tree
def test_kimi_k3_package_on_the_real_tree(vllm_models: Path) -> None:
    """Every file of vllm/models/kimi_k3 (133 files) as if a PR changed it, own = vllm.models.kimi_k3.

    Measured: two errors, the sequence-parallel forward passes writing the engine's forward context
    (`get_forward_context().is_padding = ...`, nvidia/model.py:1136 and nvidia/mtp.py:130: state reached
    through an engine accessor, FT120 since round 6; a PR touching those files carries them as infos), and
    three warnings, all in amd/specialized_decode/runtime/layers.py, which sets and restores COMPILE_ONLY in
    os.environ inside a function (lines 94, 99, 101)."""
    root = vllm_models.parent.parent
    found: list[tuple[str, int, str, str]] = []
    files = sorted((vllm_models / "kimi_k3").rglob("*.py"))
    assert len(files) == 133
    for f in files:
        rel = f.relative_to(root).as_posix()
        found += [(rel, e.line, e.code, e.severity) for e in find_escapes(
            f.read_text(), rel, {"vllm.models.kimi_k3"}, own_op_namespaces={"kimi_k3"})]
    layers = "vllm/models/kimi_k3/amd/specialized_decode/runtime/layers.py"
    nvidia = "vllm/models/kimi_k3/nvidia"
    assert sorted(found) == sorted([
        (layers, 94, "FT123", "warning"), (layers, 99, "FT123", "warning"), (layers, 101, "FT123", "warning"),
        (f"{nvidia}/model.py", 1136, "FT120", "error"), (f"{nvidia}/mtp.py", 130, "FT120", "error")])


@pytest.mark.vllm_tree
@pytest.mark.parametrize(("rel", "expected"), [
    # deepseek_v41 loads flashinfer by string and swaps its autotune_tactics inside a context manager
    ("deepseek_v41/nvidia/specialized_decode/attention/mxfp8.py",
     [(167, "FT120", "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm.autotune_tactics"),
      (171, "FT120", "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm.autotune_tactics")]),
    # dots3_note swaps torch.nn.Linear.reset_parameters while building its vision tower
    # ... and writes the image token id into the engine's HF config (`self.config`, stored from
    # `model_config.hf_config` of its `vllm_config` parameter: the engine's object)
    ("dots3_note/nvidia/multimodal.py",
     [(53, "FT120", "torch.nn.Linear.reset_parameters"), (57, "FT120", "torch.nn.Linear.reset_parameters"),
      (105, "FT120", "~param.vllm_config.model_config.hf_config.image_token_index")]),
    # qwen4_exp defines ops in vLLM's namespace without its own prefix
    ("qwen4_exp/amd/ops/sequence_parallel.py",
     [(26, "FT125", "vllm::sp_reduce_scatter"), (31, "FT125", "vllm::sp_shard")]),
    # glm5next registers a CustomOp (vLLM's global op registry)
    ("glm5next/nvidia/sparse_indexer.py",
     [(697, "FT124", "vllm.model_executor.custom_op.CustomOp.register")]),
])
def test_known_escapes_in_real_model_packages(vllm_models: Path, rel: str,
                                              expected: list[tuple[int, str, str]]) -> None:
    model = rel.split("/")[0]
    src = (vllm_models / rel).read_text()
    found = [(e.line, e.code, e.target) for e in find_escapes(
        src, f"vllm/models/{rel}", {f"vllm.models.{model}"}, own_op_namespaces={model})
        if e.severity == "error"]
    assert found == expected


# ------------------------------------------------------------------------------------------------------
# Escapes the base revision already had


PATCH = "import os\nimport vllm.envs as e\ne.X = 1\nos.environ['A'] = '1'\n"


def test_escapes_already_in_the_base_are_infos(tmp_path: Path, policy: Policy, make_repo: Any) -> None:
    """Carried-over escapes are infos whatever their own severity (an error-level patch and env write, a
    warning-level computed import_module), marked with the base line; a second copy of the old patch and a
    new patch are errors. A line inserted above them shifts every line: matching is not by line."""
    path = "vllm/models/kimi_k3/nvidia/k3.py"
    dynamic = "import importlib\n\n\ndef load(name):\n    return importlib.import_module(name)\n"
    repo = make_repo({path: PATCH + dynamic})
    base = repo.git("rev-parse", "HEAD").strip()
    # the PR inserts a line on top, keeps the old escapes, adds a second copy of the patch and a new one
    repo.commit({path: "# fast\n" + PATCH + dynamic
                 + "e.X = 1\nfrom vllm.v1.sample.sampler import Sampler\nSampler.f = None\n"})
    ctx = Context(policy=policy, policy_path=POLICY, mode="range", head_dir=repo.path,
                  changes=(Change(status=ChangeStatus.MODIFIED, path=path),), model="kimi_k3",
                  repo=repo.path, base=base)
    found = [(f.code, f.line, f.severity) for f in run_all(ctx)]
    assert found == [("FT120", 4, Severity.INFO), ("FT120", 11, Severity.ERROR),
                     ("FT120", 13, Severity.ERROR), ("FT123", 5, Severity.INFO),
                     ("FT126", 10, Severity.INFO)]
    messages = {f.line: f.message for f in run_all(ctx)}
    assert messages[4].endswith("(already in the base revision at line 3: not introduced by this PR)")
    assert "(already in the base revision at line 9: " in messages[10]
    assert "base revision" not in messages[11] and "base revision" not in messages[13]


def test_an_alias_change_makes_an_old_line_a_new_escape(tmp_path: Path, policy: Policy) -> None:
    path = "vllm/models/kimi_k3/nvidia/k3.py"
    before = "import vllm.models.kimi_k3.common as c\nc.X = 1\n"
    after = "import vllm.v1.sample.sampler as c\nc.X = 1\n"  # line 2 unchanged, its target is not
    ctx = Context(policy=policy, policy_path=POLICY, mode="range", head_dir=tmp_path,
                  changes=(Change(status=ChangeStatus.MODIFIED, path=path),), model="kimi_k3",
                  base_texts={path: before})
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(after)
    assert [(f.code, f.line, f.severity) for f in run_all(ctx)] == [("FT120", 2, Severity.ERROR)]


def test_a_copied_file_brings_its_escapes_as_new(tmp_path: Path, policy: Policy, make_repo: Any) -> None:
    src, dst = "vllm/v1/x.py", "vllm/models/kimi_k3/x.py"
    repo = make_repo({src: PATCH})
    base = repo.git("rev-parse", "HEAD").strip()
    repo.commit({dst: PATCH})
    ctx = Context(policy=policy, policy_path=POLICY, mode="range", head_dir=repo.path,
                  changes=(Change(status=ChangeStatus.COPIED, path=dst, old_path=src),), model="kimi_k3",
                  repo=repo.path, base=base)
    assert {f.severity for f in run_all(ctx)} == {Severity.ERROR}


def test_verify_end_to_end_on_a_small_repository(make_repo: Any, isolated_cache: Path) -> None:
    """`fasttrack verify` on a git range: the escape reaches the Verdict with its path and line."""
    from fasttrack.commands.verify import VerifyOptions, run_verify

    model_file = "vllm/models/kimi_k3/__init__.py"
    repo = make_repo({model_file: "X = 1\n", "vllm/__init__.py": "", "vllm/models/__init__.py": "",
                      "vllm/v1/__init__.py": "", "vllm/v1/sample/__init__.py": "",
                      "vllm/v1/sample/sampler.py": "class Sampler:\n    pass\n"})
    base = repo.git("rev-parse", "HEAD").strip()
    repo.commit({model_file: "X = 1\nfrom vllm.v1.sample.sampler import Sampler\nSampler.forward = None\n"})
    head = repo.git("rev-parse", "HEAD").strip()
    verdict = run_verify(VerifyOptions(repo=repo.path, base=base, head=head, model="kimi_k3", policy=POLICY))
    hits = [(f.code, f.path, f.line, f.severity) for f in verdict.findings if f.code.startswith("FT12")]
    assert hits == [("FT120", model_file, 3, Severity.ERROR)]
    assert verdict.verdict == "fail"


# ------------------------------------------------------------------------------------------------------
# Robustness: whatever the text, the analysis returns escapes and never raises


SNIPPETS = [textwrap.dedent(t[1]) for t in TRUE_POSITIVES + NEAR_MISSES]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SNIPPETS), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 8),
                                                     st.sampled_from(["", "(", ")", ":", "\n", " ", "=", ".",
                                                                      "[", "*", "lambda ", "global x\n"])),
                                           max_size=4))
def test_mutated_sources_never_crash(snippet: str, edits: list[tuple[int, int, str]]) -> None:
    src = snippet
    for at, cut, insert in edits:
        at = min(at, len(src))
        src = src[:at] + insert + src[at + cut:]
    found = find_escapes(src, MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"})
    assert all(isinstance(e, Escape) and e.line >= 1 and e.code.startswith("FT12") for e in found)


@pytest.mark.vllm_tree
def test_a_pr_touching_a_real_file_with_an_old_patch(vllm_models: Path, tmp_path: Path,
                                                      policy: Policy) -> None:
    """A deepseek_v41 PR that edits mxfp8.py (which already swaps flashinfer's autotune_tactics): the old
    patch is an info, a patch the PR adds is an error."""
    rel = "vllm/models/deepseek_v41/nvidia/specialized_decode/attention/mxfp8.py"
    before = (vllm_models.parent.parent / rel).read_text()
    after = before + "\nimport vllm.v1.sample.sampler as _s\n_s.Sampler.forward = None\n"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text(after)
    ctx = Context(policy=policy, policy_path=POLICY, mode="range", head_dir=tmp_path,
                  changes=(Change(status=ChangeStatus.MODIFIED, path=rel),), model="deepseek_v41",
                  base_texts={rel: before})
    found = [(f.code, f.line, f.severity) for f in run_all(ctx)]
    new_line = len(after.splitlines())
    assert found == [("FT120", 167, Severity.INFO), ("FT120", 171, Severity.INFO),
                     ("FT120", new_line, Severity.ERROR)]


def test_contribution_test_and_benchmark_files(tmp_path: Path, policy: Policy) -> None:
    """In contribution mode shipping code imports its own files by the contribution's package name
    (`kimi_k3.benchmarks.x`), not by the engine path: a benchmark imported that way ships (an error);
    one only the benchmarks use is a warning."""
    patch = "from triton.runtime.jit import JITFunction\nJITFunction.run = None\n"
    target = reference_manifest().contribution.target_path
    files: dict[str, str | bytes] = {
        "kernels/kimi_k3/benchmarks/shim.py": patch,
        "kernels/kimi_k3/benchmarks/aot.py": patch,
        "kernels/kimi_k3/layer.py": "import kimi_k3.benchmarks.shim\n",
    }
    ctx = make_ctx(tmp_path, policy, files, mode="contribution", manifest=reference_manifest(),
                   contribution_dir="kernels/kimi_k3",
                   engine_paths={p: p.replace("kernels/kimi_k3", target) for p in files})
    found = {f.path: f.severity for f in RULES["FT120"].run(gather_facts(ctx))}
    assert found == {"kernels/kimi_k3/benchmarks/shim.py": Severity.ERROR,
                     "kernels/kimi_k3/benchmarks/aot.py": Severity.WARNING}


GC_RECORD_CHEAT = '''import gc


def candidates(baseline, point):
    for obj in gc.get_objects():
        if type(obj).__name__ == "CaseResult":
            obj.variants["fused"].samples_us[:] = []
    return {}
'''


def test_a_benchmark_that_reaches_the_harness_records_is_an_error_even_as_a_test_file(
        tmp_path: Path, policy: Policy) -> None:
    # Attack: the contribution's benchmark entry (a test-only file: no shipping file imports it) finds the
    # timing protocol's records through gc and rewrites them; lowered to a warning it would pass.
    bench = "vllm/models/kimi_k3/benchmarks/bench.py"
    ctx = make_ctx(tmp_path, policy, {bench: GC_RECORD_CHEAT}, contribution_dir="vllm/models/kimi_k3")
    found = [f for f in run_all(ctx) if f.path == bench]
    errors = [f for f in found if f.severity == Severity.ERROR]
    assert {f.code for f in errors} >= {"FT120", "FT146"}, [(f.code, f.severity, f.message) for f in found]
    assert all("fasttrack collect` runs" in f.message for f in errors)


def test_an_ordinary_patch_in_a_collected_test_file_stays_a_warning(tmp_path: Path, policy: Policy) -> None:
    # Honest twin: a test that patches a library for the Triton interpreter reaches nothing of the harness.
    test = "vllm/models/kimi_k3/tests/test_k3.py"
    patch = "from vllm.v1.sample.sampler import Sampler\nSampler.forward = None\n"
    ctx = make_ctx(tmp_path, policy, {test: patch}, contribution_dir="vllm/models/kimi_k3")
    [f] = [f for f in RULES["FT120"].run(gather_facts(ctx)) if f.path == test]
    assert f.severity == Severity.WARNING and "test file" in f.message
