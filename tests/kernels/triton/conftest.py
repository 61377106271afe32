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
BENCH_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench")

_CHILD = textwrap.dedent(r"""
    import json, os, sys, traceback
    sys.path.insert(0, os.environ["DEEPINFER_BENCH_DIR"])
    from sm90_compile import compile_case, registers_and_stack

    cases = json.loads(sys.stdin.read())
    results = {}
    for case in cases:
        try:
            compiled = compile_case(case)
            ptx = compiled.asm["ptx"]
            regs, stack = registers_and_stack(compiled)
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
    env["DEEPINFER_BENCH_DIR"] = BENCH_DIR
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
