"""The tiny V4.1 model through the engine on the GPU (bench/h200_model_check.py, under pytest).

Run on the H200 with the interpreter OFF (tests/conftest.py defaults it on):
    TRITON_INTERPRET=0 python -m pytest -q -s -m gpu tests/gpu/test_model_gpu.py

16 prompts, greedy, 16 tokens, through ``LLM`` with (a) the plan's Triton backends against the
reference on the GPU and (b) the reference on the GPU against the reference on the CPU. A request
passes when its tokens are identical, or when its first divergence is explained by the measured
logit error: the reference's top-1 minus top-2 margin there is at most twice the largest
|logit difference| of the two backends on the reference's own sequence at that step. Logits must
be finite. The tables (and the decode-step times) are printed.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

BENCH = Path(__file__).resolve().parents[2] / "bench" / "h200_model_check.py"


@pytest.fixture(scope="module")
def check():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("triton")
    from deepinfer.kernels.triton.gemm_fp8 import is_interpreting

    if is_interpreting():
        pytest.skip("TRITON_INTERPRET is on: run with TRITON_INTERPRET=0 to test the GPU kernels")
    spec = importlib.util.spec_from_file_location("h200_model_check", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def result(check, tmp_path_factory):
    res = check.run_checks(tmp_path_factory.mktemp("plans"), num_prompts=16, num_tokens=16)
    check.print_report(res)
    return res


@pytest.mark.parametrize("which", [0, 1], ids=["triton_vs_gpu_ref", "gpu_ref_vs_cpu_ref"])
def test_tokens_match_or_diverge_within_the_measured_error(result, which):
    cmp = result.compares[which]
    assert len(cmp.rows) == 16
    assert all(math.isfinite(r.max_logit_err) for r in cmp.rows), f"{cmp.name}: non-finite logits"
    bad = [(r.index, r.first_divergence, r.margin_b, r.logit_err) for r in cmp.unexplained]
    assert not bad, f"{cmp.name}: divergences with a margin above twice the logit error " \
                    f"(request, position, margin, error): {bad}"


def test_the_plan_runs_triton_kernels(result):
    assert result.triton_ops, "the compiled H200 plan names no triton op"
    assert len(result.fallbacks) < len(result.triton_ops), "every triton op fell back"
    assert all(t["wall_ms_median"] > 0 for t in result.decode_ms.values())
