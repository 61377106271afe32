"""The kernel benches' CPU smoke modes (interpreter: every variant runs and, where the bench
checks it, matches the torch reference) and the round scripts' winner picker."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from pick_fastest import fastest  # noqa: E402


def _smoke(*args: str) -> str:
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(BENCH / args[0]), "--smoke", *args[1:]],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_index_prefill_smoke_matches_reference_in_every_variant():
    out = _smoke("index_prefill.py")
    lines = [ln for ln in out.splitlines() if "max abs err vs reference" in ln]
    assert len(lines) == len(__import__("index_prefill").DEFAULT_VARIANTS.split(","))


def test_attention_prefill_smoke_variants_agree():
    out = _smoke("attention_prefill.py", "--variants",
                 "float:h:32:64:1:2,float:i:16:64:2:2,records:i:32:64:2:2")
    lines = [ln for ln in out.splitlines() if ln.startswith(("float:", "records:"))]
    assert len(lines) == 3 and all("finite True" in ln for ln in lines), out
    diffs = [float(ln.rsplit(" ", 1)[1]) for ln in lines]
    assert max(diffs) < 1e-4, out  # a tiling or layout change reorders fp32 sums only


def test_attention_decode_smoke_variants_agree():
    """Decode tilings (rows per chunk, output split, warps) give the same output up to fp32
    sum order."""
    out = _smoke("attention_decode.py", "--variants", "16:64:2:2:8,16:64:2:2:4,32:64:1:2:4")
    lines = [ln for ln in out.splitlines() if "max abs diff vs first" in ln]
    assert len(lines) == 3 and all("finite True" in ln for ln in lines), out
    assert max(float(ln.rsplit(" ", 1)[1]) for ln in lines) < 1e-4, out


def test_mhc_prefill_smoke_matches_reference():
    out = _smoke("mhc_prefill.py")
    assert out.count("max abs err vs reference") == len(
        __import__("mhc_prefill").DEFAULT_VARIANTS.split(","))


def test_moe_decode_smoke_matches_reference():
    assert "smoke ok" in _smoke("moe_decode.py")


def test_gemm_decode_smoke_variants_agree():
    """Every FP8 projection tiling (BM=16/64, BN=32-128, split-K, the bf16 path) runs and agrees
    with the default up to fp32 sum order."""
    out = _smoke("gemm_decode.py")
    rows = [ln for ln in out.splitlines() if ln.startswith("| small |")]
    assert len(rows) == len(__import__("gemm_decode").DEFAULT_VARIANTS.split(",")), out
    assert "failed" not in out, out
    assert max(float(ln.strip(" |").rsplit("|", 1)[1]) for ln in rows) < 1e-5, out


def test_gemm_head_smoke_matches_reference():
    """The logit head's paths and tilings (bf16 x or its fp32 copy, fp32 out) == x @ w^T."""
    out = _smoke("gemm_head.py")
    assert out.count("smoke ") == 4, out


def test_index_decode_smoke_matches_reference():
    """Paged index scores: every default v2 variant == the reference (fp32 sum order)."""
    out = _smoke("index_decode.py")
    lines = [ln for ln in out.splitlines() if "max abs err vs reference" in ln]
    assert "smoke ok" in out and len(lines) == 2 * len(
        __import__("index_decode").DEFAULT_VARIANTS.split(",")), out


def test_topk_decode_smoke_matches_reference():
    """Stage path and radix variants (several tiles per row, one tile; 8- and 4-bit digits)."""
    out = _smoke("topk_decode.py")
    assert "smoke ok" in out and "equal False" not in out, out


@pytest.mark.parametrize("prefix,want", [("float:", "float:h:32:64:1:2"), ("", "records:i")])
def test_pick_fastest(prefix, want):
    table = ["| variant | ms |", "|---|---:|", "| float:i:64:64:2:2 | 23.6 |",
             "| float:h:32:64:1:2 | 2.18 |", "| float:h:16:64:2:2 | failed: OutOfResources |",
             "| records:i | 1.5 |", "| 64 | mxfp4 bf16 | 3.9 |"]
    assert fastest(table, prefix) == want
    assert fastest(["no table"], "") is None


def test_kernel_overrides_set_each_class_and_leave_the_rest(monkeypatch):
    import kernel_overrides

    from deepinfer.kernels.triton import attention, moe_experts

    for name in ("moe_config",):
        monkeypatch.setattr(moe_experts, name, getattr(moe_experts, name))
    for name in ("FLOAT_HALVES", "PREFILL_BLOCK_ROWS", "PREFILL_BLOCK_HEADS", "PREFILL_DV_SPLIT",
                 "PREFILL_NUM_STAGES"):
        monkeypatch.setattr(attention, name, getattr(attention, name))
    kernel_overrides.apply("i:16:32:2:1", ["16x32x128:1:4:6:0:2", "64x128x64:1:8:3"])
    assert (attention.FLOAT_HALVES, attention.PREFILL_BLOCK_ROWS, attention.PREFILL_BLOCK_HEADS,
            attention.PREFILL_DV_SPLIT, attention.PREFILL_NUM_STAGES) == (False, 16, 32, 2, 1)
    decode = moe_experts.moe_config(64 * 6, 384)
    assert (decode["BN"], decode["BK"], decode["A_BF16"], decode["W_ONE_MUL"],
            decode["num_stages"]) == (32, 128, False, 2, 6)
    prefill = moe_experts.moe_config(4096 * 6, 384)
    assert (prefill["BM"], prefill["BN"], prefill["BK"], prefill["A_BF16"]) == \
        (64, 128, 64, False)
    fp8 = moe_experts.moe_config(64 * 6, 384, fp8_weights=True)  # not the MXFP4 kernel
    assert not fp8["SPLIT_K"] and fp8["BK"] == 128 and fp8["num_stages"] == 4


def test_kernel_overrides_decode_attention(monkeypatch):
    import kernel_overrides

    from deepinfer.kernels.triton import attention

    for name in ("BLOCK_ROWS", "BLOCK_HEADS", "DV_SPLIT", "NUM_STAGES", "NUM_WARPS",
                 "PREFILL_BLOCK_ROWS", "DECODE_KERNEL"):
        monkeypatch.setattr(attention, name, getattr(attention, name))
    prefill_rows = attention.PREFILL_BLOCK_ROWS
    kernel_overrides.apply("decode:32:32:4:3:4", [])
    assert (attention.BLOCK_ROWS, attention.BLOCK_HEADS, attention.DV_SPLIT, attention.NUM_STAGES,
            attention.NUM_WARPS, attention.DECODE_KERNEL) == (32, 32, 4, 3, 4, "v1")
    assert attention.PREFILL_BLOCK_ROWS == prefill_rows
    assert attention.launch_meta(512, 64, 1, 2, True)["DJ"] == 512 // 2 // 4


@pytest.mark.parametrize("attention,moe", [("x:1:2", []), (None, ["16x64:1:4"]),
                                           (None, ["16x64x256:1:4:4:0:1:2"]),  # swap: removed
                                           ("decode:16:64:2", []),
                                           ("decode:16:64:2:2:8:4", []),  # SPLITS: removed
                                           ("decode:v2:64:64:8:1:2", [])])
def test_kernel_overrides_reject_malformed_values_by_flag(attention, moe):
    import kernel_overrides

    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(attention, moe)
    assert ("--attention-config" if attention else "--moe-config") in str(info.value)


def test_moe_sass_counts_the_k_loop_of_the_sm90_cubin():
    """bench/moe_sass.py compiles the decode expert kernel for sm_90 on the CPU and finds its K
    loop: one MMA per 16 K of each weight tile and one bf16x2 multiply per weight pair there."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(BENCH / "moe_sass.py"), "W_ONE_MUL=2",
                           "maxnreg=168"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    mix = dict(item.rsplit(" ", 1) for item in
               done.stdout.split("instructions; ", 1)[1].strip().split(", "))
    # gated 16x64x256 tile, 4 warps: per warp 2 matrices x (16 rows x 16 cols) x 256 K
    assert int(mix["HMMA.16816"]) == 2 * 2 * (256 // 16)
    # 2 x 64 x 256 weights over 128 threads, one multiply per pair: 128 per thread
    assert int(mix["HMUL2.BF16_V2"]) == 2 * 64 * 256 // 128 // 2


def test_attention_sass_finds_the_row_chunk_loop():
    """bench/attention_sass.py compiles the decode attention for sm_90 on the CPU and finds its
    row-chunk loop: 64 heads x 16 rows x 512 channels of QK and the P.V of its output share run
    on wgmma (HGMMA) there."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(BENCH / "attention_sass.py")], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    mix = dict(item.rsplit(" ", 1) for item in
               done.stdout.split("instructions; ", 1)[1].strip().split(", "))
    assert int(mix["HGMMA.64"]) > 0


def test_gluon_sass_finds_the_k_loops_wgmmas_and_their_wait():
    """bench/gluon_sass.py compiles the bf16 prefill expert GEMM (parts 4: four K loops, N =
    BM / 4, BM / 2, BM, and BM / 2 + BM / 4 on two accumulators) for sm_90 on the CPU and finds
    each K loop: 8 HGMMA (k16) per 128-K step and accumulator, a wait per 32-K group (the loop
    is pipelined per group), and every instruction of the loop counted once."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(BENCH / "gluon_sass.py"),
                           "deepinfer.kernels.triton.moe_gluon_w4a16_prefill",
                           "w4a16_prefill_bm128_s2_one_wg2_parts4"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [[int(c) for c in line.split("|")[2:8]] for line in done.stdout.splitlines()
            if line.startswith("| w4a16_prefill")]
    assert sorted(r[2] for r in rows) == [8, 8, 8, 16], rows
    for _, instructions, hgmma, waits, overlapped, rest in rows:
        assert waits == 4 and hgmma + waits + overlapped + rest == instructions


def test_gluon_sass_loops_on_a_synthetic_listing():
    """gluon_sass.wgmma_loops on a hand-written listing: the loop's counts (one instruction
    between the HGMMAs and their wait), and a retry stub after EXIT that branches back into
    the loop is not taken for a loop."""
    import gluon_sass

    listing = "\n".join([
        ".L_x_1:",
        "        /*0000*/                   LDS.128 R8, [R2] ;",
        "        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, R56, gdesc[UR4], R24 ;",
        "        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, R60, gdesc[UR4], R24 ;",
        ".L_x_2:",
        "        /*0030*/                   LOP3.LUT R9, R8, 0xff, RZ, 0xc0, !PT ;",
        "        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
        "        /*0050*/                   HMUL2.BF16_V2 R9, R9, R10 ;",
        "        /*0060*/                   IADD3 R2, R2, 0x10, RZ ;",
        "        /*0070*/               @P0 BRA `(.L_x_1) ;",
        "        /*0080*/                   EXIT ;",
        "        /*0090*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3], RZ ;",
        "        /*00a0*/              @!P0 BRA `(.L_x_2) ;",
    ])
    assert gluon_sass.wgmma_loops(listing) == [
        {"instructions": 8, "hgmma": 2, "waits": 1, "overlapped": 1, "not_overlapped": 4}]


def test_kernel_overrides_w4a8_decode_variant(monkeypatch):
    """--w4a8-decode-variant sets the W4A8 decode GEMM's register caps of the gated and the
    paired down launch; a malformed value (the old PREFETCH:...:XCP:PAIRED form included)
    exits naming the flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import moe_gluon_w4a8

    monkeypatch.setattr(moe_gluon_w4a8, "register_cap", moe_gluon_w4a8.register_cap)
    assert moe_gluon_w4a8.register_cap(False, 8) == moe_gluon_w4a8.register_cap(True, 8) == 128
    assert moe_gluon_w4a8.register_cap(True, 16) is None
    kernel_overrides.apply(None, [], w4a8_decode_variant="-:96")
    assert moe_gluon_w4a8.register_cap(False, 8) is None
    assert moe_gluon_w4a8.register_cap(True, 16) == 96
    kernel_overrides.apply(None, [], w4a8_decode_variant="128:-")
    assert moe_gluon_w4a8.register_cap(False, 16) == 128
    assert moe_gluon_w4a8.register_cap(True, 8) is None
    for bad in ("1:128:80", "1:128:80:1:0", "128", "x:80", "128:80:"):
        with pytest.raises(SystemExit) as info:
            kernel_overrides.apply(None, [], w4a8_decode_variant=bad)
        assert "--w4a8-decode-variant" in str(info.value)


def test_kernel_overrides_route_decode_max_tokens(monkeypatch):
    """--route-decode-max-tokens moves the router's decode-tile bound (64: the tiling before
    session 22); below 64 exits naming the flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import moe_routing

    monkeypatch.setattr(moe_routing, "ROUTE_DECODE_MAX_TOKENS",
                        moe_routing.ROUTE_DECODE_MAX_TOKENS)
    assert moe_routing.route_config(256, 384)["BM"] == 16
    kernel_overrides.apply(None, [], route_decode_max_tokens=64)
    assert moe_routing.route_config(256, 384)["BM"] == 64
    assert moe_routing.route_config(64, 384)["BM"] == 16
    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(None, [], route_decode_max_tokens=8)
    assert "--route-decode-max-tokens" in str(info.value)


def test_kernel_overrides_w4a16_prefill_parts(monkeypatch):
    """--w4a16-prefill-parts sets the bf16 prefill expert GEMM's block split, which its
    launchers read at the call; another value exits naming the flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    monkeypatch.setattr(pf, "PARTS", pf.PARTS)
    kernel_overrides.apply(None, [], w4a16_prefill_parts=4)
    assert pf.PARTS == 4
    kernel_overrides.apply(None, [], w4a16_prefill_parts=1)
    assert pf.PARTS == 1
    kernel_overrides.apply(None, [], w4a16_prefill_parts=8)  # eighths (session 34)
    assert pf.PARTS == 8
    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(None, [], w4a16_prefill_parts=3)
    assert "--w4a16-prefill-parts" in str(info.value)


def test_kernel_overrides_index_paged_kernel(monkeypatch):
    """--index-paged-kernel sets the paged index kernel; a malformed value exits naming the
    flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import indexer

    monkeypatch.setattr(indexer, "PAGED_KERNEL", indexer.PAGED_KERNEL)
    kernel_overrides.apply(None, [], index_paged_kernel="v2")
    assert indexer.PAGED_KERNEL == "v2"
    kernel_overrides.apply(None, [], index_paged_kernel="gl")
    assert indexer.PAGED_KERNEL == "gl"
    for bad in ("v1", "v4", "v2:3", "v3", "v3:4"):
        with pytest.raises(SystemExit) as info:
            kernel_overrides.apply(None, [], index_paged_kernel=bad)
        assert "--index-paged-kernel" in str(info.value)


def test_host_syncs_counts_sync_warnings_by_site():
    """host_syncs.collect: each "synchronizing" warning counted at its call site under the
    root (innermost first), other warnings passed on, the call's result returned."""
    import traceback
    import warnings

    import host_syncs

    def sync_op():
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)

    def run():
        for _ in range(3):
            sync_op()
        warnings.warn("something else", UserWarning, stacklevel=1)
        return 7

    with warnings.catch_warnings(record=True) as others:
        result, sites = host_syncs.collect(run, Path(__file__).parent)
    assert result == 7
    assert len(sites) == 1 and sites[0]["count"] == 3, sites
    assert sites[0]["site"].startswith("test_bench_smokes.py:")
    assert " sync_op <- test_bench_smokes.py:" in sites[0]["site"]
    assert sites[0]["site"].endswith(" run")
    assert [str(w.message) for w in others] == ["something else"]
    assert host_syncs.site_of([], Path(__file__).parent) == "(outside bench) "
    frame = traceback.FrameSummary("/elsewhere/lib.py", 12, "f")
    assert host_syncs.site_of([frame], Path(__file__).parent) == \
        "(outside bench) /elsewhere/lib.py:12 f"


def test_idle_by_next_charges_gaps_to_the_activity_after_them():
    """bench_common.idle_by_next: idle stretches between GPU activities (overlaps merged),
    summed by the activity that ended them, the largest one placed (its end after the first
    activity's start, and what ran before it); nothing before the first one."""
    import bench_common as bc

    ivs = [(5.0, 10.0, "a"), (8.0, 12.0, "b"), (15.0, 20.0, "c"), (20.0, 21.0, "a"),
           (30.0, 31.0, "c"), (31.5, 32.0, "a")]
    rows = bc.idle_by_next(ivs)
    assert rows == [{"name": "c", "gaps": 2, "total_us": 12.0, "max_us": 9.0,
                     "max_at_ms": round(25.0 / 1e3, 2), "max_after": "a"},
                    {"name": "a", "gaps": 1, "total_us": 0.5, "max_us": 0.5,
                     "max_at_ms": round(26.5 / 1e3, 2), "max_after": "c"}]
    assert bc.idle_by_next([]) == [] and bc.idle_by_next(ivs, top=1)[0]["name"] == "c"


def test_idle_windows_splits_gaps_by_when_they_ended():
    """bench_common.idle_windows: the gaps between GPU activities (overlaps merged) in windows
    of their end time after the first activity's start; counts, sums, nearest-rank median and
    p90, gaps over 20 µs; an empty window reads zeros."""
    import bench_common as bc

    ivs = [(0.0, 10.0, "a"), (8.0, 15.0, "b"), (20.0, 30.0, "c"), (30.5, 31.0, "a"),
           (12_000.0, 12_001.0, "a"), (12_031.0, 12_040.0, "c")]
    lo, mid, hi = bc.idle_windows(ivs, (10.0, 20.0))
    assert lo == {"from_ms": 0.0, "to_ms": 10.0, "gaps": 2, "total_us": 5.5, "median_us": 0.5,
                  "p90_us": 5.0, "over_20us": 0}
    assert (mid["gaps"], mid["total_us"], mid["median_us"], mid["over_20us"]) == \
        (2, 11_999.0, 30.0, 2)
    assert hi == {"from_ms": 20.0, "to_ms": float("inf"), "gaps": 0, "total_us": 0,
                  "median_us": 0.0, "p90_us": 0.0, "over_20us": 0}


def test_kernel_overrides_w4a16_rep_max_pairs(monkeypatch):
    """--w4a16-rep-max-pairs moves the pairs-per-expert bound of the prefill expert GEMM's
    two-A-fragment programs (0: off); a negative value exits naming the flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    monkeypatch.setattr(pf, "REP_MAX_PAIRS_PER_EXPERT", pf.REP_MAX_PAIRS_PER_EXPERT)
    kernel_overrides.apply(None, [], w4a16_rep_max_pairs=0)
    assert pf.REP_MAX_PAIRS_PER_EXPERT == 0
    assert pf.program_shape([2304, 5120], 64.0, 2) == (2, 1)
    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(None, [], w4a16_rep_max_pairs=-1)
    assert "--w4a16-rep-max-pairs" in str(info.value)


def test_kernel_overrides_w4a16_kernel(monkeypatch):
    """--w4a16-kernel picks the prefill expert GEMM's kernel (base or ws); anything else exits
    naming the flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    monkeypatch.setattr(pf, "KERNEL", pf.KERNEL)
    kernel_overrides.apply(None, [], w4a16_kernel="ws")
    assert pf.KERNEL == "ws"
    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(None, [], w4a16_kernel="fast")
    assert "--w4a16-kernel" in str(info.value)


def test_moe_align_smoke_paths_equal_torch():
    """Both align paths (one program; chunks above MAX_PAIRS) equal the torch version."""
    out = _smoke("moe_align.py")
    assert out.count("equal True") == 2, out


def test_kernel_overrides_fused_swiglu_switch(monkeypatch):
    """--w4a16-fused-swiglu 0|1 sets the prefill pipeline's FUSED_SWIGLU (on by default); a bad
    value exits naming the flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    assert pf.FUSED_SWIGLU is True
    monkeypatch.setattr(pf, "FUSED_SWIGLU", pf.FUSED_SWIGLU)
    kernel_overrides.apply(None, [], w4a16_fused_swiglu=0)
    assert pf.FUSED_SWIGLU is False
    kernel_overrides.apply(None, [], w4a16_fused_swiglu=1)
    assert pf.FUSED_SWIGLU is True
    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(None, [], w4a16_fused_swiglu=2)
    assert "--w4a16-fused-swiglu" in str(info.value)


def test_kernel_overrides_linear_wide_mma_first(monkeypatch):
    """--linear-wide-mma-first 0|1 sets linear_wide.MMA_FIRST, which ``wide_config`` reads for
    its two-warpgroup launches only; --linear-wide-two-wg-rows N (0: off) the rows from which
    fewer programs take two warpgroups; a bad value exits naming the flag."""
    import kernel_overrides

    from deepinfer.kernels.triton import linear_wide

    monkeypatch.setattr(linear_wide, "MMA_FIRST", linear_wide.MMA_FIRST)
    kernel_overrides.apply(None, [], linear_wide_mma_first=0)
    assert linear_wide.wide_config(4096, 5120) == dict(WG=2, BT=256, BK=64, STAGES=4, waves=1,
                                                       MMA_FIRST=False)
    kernel_overrides.apply(None, [], linear_wide_mma_first=1)
    assert linear_wide.wide_config(4096, 5120)["MMA_FIRST"] is True
    assert linear_wide.wide_config(4096, 512)["MMA_FIRST"] is False  # one warpgroup
    assert linear_wide.wide_config(64, 5120)["MMA_FIRST"] is False
    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(None, [], linear_wide_mma_first=2)
    assert "--linear-wide-mma-first" in str(info.value)
    monkeypatch.setattr(linear_wide, "WIDE_TWO_WG_ROWS", linear_wide.WIDE_TWO_WG_ROWS)
    kernel_overrides.apply(None, [], linear_wide_two_wg_rows=0)  # the four waves everywhere
    assert linear_wide.WIDE_TWO_WG_ROWS is None and linear_wide.wide_config(4096, 1024)["WG"] == 1
    kernel_overrides.apply(None, [], linear_wide_two_wg_rows=4096)
    assert linear_wide.wide_config(4096, 1024)["WG"] == 2
    with pytest.raises(SystemExit) as info:
        kernel_overrides.apply(None, [], linear_wide_two_wg_rows=-1)
    assert "--linear-wide-two-wg-rows" in str(info.value)


def test_gemm_decode_linear_wide_variants():
    """gemm_decode.py's ``gl:WG:BT[:BK]:STAGES:wN[:first]`` (BK 32 when left out, the TMA
    refill before the wgmmas by default) and ``glf`` / ``gl0``; the 16-byte-store, persistent,
    two-fragment and warp-specialized variants went with their code (sessions 35 / 36 / 42):
    naming one exits with the variant grammar."""
    import gemm_decode

    assert gemm_decode.parse_variant("gl:2:256:64:4:w1") == dict(
        gl=True, WG=2, BT=256, BK=64, STAGES=4, waves=1.0, MMA_FIRST=False)
    assert gemm_decode.parse_variant("gl:1:256:3:w2:first") == dict(
        gl=True, WG=1, BT=256, BK=32, STAGES=3, waves=2.0, MMA_FIRST=True)
    assert gemm_decode.parse_variant("glf") == dict(gl=True, MMA_FIRST=True)
    assert gemm_decode.parse_variant("gl0") == dict(gl=True, MMA_FIRST=False)
    for gone in ("glv", "glp", "glps", "glp:2:256:64:4:w1", "gl:2:128:64:4:w1:r2",
                 "glws:128:64:4:w1"):
        with pytest.raises(SystemExit):
            gemm_decode.parse_variant(gone)




def test_rest_kernels_smoke_variants_give_the_defaults_bits():
    """bench/rest_kernels.py under the interpreter: every launch config of the gather, the
    combine and the norm's apply runs and gives its default's bits (max diff 0 in each row)."""
    out = _smoke("rest_kernels.py", "--kernels", "gather", "combine", "rms_apply")
    rows = [line.split("|") for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| kernel")]
    assert len(rows) == 19 and "failed" not in out, out
    assert all(row[-2].strip() == "0" for row in rows), out


def test_rest_kernels_pick_turns_a_sweep_into_launch_constants(tmp_path):
    """``--pick``: each kernel's fastest variant as --launch-constant flags when it beats the
    default by the margin, else the defaults' values; failed rows and hc_coeffs are skipped."""
    import rest_kernels

    log = tmp_path / "sweep.log"
    log.write_text("| kernel | variant | µs | MB | GB/s | of copy | max diff vs default |\n"
                   "| expand_norm | default | 150.0 | 1 | 1 | 1 | 0 |\n"
                   "| expand_norm | 1024:4 | 120.0 | 1 | 1 | 1 | 0 |\n"
                   "| combine | default | 90.0 | 1 | 1 | 1 | 0 |\n"
                   "| combine | 512:4 | 89.0 | 1 | 1 | 1 | 0 |\n"
                   "| swiglu | 8:256:4 | failed: CompilationError |\n"
                   "| coeffs | default | 80.0 | 1 | 1 | 1 | 0 |\n")
    flags = rest_kernels.pick(str(log), 0.03, False).split(" --launch-constant ")
    assert flags[0] == "--launch-constant mhc_norm.BLOCK_D=1024"
    assert flags[1:] == ["mhc_norm.NUM_WARPS=4", "moe_experts.COMBINE_BLOCK_D=1024",
                         "moe_experts.COMBINE_WARPS=8"]  # 512:4 is within the 3 % margin
    defaults = rest_kernels.pick(str(log), 0.03, True)
    assert "mhc_norm.BLOCK_D=512" in defaults and "COMBINE_WARPS=8" in defaults


def test_route_compress_smoke_matches_reference():
    """bench/route_compress.py: every router and compressor variant runs on the interpreter and
    matches the torch reference (routing weights and ids exactly up to fp32 sums; the
    projection against fp64)."""
    out = _smoke("route_compress.py")
    rows = [ln for ln in out.splitlines() if "max abs err vs reference" in ln]
    assert len(rows) == len(__import__("route_compress").DEFAULT_VARIANTS.split(",")), out
    assert all(float(ln.rsplit(" ", 2)[1]) < 1e-5 for ln in rows), out


def test_route_compress_pick_takes_the_fastest_with_the_defaults_bits(tmp_path):
    """``--pick``: a faster variant with other bits is skipped, one within the margin too; a
    kind without a faster variant keeps the defaults' values."""
    rc = __import__("route_compress")
    log = tmp_path / "sweep.log"
    log.write_text("| route:default | 54.0 | 300 | 0.40 | — |\n"
                   "| route:64:128:64:4:4 | 40.0 | 400 | 0.53 | True |\n"
                   "| route:128:128:64:8:3 | 30.0 | 500 | 0.66 | False |\n"
                   "| compress:default | 86.0 | 250 | 0.33 | — |\n"
                   "| compress:64:128:4:4 | 85.0 | 252 | 0.33 | True |\n")
    flags = rc.pick(str(log)).split()[1::2]
    assert flags[:5] == ["moe_routing.PREFILL_BM=64", "moe_routing.PREFILL_BE=128",
                         "moe_routing.PREFILL_BK=64", "moe_routing.PREFILL_WARPS=4",
                         "moe_routing.PREFILL_STAGES=4"]
    from deepinfer.kernels.triton import linear
    assert flags[5:] == [f"linear.{f}={getattr(linear, f)}" for f in rc.COMPRESS_FIELDS]


def test_pdl_probe_smoke_chain_matches_torch():
    """bench/pdl_probe.py: the probe's kernel chain (each launch reading the one before's
    output) equals the torch chain on the interpreter."""
    out = _smoke("pdl_probe.py")
    assert "equal the torch chain: True" in out, out
