"""The parsed, validated ``topology.yaml``: plain frozen dataclasses, one per section.

This is the planner's input after parsing (``topology_schema.load_topology`` builds it from a
file and fills defaults); every pass reads from it and nothing writes to it. Units are in the
field names. ``docs/topology.md`` documents the file format.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = [
    "CacheSection",
    "EplbSection",
    "HardwareSection",
    "ModelSection",
    "ParallelSection",
    "SchedulerSection",
    "SpeculativeSection",
    "Topology",
    "WorkloadSection",
]


@dataclass(frozen=True)
class ModelSection:
    """``path``: a checkpoint directory (only ``config.json`` is read to plan) or ``builtin:NAME``.
    ``weights``: ``auto`` (load the checkpoint) or ``synthetic`` (seeded random weights)."""

    path: str
    weights: str = "auto"


@dataclass(frozen=True)
class HardwareSection:
    """One device kind for the whole cluster. Numbers are per GPU (per process on ``cpu``).

    ``device`` is ``cpu``, ``h100``, ``h200``, ``h20``, ``b200`` or ``custom`` (explicit numbers);
    a named kind fills the numbers from the hardware table unless the file overrides them.
    """

    device: str = "cpu"
    memory_bytes: int = 0
    hbm_bytes_per_s: float = 0.0
    bf16_flops_per_s: float = 0.0
    fp8_flops_per_s: float = 0.0
    sm_arch: int = 0  # 90 for Hopper, 100 for Blackwell, 0 for CPU
    gpus_per_node: int = 1
    nodes: int = 1


@dataclass(frozen=True)
class ParallelSection:
    """``dp`` data-parallel ranks, ``cp`` context-parallel ranks per DP rank, ``ep`` expert-parallel
    group size (a divisor of ``dp * cp``), ``engram`` ranks holding a shard of the engram tables
    (1 = every rank holds them all)."""

    dp: int = 1
    cp: int = 1
    ep: int = 1
    engram: int = 1


@dataclass(frozen=True)
class CacheSection:
    """``block_size_tokens`` tokens per paged block; ``memory_fraction`` of device memory the
    engine may use; ``max_model_len_tokens`` the longest prompt + output (0 = the model's max);
    ``prefill_bf16_weights``: ``auto``, ``on`` or ``off`` — bf16 twins of the FP8 projections
    for the prefill GEMMs, out of the cache's memory (``passes/cache_layout.py``)."""

    block_size_tokens: int = 64
    memory_fraction: float = 0.90
    max_model_len_tokens: int = 0
    prefill_bf16_weights: str = "auto"


@dataclass(frozen=True)
class SchedulerSection:
    """Scheduler limits. ``mode``: ``normal``, ``prompt`` (prefill only) or ``completion``
    (decode only). ``vote_interval_steps``: every how many steps the DP ranks run vote 1
    (do ALL ranks have waiting work) instead of the ANY vote."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefill_chunk_size_tokens: int = 4096
    mode: str = "normal"
    prefill_watermark: float = 0.90
    vote_interval_steps: int = 8


@dataclass(frozen=True)
class SpeculativeSection:
    """``method``: ``none`` or ``dspark``; ``num_draft_tokens`` draft tokens per decode step."""

    method: str = "none"
    num_draft_tokens: int = 0


@dataclass(frozen=True)
class EplbSection:
    """Expert placement. ``redundant_experts`` extra physical slots in total; ``expert_groups``
    for the hierarchical policy (0 = the model's ``n_group``/1); ``load_stats`` /
    ``decode_load_stats``: JSON files ``{"load": [[tokens per logical expert] per MoE layer]}``
    for prefill (and decode; when absent decode uses the prefill statistics), or ``None`` for
    uniform load."""

    redundant_experts: int = 0
    expert_groups: int = 0
    load_stats: str | None = None
    decode_load_stats: str | None = None


@dataclass(frozen=True)
class WorkloadSection:
    """Expected request shape, used only for planning (cost model, report)."""

    prompt_len_tokens: int = 1024
    output_len_tokens: int = 256
    num_requests: int = 64


@dataclass(frozen=True)
class Topology:
    """The whole ``topology.yaml``. ``source`` is where it came from (a path or ``builtin:NAME``)
    and ``base_dir`` the directory relative paths in it are resolved against."""

    model: ModelSection
    hardware: HardwareSection = field(default_factory=HardwareSection)
    parallel: ParallelSection = field(default_factory=ParallelSection)
    cache: CacheSection = field(default_factory=CacheSection)
    scheduler: SchedulerSection = field(default_factory=SchedulerSection)
    speculative: SpeculativeSection = field(default_factory=SpeculativeSection)
    eplb: EplbSection = field(default_factory=EplbSection)
    workload: WorkloadSection = field(default_factory=WorkloadSection)
    source: str = "<memory>"
    base_dir: str = "."

    @classmethod
    def from_dict(cls, data: dict) -> Topology:
        """Rebuild from ``dataclasses.asdict`` output (the ``topology`` a plan records)."""
        sections = {f.name: f.type for f in fields(cls) if f.name not in ("source", "base_dir")}
        kinds = {name: globals()[kind] for name, kind in sections.items()}
        return cls(**{name: kinds[name](**data[name]) for name in sections},
                   source=data.get("source", "<plan>"), base_dir=data.get("base_dir", "."))

    @property
    def world_size(self) -> int:
        """Model ranks in the job: ``dp * cp``."""
        return self.parallel.dp * self.parallel.cp
