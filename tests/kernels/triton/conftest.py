"""Shared helpers for the Triton kernel tests: the SM90 compile gate (kernels.md §3.4).

The interpreter (TRITON_INTERPRET=1, set by tests/conftest.py) patches triton.language while it
runs, and a kernel decorated under it is not a JITFunction, so SM90 compilation runs in ONE child
process per call with the interpreter off: it imports the kernel modules afresh, compiles each
case with ``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` (Triton's bundled
ptxas, no GPU needed) and reports shared memory, whether the PTX uses wgmma, and any error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SM90_SHARED_LIMIT_BYTES = 227 * 1024

_CHILD = textwrap.dedent(r"""
    import importlib, json, os, re, subprocess, sys, tempfile, traceback
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    def sig_type(value):
        # a signature entry; "desc:RxC" is a Gluon TMA descriptor of uint8 [R, C] boxes,
        # unswizzled, "desc8sw:RxC" one of e4m3 [R, C] boxes with the 128-byte swizzle (the
        # mangled type string depends on the triton version)
        # ("tma:DTYPE:SWIZZLE:RxC": DTYPE u8 / e4m3 / bf16 boxes with that swizzle in bytes)
        if not value.startswith(("desc:", "desc8sw:", "tma:")):
            return value
        import torch
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
        from triton.runtime.jit import mangle_type
        if value.startswith("tma:"):
            _, name, swizzle, box = value.split(":")
            dtype = {"u8": torch.uint8, "e4m3": torch.float8_e4m3fn,
                     "bf16": torch.bfloat16}[name]
            swizzle = int(swizzle)
        else:
            kind, box = value.split(":")
            swizzle, dtype = ((128, torch.float8_e4m3fn) if kind == "desc8sw"
                              else (0, torch.uint8))
        rows, cols = map(int, box.split("x"))
        layout = gl.NVMMASharedLayout(swizzle_byte_width=swizzle,
                                      element_bitwidth=dtype.itemsize * 8, rank=2)
        t = torch.empty((1024, 4096), dtype=dtype, device="meta")
        return mangle_type(TensorDescriptor(t, list(t.shape), list(t.stride()), [rows, cols],
                                            layout))

    cases = json.loads(sys.stdin.read())
    results = {}
    for case in cases:
        try:
            module = importlib.import_module(case["module"])
            fn = getattr(module, case["kernel"])
            signature = {name: sig_type(ty) for name, ty in case["signature"].items()}
            # what a real launch specializes on: 16-byte aligned pointers, strides and the named
            # sizes divisible by 16 (this is what lets the pipeliner use cp.async/multi-buffering)
            aligned = [i for i, (name, ty) in enumerate(signature.items())
                       if ty.startswith("*") or name.startswith("stride")
                       or name in case.get("divisible", ())]
            attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
            # a constexpr given as {"call": name, "args": [...]} is module.name(*args) (a layout
            # object, which JSON cannot carry)
            constexprs = {name: getattr(module, v["call"])(*v["args"]) if isinstance(v, dict)
                          else v for name, v in case["constexprs"].items()}
            for name in constexprs:
                signature[name] = "constexpr"
            if case.get("gluon"):  # a Gluon kernel (triton.experimental.gluon)
                from triton.experimental.gluon._runtime import GluonASTSource
                src = GluonASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
            else:
                src = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
            compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": case["num_warps"],
                                               "num_stages": case["num_stages"],
                                               **({"maxnreg": case["maxnreg"]}
                                                  if case.get("maxnreg") else {})})
            ptx = compiled.asm["ptx"]
            regs, stack = None, None
            cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia",
                                     "bin", "cuobjdump")
            if os.path.exists(cuobjdump):  # register use and spill stack from the cubin
                with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
                    f.write(compiled.asm["cubin"])
                usage = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True,
                                       text=True).stdout
                os.unlink(f.name)
                found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
                if found:
                    regs, stack = int(found.group(1)), int(found.group(2))
            results[case["id"]] = {"shared": compiled.metadata.shared, "wgmma": "wgmma" in ptx,
                                   "regs": regs, "stack": stack, "error": None,
                                   "shfl": ptx.count("shfl.sync"),
                                   "wgmma_count": ptx.count("wgmma.mma_async")}
        except Exception:
            results[case["id"]] = {"shared": None, "wgmma": False,
                                   "error": traceback.format_exc()[-3000:]}
    print("@@RESULTS@@" + json.dumps(results))
""")


def compile_sm90_cases(cases: list[dict]) -> dict[str, dict]:
    """Compile each case for sm_90 in a child process.

    A case: id, module (dotted), kernel (attribute name), signature {arg: "*u8"/"i32"/...; a
    Gluon TMA descriptor "desc:RxC", "desc8sw:RxC" or "tma:DTYPE:SWIZZLE:RxC"} for the runtime
    arguments in order,
    constexprs {name: value, or {"call": function of the module, "args": [...]}}, num_warps,
    num_stages; optional gluon (a Gluon kernel); optional
    divisible (names of integer args that real shapes make multiples of 16; pointers and stride_*
    args always are), expect_wgmma, no_spill (assert a zero spill stack in the cubin, or at most
    max_stack bytes), maxnreg (the launch's register cap).
    Returns {id: {"shared": bytes, "wgmma": bool, "error": str | None}}.
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(cases), env=env,
                          capture_output=True, text=True, timeout=600)
    marker = proc.stdout.rfind("@@RESULTS@@")
    if marker < 0:
        raise RuntimeError("SM90 compile child failed:\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout[marker + len("@@RESULTS@@"):])


def assert_compiled(result: dict, case: dict) -> None:
    """A compile result is error-free, under the SM90 shared-memory limit, and uses wgmma when
    the case says ``expect_wgmma``."""
    case_id = case["id"]
    assert result["error"] is None, f"{case_id}: SM90 compile failed:\n{result['error']}"
    assert result["shared"] <= SM90_SHARED_LIMIT_BYTES, \
        f"{case_id}: {result['shared']} B shared memory > {SM90_SHARED_LIMIT_BYTES} B"
    if case.get("expect_wgmma"):
        assert result["wgmma"], f"{case_id}: PTX has no wgmma (tensor cores unused)"
    if case.get("no_spill") and result.get("stack") is not None:
        allowed = case.get("max_stack", 0)  # a register cap (maxnreg) may spill a few words
        assert result["stack"] <= allowed, \
            f"{case_id}: {result['stack']} B of register spills (allowed {allowed})"


@pytest.fixture(scope="session")
def sm90_compile():
    """``sm90_compile(cases)``: compile every case in one child process, assert each compiled
    under 227 KiB shared memory, print and return {id: result}."""

    def run(cases: list[dict]) -> dict[str, dict]:
        results = compile_sm90_cases(cases)
        for case in cases:
            r = results[case["id"]]
            print(f"SM90 {case['id']}: shared={r['shared']} B wgmma={r['wgmma']} "
                  f"regs={r.get('regs')} spill_stack={r.get('stack')} B")
        for case in cases:
            assert_compiled(results[case["id"]], case)
        return results

    return run
