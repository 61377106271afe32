"""The tiny model with the GEMM-side Triton ops (interpreter) against the reference model: the
model's wiring of the fused mHC sites (``hc_expand_norm`` with its Q8_32 values, the
projections' ``rounded`` inputs, the experts' ``x_rounded``, the compressor's ``promoted``
projections) through the Triton wrappers, prefill then a decode step.

Tolerance: the interpreter's bf16 casts truncate (docs/kernels.md §3.2), which moves the tiny
model's logits ~2.6e-2 (rel. L2) from the reference — the same figure to 16 digits at the
commit before the fusions (session 30). This catches what breaks the wiring (a wrong keyword,
shape, weight or input: errors or O(1) moves); the reference-level bit identity of the fused
sites is tests/runtime/test_site_fusion.py's and tests/kernels/triton/test_mhc_norm.py's.
"""

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels.registry import KernelSet  # noqa: E402
from deepinfer.kernels.triton import register_triton_backend  # noqa: E402
from deepinfer.runtime.model.batch import ForwardBatch  # noqa: E402
from deepinfer.runtime.model.cache import SequenceCache  # noqa: E402
from tests.runtime.paged_helpers import tiny_model  # noqa: E402

OPS = ("hc_expand_norm", "hc_expand", "hc_collapse", "hc_coeffs", "rms_norm", "rms_norm_q8",
       "linear", "linear_quant_act", "fake_quant_fp8_block32", "expert_ffn",
       "moe_routed_experts")


def _logits(model, ids: list[int]) -> torch.Tensor:
    cache = SequenceCache.empty(model.spec)
    prefill = model(ForwardBatch.build([ids], [cache]))
    return torch.cat([prefill, model(ForwardBatch.build([[7]], [cache]))])


def test_tiny_model_on_triton_ops_matches_the_reference(monkeypatch):
    from deepinfer.kernels import registry

    registry.ops()  # the reference backend first; Triton registered into a copy (no leak)
    monkeypatch.setattr(registry, "_REGISTRY",
                        {op: dict(regs) for op, regs in registry._REGISTRY.items()})
    assert set(OPS) <= set(register_triton_backend())
    ref, tri = tiny_model(), tiny_model()
    tri.kernels = KernelSet({op: "triton" for op in OPS})
    ids = torch.randint(0, 500, (6,), generator=torch.Generator().manual_seed(1)).tolist()
    want, got = _logits(ref, ids).double(), _logits(tri, ids).double()
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < 5e-2, rel
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.7



def test_tiny_model_on_visibility_aware_index_scores(monkeypatch):
    """A 48-token prompt (more entries than ``index_topk``: the layers score and pick) with
    the indexer's scores from the Triton kernel given each query's visible count (session 31:
    key tiles no query of a program sees are written -inf unscored; the model's top-k takes
    the scores as they come) gives the logits, bit for bit, of the kernel without the counts
    followed by the reference's mask (the wiring before)."""
    from deepinfer.kernels import registry
    from deepinfer.kernels.reference.indexer import mask_invisible

    registry.ops()
    monkeypatch.setattr(registry, "_REGISTRY",
                        {op: dict(regs) for op, regs in registry._REGISTRY.items()})
    assert "index_scores" in register_triton_backend()
    new, old = tiny_model(), tiny_model()
    new.kernels = KernelSet({"index_scores": "triton"})
    old.kernels = KernelSet({"index_scores": "triton"})
    scores, counts = old.kernels.index_scores, []

    def masked_after(q, w, keys, num_visible):
        counts.append(num_visible.shape[0])
        return mask_invisible(scores(q, w, keys), num_visible)

    old.kernels.index_scores = masked_after
    ids = torch.randint(0, 500, (48,), generator=torch.Generator().manual_seed(2)).tolist()
    want, got = _logits(old, ids), _logits(new, ids)
    assert counts and counts[0] == 48  # the prefill scored its 48 queries
    assert torch.equal(got, want)


def test_tiny_model_first_site_on_strided_streams_is_the_copys_bits(monkeypatch):
    """The first block's streams, a stride-0 view of the embedding since session 33: with
    ``hc_coeffs`` split so that each split lies in one stream (the V4.1 launches' case:
    split 8 at 4K tokens, 32 at decode), the first site reads them strided (STRIDED launches
    seen), and the tiny model's logits (prefill and a decode step) are the bits of the same
    model whose coefficients and expand get the contiguous copy."""
    from deepinfer.kernels import registry
    from deepinfer.kernels.triton import mhc as tri_mhc

    registry.ops()
    monkeypatch.setattr(registry, "_REGISTRY",
                        {op: dict(regs) for op, regs in registry._REGISTRY.items()})
    register_triton_backend()
    model = tiny_model()
    model.kernels = KernelSet({op: "triton" for op in OPS})
    s = model.spec.hc_mult
    monkeypatch.setattr(tri_mhc, "coeffs_split", lambda n, k, cfg: s)  # a stream per split
    strided, kernel = [], tri_mhc._hc_coeffs_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                strided.append(kwargs["STRIDED"])
                return kernel[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(tri_mhc, "_hc_coeffs_kernel", Spy())
    ids = torch.randint(0, 500, (6,), generator=torch.Generator().manual_seed(2)).tolist()
    got = _logits(model, ids)
    assert any(strided) and not all(strided), strided  # the first site only
    # the same model, its two first-site ops handed the contiguous copy (the ops resolved
    # once per KernelSet: overridden in its cache)
    kernels = KernelSet({op: "triton" for op in OPS})
    coeffs, expand_norm = kernels.hc_coeffs, kernels.hc_expand_norm
    kernels._cache["hc_coeffs"] = lambda x, *a, **k: coeffs(x.contiguous(), *a, **k)
    kernels._cache["hc_expand_norm"] = \
        lambda o, x, *a, **k: expand_norm(o, x.contiguous(), *a, **k)
    model.kernels = kernels
    strided.clear()
    want = _logits(model, ids)
    assert not any(strided)
    assert torch.equal(got, want)
