"""PROBE (not a product kernel): a TileLang 0.1.15 W4A16 decode expert GEMM for sm_90a.

    python bench/tilelang_moe_probe.py --compile [--gated] [--no-ws] [--natural-k] [--stages 4]
    python bench/tilelang_moe_probe.py --check   [--gated] [--no-ws] [--natural-k] [--tokens 64]

Status (session 9): --compile run on the CPU only (figures in docs/performance.md, "TileLang
probe"); --check (GPU: correctness and GB/s) never run yet.

Question it answers: can TileLang express the kernel a hand-scheduled W4A16 decode GEMM needs,
and what does its sm_90a code look like? Run it in a venv with tilelang (never a project
dependency; nothing imports this file and no test needs it):
    python -m venv /tmp/tlvenv && /tmp/tlvenv/bin/pip install torch==2.13.0 tilelang==0.1.15
    /tmp/tlvenv/bin/python bench/tilelang_moe_probe.py --compile   (CPU: nvcc only, no GPU)

The kernel, one program per (block of BM pairs of one expert, tile of BN_W weight rows):
    out^T[BN_W, BM] = W_e[BN_W, K] @ x^T[K, BM]      (swapped: weight rows on the wgmma M side)
  - K streamed in steps of BK through ``T.Pipelined`` (NUM_STAGES buffers): per step the packed
    MXFP4 bytes W[e, rows, BK/2] (uint8) and ue8m0 scales S[e, rows, BK/32] go global -> shared
    (TMA or cp.async, TileLang's choice), the BM token rows x[row(pair), BK] are gathered
    global -> shared (the wgmma B operand, K-major).
  - The bytes are dequantized shared -> registers straight into the wgmma A fragment (bf16),
    exactly: nibble bits s|e1 e0|m -> bf16 bits s|0000000|e1 e0|m|000000 (= value * 2^-126),
    times 2^(e - 1) as a bf16 (one multiply; exact for scale bytes e <= 128, which the
    runtime's weights vouch for: ``ExpertWeights.scale_max``, W_ONE_MUL=2 in moe_experts).
  - ``T.gemm(w_frag, x_shared, acc, transpose_B=True)``: register-A wgmma (m64nBMk16), fp32
    accumulators [BN_W, BM].
  - K order: by default each thread's A-fragment elements are made to come from CONTIGUOUS
    bytes of a weight row (a permutation of K inside each BK step, applied identically to x:
    the sum over K does not care), so the unpack can read its bytes as words instead of
    single bytes; ``--natural-k`` keeps the stored order (wgmma's fragment then wants bytes
    that are 4 apart).
Grouping over experts reads ``block_expert`` / ``sorted_pairs`` like moe_experts'
``_moe_gemm_kernel`` (``moe_align.align_pairs``: padding pairs = num_pairs, expert -1 = idle
block). Down projection (default): y[pair, O] = h[pair, K] @ W2_e^T, K = I = 2304, O = D = 5120.
``--gated``: W1 and W3 tiles share the x tile, K = D = 5120, O = I = 2304, and the epilogue
stores h = r * silu(min(g, limit)) * clamp(u, -limit, limit) in bf16 (NOT the Q8_32 rounding of
the product kernel: the probe measures the K loop).

Shapes (elements): x (rows, K) bf16, W (E, O, K/2) uint8, S (E, O, K/32) uint8, sorted_pairs
(num_blocks * BM,) int32, block_expert (num_blocks,) int32, route_w (num_pairs,) fp32, out
(num_pairs, O) bf16. num_pairs and num_blocks are fixed at build time (a probe; the product
would make them symbolic).
"""

# no `from __future__ import annotations`: TileLang evaluates the prim_func's T.Tensor
# annotations, which name the closure's shapes
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HIDDEN_D = 5120
EXPERT_I = 2304
NUM_EXPERTS = 384
TOPK = 6
LIMIT = 10.0


def import_tilelang():
    """(tilelang, tilelang.language) or exit with a message."""
    try:
        import tilelang
        import tilelang.language as T
    except (ImportError, OSError, RuntimeError) as exc:
        sys.exit(f"tilelang_moe_probe: tilelang is not importable here ({exc}); install it in a "
                 "separate venv: python -m venv /tmp/tlvenv && /tmp/tlvenv/bin/pip install "
                 "torch==2.13.0 tilelang==0.1.15")
    return tilelang, T


def k_source(j, block_k: int, permuted: bool):
    """Stored K offset (inside one BK step) of logical fragment column j (a TIR expression).

    wgmma's register A fragment (m64k16, bf16) gives the thread of quad lane q = (c % 8) // 2
    the columns c = 2q, 2q+1, 2q+8, 2q+9 of each 16-column slice b. Permuted: logical (b, c)
    reads stored element q * (BK/4) + b * 4 + (c // 8) * 2 + c % 2, so a thread's BK/4 elements
    of a row are one contiguous run of BK/8 bytes (two ue8m0 groups at BK=256); natural: j."""
    if not permuted:
        return j
    b, c = j // 16, j % 16
    return (c % 8) // 2 * (block_k // 4) + b * 4 + (c // 8) * 2 + c % 2


def build_kernel(gated: bool, num_pairs: int, num_blocks: int, block_m: int = 16,
                 block_n_w: int = 64, block_k: int = 256, num_stages: int = 4,
                 threads: int = 128, permuted_k: bool = True, topk: int = TOPK,
                 limit: float = LIMIT):
    """The TileLang prim_func of one grouped launch (gated or down projection)."""
    tilelang, T = import_tilelang()
    K, O = (HIDDEN_D, EXPERT_I) if gated else (EXPERT_I, HIDDEN_D)
    E = NUM_EXPERTS
    rows_x = num_pairs // topk if gated else num_pairs
    row_div = topk if gated else 1
    assert K % block_k == 0 and O % block_n_w == 0 and block_k % 64 == 0
    bk_bytes, bk_groups = block_k // 2, block_k // 32
    num_k_steps = K // block_k

    @T.macro
    def dequant(w_shared, s_shared, w_frag):
        """w_frag[i, j] = e2m1(stored element k_source(j) of row i) * 2^(e - 127), bf16."""
        for i, j in T.Parallel(block_n_w, block_k):
            ks = k_source(j, block_k, permuted_k)
            byte = T.Cast("uint16", w_shared[i, ks // 2])
            nib = (byte >> T.Cast("uint16", (ks % 2) * 4)) & T.uint16(0xF)
            bits = ((nib & T.uint16(0x8)) << T.uint16(12)) | ((nib & T.uint16(0x7)) << T.uint16(6))
            scale = T.reinterpret("bfloat16",
                                  (T.Cast("uint16", s_shared[i, ks // 32]) + T.uint16(126))
                                  << T.uint16(7))
            w_frag[i, j] = T.reinterpret("bfloat16", bits) * scale

    if gated:
        @T.prim_func
        def moe_probe(x: T.Tensor((rows_x, K), "bfloat16"),
                      w1: T.Tensor((E, O, K // 2), "uint8"), s1: T.Tensor((E, O, K // 32), "uint8"),
                      w3: T.Tensor((E, O, K // 2), "uint8"), s3: T.Tensor((E, O, K // 32), "uint8"),
                      sorted_pairs: T.Tensor((num_blocks * block_m,), "int32"),
                      block_expert: T.Tensor((num_blocks,), "int32"),
                      route_w: T.Tensor((num_pairs,), "float32"),
                      out: T.Tensor((num_pairs, O), "bfloat16")):
            with T.Kernel(num_blocks, O // block_n_w, threads=threads) as (blk, tile_n):
                x_shared = T.alloc_shared((block_m, block_k), "bfloat16")
                w1_shared = T.alloc_shared((block_n_w, bk_bytes), "uint8")
                s1_shared = T.alloc_shared((block_n_w, bk_groups), "uint8")
                w3_shared = T.alloc_shared((block_n_w, bk_bytes), "uint8")
                s3_shared = T.alloc_shared((block_n_w, bk_groups), "uint8")
                w1_frag = T.alloc_fragment((block_n_w, block_k), "bfloat16")
                w3_frag = T.alloc_fragment((block_n_w, block_k), "bfloat16")
                acc1 = T.alloc_fragment((block_n_w, block_m), "float32")
                acc3 = T.alloc_fragment((block_n_w, block_m), "float32")
                pair_ids = T.alloc_shared((block_m,), "int32")
                if block_expert[blk] >= 0:
                    for t in T.Parallel(block_m):
                        pair_ids[t] = sorted_pairs[blk * block_m + t]
                    T.clear(acc1)
                    T.clear(acc3)
                    for ko in T.Pipelined(num_k_steps, num_stages=num_stages):
                        for t, j in T.Parallel(block_m, block_k):
                            p = pair_ids[t]
                            x_shared[t, j] = T.if_then_else(
                                p < num_pairs,
                                x[T.min(p, num_pairs - 1) // row_div,
                                  ko * block_k + k_source(j, block_k, permuted_k)],
                                T.bfloat16(0))
                        T.copy(w1[block_expert[blk], tile_n * block_n_w, ko * bk_bytes], w1_shared)
                        T.copy(s1[block_expert[blk], tile_n * block_n_w, ko * bk_groups], s1_shared)
                        T.copy(w3[block_expert[blk], tile_n * block_n_w, ko * bk_bytes], w3_shared)
                        T.copy(s3[block_expert[blk], tile_n * block_n_w, ko * bk_groups], s3_shared)
                        dequant(w1_shared, s1_shared, w1_frag)
                        T.gemm(w1_frag, x_shared, acc1, transpose_B=True)
                        dequant(w3_shared, s3_shared, w3_frag)
                        T.gemm(w3_frag, x_shared, acc3, transpose_B=True)
                    for i, t in T.Parallel(block_n_w, block_m):
                        p = pair_ids[t]
                        if p < num_pairs:
                            g = T.min(acc1[i, t], T.float32(limit))
                            u = T.min(T.max(acc3[i, t], T.float32(-limit)), T.float32(limit))
                            out[p, tile_n * block_n_w + i] = T.Cast(
                                "bfloat16", route_w[p] * g / (1.0 + T.exp(-g)) * u)
        return moe_probe

    @T.prim_func
    def moe_probe(x: T.Tensor((rows_x, K), "bfloat16"),
                  w1: T.Tensor((E, O, K // 2), "uint8"), s1: T.Tensor((E, O, K // 32), "uint8"),
                  sorted_pairs: T.Tensor((num_blocks * block_m,), "int32"),
                  block_expert: T.Tensor((num_blocks,), "int32"),
                  out: T.Tensor((num_pairs, O), "bfloat16")):
        with T.Kernel(num_blocks, O // block_n_w, threads=threads) as (blk, tile_n):
            x_shared = T.alloc_shared((block_m, block_k), "bfloat16")
            w1_shared = T.alloc_shared((block_n_w, bk_bytes), "uint8")
            s1_shared = T.alloc_shared((block_n_w, bk_groups), "uint8")
            w1_frag = T.alloc_fragment((block_n_w, block_k), "bfloat16")
            acc1 = T.alloc_fragment((block_n_w, block_m), "float32")
            pair_ids = T.alloc_shared((block_m,), "int32")
            if block_expert[blk] >= 0:
                for t in T.Parallel(block_m):
                    pair_ids[t] = sorted_pairs[blk * block_m + t]
                T.clear(acc1)
                for ko in T.Pipelined(num_k_steps, num_stages=num_stages):
                    for t, j in T.Parallel(block_m, block_k):
                        p = pair_ids[t]
                        x_shared[t, j] = T.if_then_else(
                            p < num_pairs,
                            x[T.min(p, num_pairs - 1) // row_div,
                              ko * block_k + k_source(j, block_k, permuted_k)],
                            T.bfloat16(0))
                    T.copy(w1[block_expert[blk], tile_n * block_n_w, ko * bk_bytes], w1_shared)
                    T.copy(s1[block_expert[blk], tile_n * block_n_w, ko * bk_groups], s1_shared)
                    dequant(w1_shared, s1_shared, w1_frag)
                    T.gemm(w1_frag, x_shared, acc1, transpose_B=True)
                for i, t in T.Parallel(block_n_w, block_m):
                    p = pair_ids[t]
                    if p < num_pairs:
                        out[p, tile_n * block_n_w + i] = T.Cast("bfloat16", acc1[i, t])
    return moe_probe


OPS = ("HGMMA", "HMMA", "LDGSTS", "UTMALDG", "LDG", "LDS", "STS", "PRMT", "LOP3", "IMAD.SHL",
       "HMUL2", "HFMA2", "F2FP", "SYNCS")


def nvidia_tool(name: str) -> str | None:
    """cuobjdump / nvdisasm: PATH, else the copies that triton ships (main environment)."""
    found = shutil.which(name)
    if found:
        return found
    for root in sys.path + ["/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages"]:
        cand = os.path.join(root, "triton", "backends", "nvidia", "bin", name)
        if os.path.exists(cand):
            return cand
    return None


def consumer_k_loop(sass: str) -> tuple[int, collections.Counter]:
    """(instructions, opcode counts) of the label..backward-branch block of ``sass`` that holds
    the most HGMMA/HMMA and ends in a CONDITIONAL branch: the consumer's K loop (the producer's
    TMA loop has no MMA; out-of-line barrier-wait loops jump back unconditionally)."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines)
              if (m := re.match(r"^(\.L_x_\d+):", line.strip()))}
    best, best_mma = None, -1
    for i, line in enumerate(lines):
        m = re.search(r"@!?P\d+\s+BRA `\((\.L_x_\d+)\)", line)
        start = labels.get(m.group(1), i) if m else i
        if start < i:
            mma = sum("GMMA" in x or "HMMA" in x for x in lines[start:i])
            if mma > best_mma or (mma == best_mma and i - start > best[1] - best[0]):
                best, best_mma = (start, i), mma
    mix = collections.Counter()
    for i in range(best[0], best[1] + 1) if best else ():
        m = re.match(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)",
                     lines[i])
        if m:
            mix[m.group(1)] += 1
    return sum(mix.values()), mix


def compile_report(args) -> int:
    """Lower for sm_90a, compile with nvcc (tvm_ffi backend), print the CUDA source's shape and
    the cubin's registers, spills, shared memory and the K loop's instruction mix."""
    cache = args.keep or tempfile.mkdtemp(prefix="tl_moe_probe_")
    os.environ["TILELANG_CACHE_DIR"] = os.path.abspath(cache)  # before tilelang's import
    tilelang, _ = import_tilelang()
    from tvm.target import Target

    num_pairs = args.tokens * TOPK
    num_blocks = -(-num_pairs // args.bm) + min(NUM_EXPERTS + 1, num_pairs)  # align_pairs' bound
    func = build_kernel(args.gated, num_pairs, num_blocks, args.bm, args.bn, args.bk,
                        args.stages, args.threads, not args.natural_k)
    pass_configs = {"tl.disable_warp_specialized": True} if args.no_ws else {}
    target = Target({"kind": "cuda", "arch": "sm_90a"})
    t0 = time.time()
    with target:
        kernel = tilelang.compile(func, target=target, execution_backend="tvm_ffi",
                                  pass_configs=pass_configs)
    what = "gated (w1, w3)" if args.gated else "down (w2)"
    print(f"{what}: BM={args.bm} pairs x BN_W={args.bn} weight rows x BK={args.bk}, "
          f"{args.stages} stages, {args.threads} threads, K order "
          f"{'natural' if args.natural_k else 'permuted'}, warp-specialized "
          f"{'off' if args.no_ws else 'auto'}; lower + nvcc {time.time() - t0:.1f} s")
    src = kernel.get_kernel_source()
    with open(os.path.join(cache, "probe.cu"), "w") as f:
        f.write(src)
    print(f"CUDA: wgmma_rs {src.count('wgmma_rs<')}, wgmma_ss {src.count('wgmma_ss<')}, "
          f"tma_load {src.count('tma_load(')}, cp_async {src.count('cp_async')}, "
          f"launch_bounds {re.findall(r'__launch_bounds__[(]([^)]*)[)]', src)}")
    frags = re.findall(r"bfloat16_t (w[13]_frag)\[(\d+)\];", src)
    to_shared = [n for n, _ in frags if re.search(rf"_shared\w*\)\[[^;]*\] = [^;]*{n}", src)]
    print(f"dequantized fragments {frags} (bf16 per thread); stored to shared memory: "
          f"{'yes ' + str(to_shared) if to_shared else 'no (register A operand of wgmma)'}")
    cubins = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs
              if f.endswith(".cubin")]
    cuobjdump, nvdisasm = nvidia_tool("cuobjdump"), nvidia_tool("nvdisasm")
    if not cubins or not cuobjdump or not nvdisasm:
        print(f"no cubin ({cubins}) or no cuobjdump/nvdisasm ({cuobjdump}, {nvdisasm}): "
              f"source kept in {cache}")
        return 1
    cubin = max(cubins, key=os.path.getmtime)
    usage = subprocess.run([cuobjdump, "-res-usage", cubin], capture_output=True,
                           text=True).stdout
    sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True).stdout
    with open(os.path.join(cache, "probe.sass"), "w") as f:
        f.write(sass)
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    dyn = re.findall(r"buf_dyn_shmem \+ (\d+)", src)
    print(f"cubin: registers {found.group(1)}, spill stack {found.group(2)} B, local "
          f"{found.group(4)} B, static shared {found.group(3)} B (+ dynamic: last buffer at "
          f"offset {max(map(int, dyn)) if dyn else 0} B)" if found else usage)
    total, mix = consumer_k_loop(sass)
    weights_per_thread = args.bn * args.bk * (2 if args.gated else 1) // args.threads
    print(f"consumer K loop (one BK step): {total} instructions, "
          f"{total / max(weights_per_thread, 1):.1f} per weight of the thread's "
          f"{weights_per_thread} (this K step)")
    print("  " + ", ".join(f"{op} {sum(n for o, n in mix.items() if o.startswith(op))}"
                           for op in OPS))
    print("  all: " + ", ".join(f"{op} {n}" for op, n in mix.most_common()))
    print(f"files: {cache}/probe.cu, {cache}/probe.sass, {cubin}")
    return 0


def check(args) -> int:
    """GPU only: run the probe on random MXFP4 experts and routing, compare with a torch
    dequantize-and-matmul (same K order as the weights' own: the permutation is internal),
    and time it against the weight bytes it has to read."""
    try:
        import torch
    except ImportError:
        sys.exit("tilelang_moe_probe --check: torch is not importable")
    if not torch.cuda.is_available():
        sys.exit("tilelang_moe_probe --check: no CUDA device here (this mode is for the H200; "
                 "use --compile on a CPU machine)")
    tilelang, _ = import_tilelang()
    from tvm.target import Target

    torch.manual_seed(0)
    dev = "cuda"
    K, O = (HIDDEN_D, EXPERT_I) if args.gated else (EXPERT_I, HIDDEN_D)
    num_tokens, E, bm = args.tokens, NUM_EXPERTS, args.bm
    num_pairs = num_tokens * TOPK
    ids = torch.stack([torch.randperm(E)[:TOPK] for _ in range(num_tokens)]).to(torch.int32)
    route_w = torch.rand(num_pairs)
    # grouping like moe_align.align_pairs: experts in order, each padded to BM with num_pairs
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    pairs_list, block_list = [], []
    for e in torch.unique(flat).tolist():
        members = order[flat[order] == e].tolist()
        pad = -len(members) % bm
        pairs_list += members + [num_pairs] * pad
        block_list += [e] * ((len(members) + pad) // bm)
    num_blocks = -(-num_pairs // bm) + min(E + 1, num_pairs)  # the static bound
    block_list += [-1] * (num_blocks - len(block_list))
    pairs_list += [num_pairs] * (num_blocks * bm - len(pairs_list))
    sorted_pairs = torch.tensor(pairs_list, dtype=torch.int32, device=dev)
    block_expert = torch.tensor(block_list, dtype=torch.int32, device=dev)

    def mxfp4(shape_o):
        """Random MXFP4 experts (E, O, K/2) bytes + scale bytes in [118, 128] (<= 128: the
        one-multiply unpack), and their exact fp32 values (E, O, K)."""
        packed = torch.randint(0, 256, (E, shape_o, K // 2), dtype=torch.uint8, device=dev)
        scale = torch.randint(118, 129, (E, shape_o, K // 32), dtype=torch.uint8, device=dev)
        table = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6],
                             device=dev)
        vals = torch.stack([table[(packed & 0xF).long()], table[(packed >> 4).long()]], -1)
        vals = vals.reshape(E, shape_o, K) * torch.exp2(
            scale.float() - 127).repeat_interleave(32, dim=-1)
        return packed, scale, vals

    rows_x = num_tokens if args.gated else num_pairs
    x = (torch.randn(rows_x, K, device=dev) * 0.5).to(torch.bfloat16)
    w1, s1, v1 = mxfp4(O)
    func = build_kernel(args.gated, num_pairs, num_blocks, bm, args.bn, args.bk, args.stages,
                        args.threads, not args.natural_k)
    pass_configs = {"tl.disable_warp_specialized": True} if args.no_ws else {}
    target = Target({"kind": "cuda", "arch": "sm_90a"})
    with target:
        kernel = tilelang.compile(func, target=target, execution_backend="tvm_ffi",
                                  pass_configs=pass_configs)
    out = torch.full((num_pairs, O), float("nan"), dtype=torch.bfloat16, device=dev)
    e_of_pair = flat.long().to(dev)
    row_of_pair = torch.arange(num_pairs, device=dev) // (TOPK if args.gated else 1)
    xf = x.float()[row_of_pair]  # (pairs, K)
    if args.gated:
        w3, s3, v3 = mxfp4(O)
        rw = route_w.to(dev)
        call = lambda: kernel(x, w1, s1, w3, s3, sorted_pairs, block_expert, rw, out)  # noqa
        g = torch.einsum("pk,pok->po", xf, v1[e_of_pair]).clamp(max=LIMIT)
        u = torch.einsum("pk,pok->po", xf, v3[e_of_pair]).clamp(-LIMIT, LIMIT)
        ref = rw[:, None] * torch.nn.functional.silu(g) * u
        weight_bytes = 2 * (w1.numel() + s1.numel()) // E
    else:
        call = lambda: kernel(x, w1, s1, sorted_pairs, block_expert, out)  # noqa: E731
        ref = torch.einsum("pk,pok->po", xf, v1[e_of_pair])
        weight_bytes = (w1.numel() + s1.numel()) // E
    call()
    torch.cuda.synchronize()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    nan = torch.isnan(out).any().item()
    experts_touched = len(torch.unique(flat))
    from tilelang.profiler.bench import do_bench

    ms = do_bench(call, warmup=25, rep=100)  # ms, mean, L2 flushed between runs
    gbytes = experts_touched * weight_bytes / 1e9
    print(f"{'gated' if args.gated else 'down'} {num_tokens} tokens ({experts_touched} experts): "
          f"rel. L2 error {err:.2e} (bf16 output; expect < 1e-2), NaN left {nan}; "
          f"{ms * 1e3:.1f} us, {gbytes / (ms / 1e3):.0f} GB/s of expert weights "
          f"({gbytes * 1e3:.1f} MB; H200 HBM ~4800 GB/s)")
    return 0 if err < 1e-2 and not nan else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compile", action="store_true", help="lower + nvcc for sm_90a (CPU)")
    mode.add_argument("--check", action="store_true", help="run on the GPU vs torch, time it")
    ap.add_argument("--gated", action="store_true", help="w1/w3 gated projection (default down)")
    ap.add_argument("--natural-k", action="store_true", help="no K permutation")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--bn", type=int, default=64, help="weight rows per program")
    ap.add_argument("--bk", type=int, default=256)
    ap.add_argument("--bm", type=int, default=16, help="pair rows per block")
    ap.add_argument("--threads", type=int, default=128)
    ap.add_argument("--no-ws", action="store_true",
                    help="tl.disable_warp_specialized: one warpgroup, cp.async pipeline")
    ap.add_argument("--keep", default=None, help="directory to keep the .cu / .cubin / .sass")
    args = ap.parse_args()
    return compile_report(args) if args.compile else check(args)


if __name__ == "__main__":
    sys.exit(main())
