"""The plan format's version, its required keys, and the error every plan check raises.

Bump rule (``docs/plan_format.md``): ``SCHEMA_VERSION`` goes up by one whenever a key is removed
or renamed, or the meaning or unit of a value changes; adding a key does not bump it. A reader
accepts exactly its own version.
"""

from __future__ import annotations

__all__ = [
    "KERNEL_CACHE_DIR",
    "MANIFEST_FILE",
    "PLAN_FILE",
    "REPORT_FILE",
    "REQUIRED_KEYS",
    "SCHEMA_VERSION",
    "STABLE_KEYS",
    "PlanError",
]

SCHEMA_VERSION = 1

PLAN_FILE = "plan.json"
MANIFEST_FILE = "manifest.json"
REPORT_FILE = "report.md"
KERNEL_CACHE_DIR = "kernel-cache"  # written by deepinfer-run (runtime/kernel_cache.py), not listed

# Top-level keys of plan.json, every one required.
REQUIRED_KEYS = (
    "schema_version",
    "deepinfer_version",
    "plan_id",
    "topology",
    "model",
    "rank_groups",
    "expert_placement",
    "weight_shards",
    "cache",
    "graph_buckets",
    "scheduler",
    "kernels",
    "load_plan_templates",
    "cost_model",
    "warnings",
)

# Keys outside tools may rely on within one SCHEMA_VERSION ("*" = every list element, "{a,b}" =
# each of a and b). Golden tests of the big plans compare exactly these.
STABLE_KEYS = (
    "model.layers[*].index",
    "model.layers[*].compress_ratio",
    "model.layers[*].attention_mode",
    "model.layers[*].kv_source",
    "model.layers[*].index_source",
    "cache.context_bytes_per_token",
    "cache.num_blocks",
    "expert_placement.prefill.phy2log",
    "expert_placement.prefill.log2phy",
    "expert_placement.prefill.logcnt",
    "expert_placement.decode.phy2log",
    "expert_placement.decode.log2phy",
    "expert_placement.decode.logcnt",
)


class PlanError(ValueError):
    """A plan directory that cannot be written or trusted. The message names file and field.

    Args:
        source: the file or directory at fault (``plan/manifest.json``, ``plan/plan.json``).
        field: the field inside it (``files.plan.json.sha256``, ``schema_version``), or ``""``.
        message: what was found and what was expected.
    """

    def __init__(self, source: str, field: str, message: str):
        self.source = source
        self.field = field
        self.message = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")
