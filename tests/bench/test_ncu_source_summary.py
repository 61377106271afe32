"""bench/ncu_source_summary.py on a small export in ncu's --page source --csv shape."""

from __future__ import annotations

import lzma
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import ncu_source_summary as nss  # noqa: E402

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
          '"stall_barrier","stall_wait","stall_selected","stall_barrier (Not Issued)"')
ROWS = [
    # a loop body of two instructions (100 executions each), a wait loop, an idle warp's release
    '"0x10","LOP3.LUT R1, R2, 0xff, RZ, 0xc0, !PT","30","100","0","10","20","0"',
    '"0x20","@!P0 HGMMA.64x64x16.F32.BF16 R24, R56, gdesc[UR4], R24","10","100","5","0","5","9"',
    '"0x30","@!P1 BRA 0x40","40","7","0","40","0","0"',
    '"0x40","USETMAXREG.DEALLOC.CTAPOOL 0x18","20","3","20","0","0","0"',
]


def _export(tmp_path: Path, xz: bool) -> Path:
    text = "==PROF== Connected\nran once\n" + "\n".join([HEADER, *ROWS]) + "\n"
    path = tmp_path / ("src.csv.xz" if xz else "src.csv")
    if xz:
        with lzma.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("xz", [False, True])
def test_groups_by_execution_count_and_opcode(tmp_path, xz):
    res = nss.summarize(nss.read_rows(_export(tmp_path, xz)))
    assert res["total"] == 100
    execs = [(g[0], g[1], round(g[2], 3)) for g in res["groups"]]
    assert execs == [(100, 2, 0.4), (7, 1, 0.4), (3, 1, 0.2)]
    loop_mix = res["groups"][0][3]  # within the loop: its 40 samples
    assert loop_mix == {"selected": 25 / 40, "wait": 10 / 40, "barrier": 5 / 40}
    assert "barrier (Not Issued)" not in loop_mix  # the not-issued columns stay out
    ops = {op: (n, round(share, 3)) for op, n, share, _ in res["opcodes"]}
    assert ops == {"LOP3": (1, 0.75), "HGMMA": (1, 0.25)}  # predicated: the opcode after @P


def test_a_file_without_the_source_header_is_named(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text('"ID","Kernel Name"\n"0","k"\n')
    with pytest.raises(SystemExit, match="other.csv"):
        nss.read_rows(path)
