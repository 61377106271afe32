"""SM90 compile gate for the attention-side Triton kernels (kernels.md §3.4), run on CPU.

``triton.compile`` needs real ``JITFunction`` objects, which do not exist once
``TRITON_INTERPRET=1`` is set (tests/conftest.py sets it), so :func:`compile_cases` runs this file
as a subprocess with the interpreter off and reads one JSON line per case back.

A case names a kernel (module, attribute), the types of its runtime arguments (scalars not
named are i32) and its launch meta (constexprs + ``num_warps``/``num_stages``), usually taken
from the module's own ``launch_meta`` so that the production configuration is what compiles.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SM90_SHARED_LIMIT = 227 * 1024


def _cases(area: str) -> list[dict[str, Any]]:
    """(name, module, kernel, types, meta) of every production kernel of one area."""
    cases: list[dict[str, Any]] = []
    if area == "attention":
        from deepinfer.kernels.triton import attention as m

        ptrs = {"q_ptr": "*bf16", "out_ptr": "*bf16", "sink_ptr": "*fp32", "ia_ptr": "*i64",
                "ib_ptr": "*i64", "a_ptr": "*u8", "b_ptr": "*u8", "qk_scale": "fp32"}
        for name, fa, fb, has_b in (("records_window+compressed", 1, 2, True),
                                    ("records_window_only", 1, 2, False)):
            cases.append(dict(name=f"sparse_attn {name} H64 D512", module=m.__name__,
                              kernel="_sparse_attn_sink_kernel", types=ptrs, ci=has_b,
                              meta=m.launch_meta(512, 64, fa, fb, has_b)))
        cases.append(dict(name="sparse_attn records prefill (64-row chunks) H64 D512",
                          module=m.__name__, kernel="_sparse_attn_sink_kernel", types=ptrs,
                          ci=True, meta=m.launch_meta(512, 64, 1, 2, True, num_queries=4096)))
        bf16_rows = dict(ptrs, a_ptr="*bf16", b_ptr="*bf16")
        cases.append(dict(name="sparse_attn bf16_rows H64 D512", module=m.__name__,
                          kernel="_sparse_attn_sink_kernel", types=bf16_rows,
                          meta=m.launch_meta(512, 64, 0, 0, False)))
        cases.append(dict(name="sparse_attn bf16_rows prefill H64 D512", module=m.__name__,
                          kernel="_sparse_attn_sink_kernel", types=bf16_rows, ci=True,
                          meta=m.launch_meta(512, 64, 0, 0, False, num_queries=4096)))
        from deepinfer.kernels.triton import attention_decode

        cases += attention_decode.aot_cases()
    else:
        mod = importlib.import_module(f"deepinfer.kernels.triton.{area}")
        cases = mod.aot_cases()
    return cases


def _compile_one(case: dict[str, Any]) -> dict[str, Any]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    mod = importlib.import_module(case["module"])
    fn = getattr(mod, case["kernel"])
    meta = dict(case["meta"])
    options = {k: meta.pop(k) for k in ("num_warps", "num_stages") if k in meta}
    sig = {}
    for p in inspect.signature(fn.fn).parameters:
        if p in meta:
            sig[p] = "constexpr"
        elif p in case["types"]:
            sig[p] = case["types"][p]
        elif p.endswith("_ptr"):
            raise ValueError(f"{case['name']}: no type for pointer argument {p}")
        else:
            sig[p] = "i32"
    t0 = time.time()
    # What a real launch specializes on: 16-byte aligned pointers and strides divisible by 16
    # (lets the compiler vectorize loads; the same rule as tests/kernels/triton/conftest.py).
    attrs = {(i,): [["tt.divisibility", 16]] for i, (p, ty) in enumerate(sig.items())
             if ty.startswith("*") or p.startswith("stride")}
    k = triton.compile(ASTSource(fn, sig, meta, attrs=attrs), target=GPUTarget("cuda", 90, 32),
                       options=options)
    ptx = k.asm["ptx"]
    out = dict(name=case["name"], shared=int(k.metadata.shared),
               num_warps=int(k.metadata.num_warps), wgmma=ptx.count("wgmma.mma_async"),
               mma_sync=ptx.count("mma.sync"), cp_async=ptx.count("cp.async.c"),
               stack=None,
               seconds=round(time.time() - t0, 1))
    cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    if cuobjdump.exists():
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(k.asm["cubin"])
        usage = subprocess.run([str(cuobjdump), "-res-usage", f.name], capture_output=True,
                               text=True).stdout
        os.unlink(f.name)
        for tok in usage.split():
            if tok.startswith("REG:"):
                out["regs"] = int(tok[4:])
            if tok.startswith("STACK:"):
                out["stack"] = int(tok[6:])
    return out


def compile_cases(area: str, timeout: float = 300.0) -> list[dict[str, Any]]:
    """Compile every case of ``area`` for sm_90 in a subprocess; one result dict per case."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, __file__, area], capture_output=True, text=True,
                          env=env, timeout=timeout)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not results:
        raise RuntimeError(f"SM90 compile of {area} failed:\n{proc.stderr[-4000:]}")
    return results


if __name__ == "__main__":
    # ``python aot_attention_side.py AREA [--all]``: --all also compiles the cases marked
    # ``ci=False`` (variants whose code paths the CI subset already covers).
    for c in _cases(sys.argv[1]):
        if c.get("ci", True) or "--all" in sys.argv:
            print(json.dumps(_compile_one(c)), flush=True)
