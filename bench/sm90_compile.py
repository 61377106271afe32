"""Compile a kernel case for sm_90 on the CPU (Triton's bundled ptxas, no GPU): the SM90
compile gate of the tests (tests/kernels/triton/conftest.py runs it in a child process) and the
SASS tools (``gluon_sass.py``).

A case: id, module (dotted), kernel (attribute name), signature {arg: "*u8"/"i32"/...; a Gluon
TMA descriptor "desc:RxC", "desc8sw:RxC" or "tma:DTYPE:SWIZZLE:RxC"} for the runtime arguments in
order, constexprs {name: value, or {"call": function of the module, "args": [...]}}, num_warps,
num_stages; optional gluon (a Gluon kernel), divisible (integer args that real shapes make
multiples of 16; pointers and stride_* args always are), maxnreg. TRITON_INTERPRET must be unset
before triton is imported (the interpreter replaces the compiler).
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import tempfile


def sig_type(value: str) -> str:
    """A signature entry; "desc:RxC" is a Gluon TMA descriptor of uint8 [R, C] boxes,
    unswizzled, "desc8sw:RxC" one of e4m3 [R, C] boxes with the 128-byte swizzle,
    "tma:DTYPE:SWIZZLE:RxC" DTYPE u8 / e4m3 / bf16 boxes with that swizzle in bytes (the mangled
    type string depends on the triton version)."""
    if not value.startswith(("desc:", "desc8sw:", "tma:")):
        return value
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type
    if value.startswith("tma:"):
        _, name, swizzle, box = value.split(":")
        dtype = {"u8": torch.uint8, "e4m3": torch.float8_e4m3fn, "bf16": torch.bfloat16}[name]
        swizzle = int(swizzle)
    else:
        kind, box = value.split(":")
        swizzle, dtype = ((128, torch.float8_e4m3fn) if kind == "desc8sw"
                          else (0, torch.uint8))
    rows, cols = map(int, box.split("x"))
    layout = gl.NVMMASharedLayout(swizzle_byte_width=swizzle,
                                  element_bitwidth=dtype.itemsize * 8, rank=2)
    t = torch.empty((1024, 4096), dtype=dtype, device="meta")
    return mangle_type(TensorDescriptor(t, list(t.shape), list(t.stride()), [rows, cols], layout))


def compile_case(case: dict):
    """The case compiled for sm_90: triton's CompiledKernel (asm["ptx"], asm["cubin"])."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = importlib.import_module(case["module"])
    fn = getattr(module, case["kernel"])
    signature = {name: sig_type(ty) for name, ty in case["signature"].items()}
    # what a real launch specializes on: 16-byte aligned pointers, strides and the named sizes
    # divisible by 16 (this is what lets the pipeliner use cp.async/multi-buffering)
    aligned = [i for i, (name, ty) in enumerate(signature.items())
               if ty.startswith("*") or name.startswith("stride")
               or name in case.get("divisible", ())]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    # a constexpr given as {"call": name, "args": [...]} is module.name(*args) (a layout object,
    # which JSON cannot carry)
    constexprs = {name: getattr(module, v["call"])(*v["args"]) if isinstance(v, dict) else v
                  for name, v in case["constexprs"].items()}
    for name in constexprs:
        signature[name] = "constexpr"
    if case.get("gluon"):  # a Gluon kernel (triton.experimental.gluon)
        from triton.experimental.gluon._runtime import GluonASTSource
        src = GluonASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
    else:
        src = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": case["num_warps"],
                                   "num_stages": case["num_stages"],
                                   **({"maxnreg": case["maxnreg"]} if case.get("maxnreg")
                                      else {})})


def nvidia_tool(name: str) -> str:
    """Path of a tool triton bundles (ptxas, cuobjdump, nvdisasm)."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def cubin_tool(compiled, *args: str) -> str:
    """stdout of ``tool args... CUBIN`` on the compiled kernel's cubin ("" when triton bundles
    no such tool)."""
    tool = nvidia_tool(args[0])
    if not os.path.exists(tool):
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(compiled.asm["cubin"])
        return subprocess.run([tool, *args[1:], cubin], capture_output=True, text=True).stdout


def registers_and_stack(compiled) -> tuple[int | None, int | None]:
    """(registers, spill stack bytes) from cuobjdump -res-usage; (None, None) without it."""
    found = re.search(r"REG:(\d+) STACK:(\d+)", cubin_tool(compiled, "cuobjdump", "-res-usage"))
    return (int(found.group(1)), int(found.group(2))) if found else (None, None)
