"""One rank's model, with the weights the plan's shard map (``weight_shards``) gives it.

  Step 1  assignments (plan data only): which checkpoint tensor fills which parameter of this
          rank's model. ``rules`` classify every name of the tensor table (first ``fnmatch``
          match, as the planner recorded them): ``replicated`` by name; ``expert`` only through
          the rank's ``expert_slots`` ``[layer, slot, logical]`` — slot
          ``layers.L.ffn.experts.{slot - first slot}.*`` <- ``layers.L.ffn.experts.{logical}.*``
          (a logical expert may fill several slots; the slots are one MXFP4 stack per
          projection, ``runtime/model/expert_slots.py``); ``engram_rows`` when the rank's row
          range is the whole table (row-sharded engram is not supported yet: PlanError naming
          the field); ``skipped`` not at all.
  Step 2  coverage, before any tensor data is read: every parameter of the rank's model (built
          on the meta device, MoE reduced to the rank's slots) is assigned exactly once (a
          ``.scale`` travels with its weight), and every source tensor (with its ``.scale``) is
          in the checkpoint with the table's dtype and shape. All problems are reported together
          in one CheckpointError.
  Step 3  streamed onto the target device (``device``, default the plan's): read
          (checkpoint directory) or generate (``weights: synthetic``: each tensor from its own
          seeded generator, on the device, the same values as the full synthetic checkpoint on
          that kind of device) only those tensors, one weight (+ its scale) at a time, check
          each scale as it arrives, and put it in place as stored (FP8 codes + scales, MXFP4
          expert stacks; nothing is dequantized). A non-expert tensor made on the device becomes
          the parameter itself; the expert stacks are allocated on the device first and each
          expert's tensors are copied into their slots, then dropped. Reading takes one shard
          file at a time, in batches of at most ``READ_BATCH_BYTES`` (a larger unit alone),
          copied to the device before the next batch is read. The stacks hold MXFP4 word order
          where ``kernel_backends.expert_byte_order`` says so (the Triton expert kernels on an
          SM90+ GPU): each slot is re-arranged on the device as it is copied in.

Memory: the device ends up holding the rank's stored bytes once (plus, transiently, one expert's
tensors or one generation chunk); the host holds at most one read batch (synthetic weights on an
accelerator never touch the host). On a CUDA device the rank's bytes are checked against the
device's free memory before anything is allocated; synthetic weights on the host are capped at
``MAX_SYNTHETIC_BYTES`` (``weights/synthetic.py``).

A single-rank plan takes the same path with every slot. The MoE routes with the placement the
weights follow (``weight_shards.expert_phase``) in both phases: when the planner's decode
placement differs (it warns), decode still gives the right tokens, only not its planned balance.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.artifacts.weight_names import SCALE_KINDS, TensorSpec, expected_tensors
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.device import plan_device
from deepinfer.runtime.kernel_backends import expert_byte_order
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.model.expert_slots import ExpertSlots
from deepinfer.runtime.model.moe import TokenExchange
from deepinfer.runtime.model_loader import LoadedModel, build_model, engram_token_map
from deepinfer.runtime.plan_loader import RuntimePlan
from deepinfer.runtime.tokenizer import load_tokenizer
from deepinfer.runtime.weights import shards
from deepinfer.runtime.weights.dequant import check_scales
from deepinfer.runtime.weights.errors import CheckpointError
from deepinfer.runtime.weights.shards import INDEX_FILE, TORCH_TO_SAFETENSORS
from deepinfer.runtime.weights.synthetic import (
    check_synthetic_size,
    describe_spec,
    device_fit_problem,
    synthetic_tensors,
)

__all__ = ["RankShard", "load_rank_model", "rank_shard", "rank_bytes"]

REPLICATED, EXPERT, ENGRAM_ROWS, SKIPPED = "replicated", "expert", "engram_rows", "skipped"
_EXPERTS = ".ffn.experts."
READ_BATCH_BYTES = 512 << 20
"""Most bytes of checkpoint tensors read onto the host at once (a larger unit is read alone)."""
SCALE_CHECK_BATCH = 64
"""Scales whose NaN check is read back from an accelerator at once (one host sync per batch)."""


@dataclass(frozen=True)
class RankShard:
    """What one rank loads.

    Attributes:
        targets: model parameter name -> checkpoint base name (no ``.scale``), in table order.
        sources: every checkpoint tensor to read (weights and their scales), by name.
        slot_offset: physical slot id of ``experts[0]`` in every MoE layer.
        slot_logical: per backbone layer, the logical expert of each local slot.
    """

    targets: dict[str, str]
    sources: dict[str, TensorSpec]
    slot_offset: int
    slot_logical: list[list[int]]


def rank_shard(plan: RuntimePlan, rank: int) -> RankShard:
    """Step 1: the assignments of ``rank`` (PlanError naming the field on inconsistent data)."""
    spec, ws = plan.spec, plan.plan["weight_shards"]
    field = f"weight_shards.ranks[{rank}]"
    ranks = ws["ranks"]
    if not 0 <= rank < len(ranks) or ranks[rank]["rank"] != rank:
        raise PlanError(plan.source, "weight_shards.ranks", f"no entry for rank {rank}")
    entry = ranks[rank]
    if entry.get("dspark_expert_slots"):
        raise PlanError(plan.source, f"{field}.dspark_expert_slots",
                        "DSpark stages are not supported by the runtime yet; compile with "
                        "speculative.method: none")
    slot_offset, slot_logical = _slots(plan, entry, field)
    table = expected_tensors(spec, include_dspark=False)
    _check_whole_engram(plan, entry, field)  # so engram tables load like replicated ones
    targets: dict[str, str] = {}
    for name, t in table.items():
        if t.kind in SCALE_KINDS or not t.is_backbone:
            continue  # a scale travels with its weight
        if classify(name, ws["rules"]) in (REPLICATED, ENGRAM_ROWS):
            targets[name] = name
    for layer, logical in enumerate(slot_logical):
        for j, e in enumerate(logical):
            for w in ("w1", "w2", "w3"):
                targets[f"layers.{layer}.ffn.experts.{j}.{w}.weight"] = \
                    f"layers.{layer}.ffn.experts.{e}.{w}.weight"
    sources: dict[str, TensorSpec] = {}
    for src in targets.values():
        t = table[src]
        sources[src] = t
        if t.scale_name is not None:
            sources[t.scale_name] = table[t.scale_name]
    return RankShard(targets, sources, slot_offset, slot_logical)


def classify(name: str, rules: list[list[str]]) -> str:
    """The class of the first ``[pattern, class]`` rule matching ``name`` (``*`` matches dots)."""
    for pattern, cls in rules:
        if fnmatch.fnmatchcase(name, pattern):
            return cls
    raise PlanError("plan.json", "weight_shards.rules", f"no rule matches tensor {name}")


def _slots(plan: RuntimePlan, entry: dict[str, Any], field: str) -> tuple[int, list[list[int]]]:
    """(first physical slot, per layer the logical expert of each local slot), checked against
    ``expert_placement`` so that routing (log2phy) and the loaded weights agree."""
    ws = plan.plan["weight_shards"]
    k = int(ws["slots_per_rank"])
    offset = int(entry["ep_rank"]) * k
    phy2log = plan.plan["expert_placement"][ws["expert_phase"]]["phy2log"]
    num_layers = plan.spec.num_hidden_layers
    logical: list[list[int | None]] = [[None] * k for _ in range(num_layers)]
    for layer, slot, e in entry["expert_slots"]:
        j = slot - offset
        if not (0 <= layer < num_layers and 0 <= j < k):
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"[{layer}, {slot}, {e}] is outside layers [0, {num_layers}) or this "
                            f"rank's slots [{offset}, {offset + k})")
        if logical[layer][j] is not None:
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"layer {layer} slot {slot} is listed twice")
        if phy2log[layer][slot] != e:
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"layer {layer} slot {slot} holds expert {e}, but expert_placement."
                            f"{ws['expert_phase']}.phy2log says {phy2log[layer][slot]}")
        logical[layer][j] = e
    for layer, row in enumerate(logical):
        if None in row:
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"layer {layer}: slot {offset + row.index(None)} has no expert")
    return offset, [[int(e) for e in row] for row in logical]  # type: ignore[arg-type]


def _check_whole_engram(plan: RuntimePlan, entry: dict[str, Any], field: str) -> None:
    spec = plan.spec
    rows = dict(zip(spec.engram_layer_ids, spec.engram_num_embeddings, strict=True))
    for layer, begin, end in entry["engram_rows"]:
        if (begin, end) != (0, rows.get(layer)):
            raise PlanError(plan.source, f"{field}.engram_rows",
                            f"layer {layer}: rows [{begin}, {end}) of {rows.get(layer)}; "
                            "row-sharded engram tables are not supported by the runtime yet "
                            "(compile with parallel.engram: 1)")


# ---------------------------------------------------------------------------------------------
# Steps 2 and 3
# ---------------------------------------------------------------------------------------------


def load_rank_model(plan: RuntimePlan, rank: int, kernels: KernelSet | None = None,
                    exchange: TokenExchange | None = None, seed: int = 0,
                    device: torch.device | str | None = None) -> LoadedModel:
    """Spec, tokenizer and ``rank``'s model with its weights in place (module docstring).

    ``exchange``: the EP group's token exchange (None for an EP group of one rank).
    ``device``: where the weights are made (default the plan's, ``runtime/device.py``); the
    returned model lives there entirely (weights streamed there, buffers moved).
    Raises CheckpointError (every coverage problem, before any data is read), PlanError, or
    ValueError when the rank's weights do not fit (host cap for synthetic weights, free memory
    of a CUDA device), before anything is allocated.
    """
    device = plan_device(plan.device) if device is None else torch.device(device)
    model_path = plan.model_path
    spec = plan.spec
    tok = load_tokenizer(model_path)
    token_map = engram_token_map(spec, tok) if spec.engram_layer_ids else None
    shard = rank_shard(plan, rank)
    placement = plan.plan["expert_placement"][plan.plan["weight_shards"]["expert_phase"]]
    net = build_model(spec, kernels, token_map)
    byte_order = expert_byte_order(net.kernels, device,
                                   k_sizes=(spec.hidden_size, spec.moe_intermediate_size))
    for block in net.layers:
        layer = block.attn.layer.layer_id
        block.ffn.set_slots(shard.slot_offset, shard.slot_logical[layer],
                            placement["log2phy"][layer], placement["logcnt"][layer], exchange)
        block.ffn.experts.set_byte_order(byte_order)  # still on meta: the mode for the writes
    synthetic = plan.weights == "synthetic" or model_path.startswith("builtin:")
    problems = _model_coverage(net, shard)
    if not synthetic:
        problems += _checkpoint_coverage(Path(model_path), shard)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        where = "synthetic weights" if synthetic else f"checkpoint {model_path}"
        raise CheckpointError(f"{where} cannot fill rank {rank}'s model; {len(problems)} "
                              f"problem(s):\n{lines}", problems)
    what = f"rank {rank} of {model_path}, a {describe_spec(spec)}"
    _check_fits(rank_bytes(shard), device, what, synthetic)
    units = _units(shard)
    stream = (_synthetic(shard, units, seed, device) if synthetic
              else _read(Path(model_path), shard, units, device))
    placer = _Placer(net, shard, device)
    scales = _ScaleCheck(device, model_path)
    for src, stored in stream:
        scale_name = shard.sources[src].scale_name
        scales.add(stored, None if scale_name is None else shard.sources[scale_name])
        placer.place(src, units[src], stored)
        del stored  # the next unit is made only after this one's references are gone
    scales.flush()
    placer.finish()
    net.to_device(device)  # the non-persistent buffers and hash constants; weights are there
    if plan.prefill_bf16_weights and device.type == "cuda":  # the plan made room for them
        net.add_prefill_bf16_weights()
    return LoadedModel(spec, tok, net)


def rank_bytes(shard: RankShard) -> int:
    """Bytes the rank's model holds as stored (a logical expert counted once per slot)."""
    total = 0
    for src in shard.targets.values():
        t = shard.sources[src]
        total += t.num_bytes
        if t.scale_name is not None:
            total += shard.sources[t.scale_name].num_bytes
    return total


def _check_fits(num_bytes: int, device: torch.device, what: str, synthetic: bool) -> None:
    """Refuse a load that cannot fit (ValueError): synthetic weights by ``check_synthetic_size``
    (host cap, or the CUDA device's free memory); a checkpoint by the CUDA device's free memory."""
    if synthetic:
        check_synthetic_size(num_bytes, device, what)
    elif device.type == "cuda":
        problem = device_fit_problem(num_bytes, torch.cuda.mem_get_info(device)[0], device, what)
        if problem is not None:
            raise ValueError(problem)


def _units(shard: RankShard) -> dict[str, list[str]]:
    """Source weight (no ``.scale``) -> the targets it fills, in the table order of targets."""
    units: dict[str, list[str]] = {}
    for target, src in shard.targets.items():
        units.setdefault(src, []).append(target)
    return units


def _unit_names(shard: RankShard, src: str) -> list[str]:
    """The checkpoint tensors of one unit: the weight and its scale."""
    scale = shard.sources[src].scale_name
    return [src] if scale is None else [src, scale]


class _Placer:
    """Puts each unit's tensors (on the device) into the meta-built model as they arrive.

    Non-expert holders get the tensors themselves (``_load_from_state_dict`` with assign, as
    ``load_state_dict(assign=True)`` would); expert stacks are allocated on the device up front
    and each expert's tensors are copied into every slot that holds that logical expert.
    """

    def __init__(self, net: DeepseekV41, shard: RankShard, device: torch.device):
        self.net = net
        self.modules = dict(net.named_modules())
        self.experts: dict[str, ExpertSlots] = {}
        for name, module in self.modules.items():
            if isinstance(module, ExpertSlots):
                self.experts[name + "."] = module
        quantized = {shard.sources[src].scale_name is not None
                     for target, src in shard.targets.items() if _EXPERTS in target}
        for slots in self.experts.values():
            slots.allocate(device, quantized=quantized != {False})

    def place(self, src: str, targets: list[str], stored: dict[str, torch.Tensor]) -> None:
        """Put source weight ``src`` (+ its scale, both in ``stored``) into every target."""
        weight = stored[src]
        scale = stored.get(src.removesuffix(".weight") + ".scale")
        with torch.no_grad():
            for target in targets:
                head, is_expert, rest = target.partition(_EXPERTS)
                if is_expert:  # layers.L.ffn.experts.{j}.{w}.weight: slot j of a stack
                    self._place_expert(head + _EXPERTS, rest, weight, scale)
                else:
                    module_name, _, local = target.rpartition(".")
                    self._assign(module_name, target, local, weight, scale)

    def _place_expert(self, prefix: str, rest: str, weight: torch.Tensor,
                      scale: torch.Tensor | None) -> None:
        j, w, _ = rest.split(".")
        try:
            self.experts[prefix].load_slot(int(j), w, weight, scale)
        except ValueError as exc:
            self._fail([f"{prefix}{rest}: {exc}"])

    def _assign(self, module_name: str, target: str, local: str, weight: torch.Tensor,
                scale: torch.Tensor | None) -> None:
        prefix = module_name + "." if module_name else ""
        sub = {target: weight}
        if scale is not None:
            sub[prefix + local.removesuffix("weight") + "scale"] = scale
        missing: list[str] = []
        unexpected: list[str] = []
        errors: list[str] = []
        self.modules[module_name]._load_from_state_dict(
            sub, prefix, {"assign_to_params_buffers": True}, True, missing, unexpected, errors)
        if unexpected:
            errors.append(f"Unexpected key(s) in state_dict: {', '.join(unexpected)}")
        if errors:
            self._fail(errors)

    def finish(self) -> None:
        """Every parameter filled (coverage made sure of it; a last check, no data read)."""
        left = [n for n, t in self.net.state_dict(keep_vars=True).items() if t.is_meta]
        if left:
            self._fail([f"{n} was not loaded" for n in left])

    def _fail(self, errors: list[str]) -> None:
        raise RuntimeError(f"Error(s) in loading state_dict for {type(self.net).__name__}:\n\t"
                           + "\n\t".join(errors))


class _ScaleCheck:
    """``check_scales`` on each unit as it arrives. On the host at once; on an accelerator the
    NaN flags are read back ``SCALE_CHECK_BATCH`` scales at a time (the scales are kept until
    then), so loading does not wait on the device per tensor."""

    def __init__(self, device: torch.device, model_path: str):
        self.deferred = device.type != "cpu"
        self.model_path = model_path
        self.pending: list[tuple[TensorSpec, torch.Tensor, torch.Tensor]] = []

    def add(self, stored: dict[str, torch.Tensor], scale_spec: TensorSpec | None) -> None:
        """Check the scale of one unit (``scale_spec`` None: the weight has none)."""
        if scale_spec is None:
            return
        scale = stored[scale_spec.name]
        if not self.deferred:
            self._check({scale_spec.name: scale}, [scale_spec])
            return
        self.pending.append((scale_spec, scale, (scale.view(torch.uint8) == 255).any()))
        if len(self.pending) >= SCALE_CHECK_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        bad = torch.stack([flag for _, _, flag in pending]).tolist()
        for (scale_spec, scale, _), is_bad in zip(pending, bad, strict=True):
            if is_bad:
                self._check({scale_spec.name: scale}, [scale_spec])

    def _check(self, stored: dict[str, torch.Tensor], specs: list[TensorSpec]) -> None:
        try:
            check_scales(stored, specs)
        except ValueError as exc:  # a corrupt scale, named by check_scales
            raise CheckpointError(f"checkpoint {self.model_path}: {exc}") from None


def _model_coverage(net: DeepseekV41, shard: RankShard) -> list[str]:
    """Every parameter (and persistent buffer) of ``net`` assigned exactly once; the model's
    ``.scale`` entries come with their weights (``_state``)."""
    params = {n for n in net.state_dict(keep_vars=True) if not n.endswith(".scale")}
    problems = [f"parameter {n} of the rank's model gets no tensor from the shard map"
                for n in sorted(params - set(shard.targets))]
    problems += [f"the shard map assigns {n}, which the rank's model does not have"
                 for n in sorted(set(shard.targets) - params)]
    return problems


def _checkpoint_coverage(ckpt_dir: Path, shard: RankShard) -> list[str]:
    """Index and shard headers only: each source tensor present with its dtype and shape."""
    index = ckpt_dir / INDEX_FILE
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{index}: unreadable checkpoint index ({exc})"]
    problems: list[str] = []
    headers: dict[str, dict[str, shards.ShardEntry] | None] = {}
    for name, t in shard.sources.items():
        shard_name = weight_map.get(name)
        if shard_name is None:
            problems.append(f"missing tensor {name} (expected "
                            f"{TORCH_TO_SAFETENSORS[t.dtype]} {list(t.shape)})")
            continue
        if shard_name not in headers:
            path = ckpt_dir / shard_name
            if Path(shard_name).name != shard_name or not path.is_file():
                problems.append(f"shard {shard_name} (holding {name}) does not exist in "
                                f"{ckpt_dir}")
                headers[shard_name] = None
            else:
                entries, shard_problems = shards.read_shard_header(path)
                problems += shard_problems
                headers[shard_name] = None if shard_problems else entries
        entries = headers[shard_name]
        if entries is None:
            continue
        entry = entries.get(name)
        if entry is None:
            problems.append(f"tensor {name}: the index maps it to {shard_name}, which does not "
                            "contain it")
        elif (entry.dtype, entry.shape) != (TORCH_TO_SAFETENSORS[t.dtype], t.shape):
            problems.append(f"tensor {name}: {entry.dtype} {list(entry.shape)} in {shard_name},"
                            f" expected {TORCH_TO_SAFETENSORS[t.dtype]} {list(t.shape)}")
    return problems


def _read(ckpt_dir: Path, shard: RankShard, units: dict[str, list[str]],
          device: torch.device) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """(source weight, its tensors on ``device``) per unit, one shard file at a time, each file
    in batches of at most ``READ_BATCH_BYTES`` (or one larger unit): a batch is read, copied to
    the device, and its host copies dropped before the next batch is read."""
    weight_map = json.loads((ckpt_dir / INDEX_FILE).read_text())["weight_map"]
    by_shard: dict[str, list[str]] = {}
    for src in units:
        by_shard.setdefault(weight_map[src], []).append(src)
    for srcs in by_shard.values():
        batch: list[str] = []
        num_bytes = 0
        for src in srcs:
            unit_bytes = sum(shard.sources[n].num_bytes for n in _unit_names(shard, src))
            if batch and num_bytes + unit_bytes > READ_BATCH_BYTES:
                yield from _read_batch(ckpt_dir, shard, weight_map, batch, device)
                batch, num_bytes = [], 0
            batch.append(src)
            num_bytes += unit_bytes
        if batch:
            yield from _read_batch(ckpt_dir, shard, weight_map, batch, device)


def _read_batch(ckpt_dir: Path, shard: RankShard, weight_map: dict[str, str], srcs: list[str],
                device: torch.device) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    names_by_file: dict[str, list[str]] = {}
    for src in srcs:
        for name in _unit_names(shard, src):  # a scale may sit in another shard file
            names_by_file.setdefault(weight_map[name], []).append(name)
    on_device: dict[str, torch.Tensor] = {}
    for file, names in names_by_file.items():
        host = shards.load_tensors(ckpt_dir / file, names)
        for name in names:
            on_device[name] = host.pop(name).to(device)  # the host copy goes here (not on CPU)
        del host
    for src in srcs:
        yield src, {name: on_device.pop(name) for name in _unit_names(shard, src)}


def _synthetic(shard: RankShard, units: dict[str, list[str]], seed: int,
               device: torch.device) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """(source weight, its tensors made on ``device``) per unit, as the full synthetic
    checkpoint holds them (each tensor's values depend only on ``(seed, name)`` and the
    device kind)."""
    for src in units:
        yield src, synthetic_tensors([shard.sources[src]], seed, device)
