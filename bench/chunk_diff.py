"""Where two prefill chunkings of one prompt first differ: per layer, the attention's input rows,
its top-k selection, its output and the FFN's output, recorded by hooks during a prefill at each
chunk size (one loaded model, an engine per chunk size), then compared row by row in forward
order. A diagnosis tool for ``bench/chunk_check.py``'s divergences (round 121a: one of three 8K
prompts flipped its first token in one 8K chunk against two 4K ones; the others bit-identical).

    TRITON_INTERPRET=0 python bench/chunk_diff.py [--prompt-len 8192] [--seed 52]
        [--chunks 4096,8192]

CPU: the tiny plan at ``--prompt-len 96 --chunks 32,96``. Prints one table row per layer and
record: the rows that differ, the first of them, the largest |difference|; for a selection,
the rows whose picked entries differ. ``--coeffs-split N`` fixes the mHC coefficients' K
partitions (by default they follow the step's size: a candidate source of differences).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
from chunk_check import chunk_plan, parse_chunks  # noqa: E402
from prefill import make_prompt  # noqa: E402

KINDS = ("attn_in", "q", "kv", "selection", "attn_out", "ffn_out")


def record(llm, chunk: int, prompt: list[int]) -> dict[tuple[int, str], torch.Tensor]:
    """The prompt prefilled in chunks of ``chunk`` tokens; per (layer, kind) its rows in
    prompt order (on the host)."""
    from deepinfer.kernels import formats
    from deepinfer.runtime.engine import Engine
    from deepinfer.runtime.model.attention import Attention
    from deepinfer.runtime.sampling_params import SamplingParams

    model = llm.loaded.model
    rec: dict[tuple[int, str], list[torch.Tensor]] = {}

    def keep(layer: int, kind: str, t: torch.Tensor) -> None:
        # a copy on the device (no host sync inside the forward), to the host after it
        rec.setdefault((layer, kind), []).append(t.detach().clone())

    def attn_hook(i: int):
        def hook(module, args, out) -> None:  # None: the output stays as it is
            keep(i, "attn_in", args[1])
            keep(i, "attn_out", out)
        return hook

    def ffn_hook(i: int):
        def hook(module, args, out) -> None:
            keep(i, "ffn_out", out)
        return hook

    handles = []
    for i, block in enumerate(model.layers):
        handles.append(block.attn.register_forward_hook(attn_hook(i)))
        handles.append(block.ffn.register_forward_hook(ffn_hook(i)))
    real_selection = Attention._selection

    def selection(self, k, b, rows, *rest):
        sel = real_selection(self, k, b, rows, *rest)  # (S, picks), picks <= index_topk
        keep(self.layer.layer_id, "selection",
             torch.nn.functional.pad(sel, (0, self.spec.index_topk - sel.shape[1]), value=-1))
        return sel

    real_prefill_attention = Attention._prefill_attention

    def per_sequence(self, k, q, records, *rest):  # the attention op's query and key rows
        keep(self.layer.layer_id, "q", q)
        keep(self.layer.layer_id, "kv", formats.unpack_window_kv(records, self.head_dim,
                                                                torch.bfloat16))
        return real_prefill_attention(self, k, q, records, *rest)

    Attention._selection = selection
    Attention._prefill_attention = per_sequence
    base = llm.engine
    llm.engine = Engine(chunk_plan(llm.plan, chunk), llm.loaded, cuda_graphs=False)
    try:
        llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
    finally:
        Attention._selection = real_selection
        Attention._prefill_attention = real_prefill_attention
        for h in handles:
            h.remove()
        llm.engine.worker.close()
        llm.engine = base
    return {key: torch.cat(parts).cpu() for key, parts in rec.items()}


def compare(a: dict, b: dict) -> list[dict]:
    """Per (layer, kind) in forward order: rows that differ, the first, the largest |diff|."""
    rows = []
    for layer in sorted({key[0] for key in a}):
        for kind in KINDS:
            x, y = a.get((layer, kind)), b.get((layer, kind))
            if x is None or y is None:
                continue
            if x.shape != y.shape:
                rows.append({"layer": layer, "kind": kind, "shape": [list(x.shape),
                                                                     list(y.shape)]})
                continue
            if kind == "selection":  # the picked entries as sets per row
                diff = (x.sort(dim=1).values != y.sort(dim=1).values).any(dim=1)
                big = float(diff.sum())
            else:
                d = (x.float() - y.float()).abs().reshape(x.shape[0], -1)
                diff, big = d.amax(dim=1) > 0, float(d.max())
            idx = diff.nonzero().flatten()
            rows.append({"layer": layer, "kind": kind, "rows_differing": int(idx.numel()),
                         "first_row": int(idx[0]) if idx.numel() else None, "max_diff": big})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt-len", type=int, default=None, help="default 8192 (CPU: 96)")
    ap.add_argument("--seed", type=int, default=52, help="make_prompt's seed (chunk_check's "
                    "prompt i has seed 50 + i)")
    ap.add_argument("--chunks", default=None, help="two sizes; default 4096,8192 (CPU: 32,96)")
    ap.add_argument("--topology", default=None)
    ap.add_argument("--coeffs-split", type=int, default=None,
                    help="the mHC coefficients' K partitions fixed at this many whatever the "
                         "step's size (mhc.coeffs_split; default: by size, as the engine runs)")
    args = ap.parse_args()
    if args.coeffs_split is not None:
        from deepinfer.kernels.triton import mhc

        mhc.coeffs_split = lambda num_tokens, num_k, cfg: args.coeffs_split
    cpu = not torch.cuda.is_available()
    length = args.prompt_len or (96 if cpu else 8192)
    chunks = parse_chunks(args.chunks or ("32,96" if cpu else "4096,8192"), ap, count=2)
    if length < 1:
        ap.error(f"--prompt-len: expected at least 1, got {length}")
    from deepinfer.runtime import LLM

    topology = bc.default_topology(args.topology)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        plan_dir = bc.make_plan_dir(Path(tmp), topology, lambda c: 2 * length // c[
            "scheduler"]["block_size_tokens"] + 64)
        llm = LLM(plan_dir, cuda_graphs=False)
        prompt = make_prompt(length, llm.loaded.spec.vocab_size, args.seed)
        a, b = (record(llm, c, prompt) for c in chunks)
        llm.engine.worker.close()
    print(f"\n## prefill chunks {chunks[0]} vs {chunks[1]}: {length}-token prompt (seed "
          f"{args.seed}), commit {bc.git_commit()[:10]}\n")
    print("| layer | record | rows differing | first row | max |diff| (selection: rows) |")
    print("|---:|---|---:|---:|---:|")
    for r in compare(a, b):
        if "shape" in r:
            print(f"| {r['layer']} | {r['kind']} | shapes {r['shape']} | | |")
        else:
            print(f"| {r['layer']} | {r['kind']} | {r['rows_differing']} | "
                  f"{'' if r['first_row'] is None else r['first_row']} | {r['max_diff']:.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
