"""``load_topology``: read a ``topology.yaml`` strictly into the :class:`Topology` dataclasses.

Strict means: unknown keys (and duplicate keys) are rejected, every value is type- and
range-checked, and enums list their allowed values. Every problem is one
:class:`~deepinfer.planner.errors.TopologyError` naming the file, the dotted field and what was
expected. Defaults are the dataclass defaults of ``planner/topology.py``, except where a default
follows from another section (``parallel.dp``/``ep`` from the device count, the hardware numbers
from the table in ``planner/hardware.py``). YAML keys carry user units (``memory_gib``,
``hbm_tb_per_s``); the dataclass fields carry base units (bytes, bytes/s, FLOP/s).
``docs/topology.md`` documents the format.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import MISSING, dataclass, fields
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from deepinfer.artifacts.model_spec import BUILTIN_MODELS, builtin_config_path
from deepinfer.planner.errors import TopologyError
from deepinfer.planner.hardware import DEVICE_KINDS, GIB, TERA, hardware_spec
from deepinfer.planner.topology import (
    CacheSection,
    EplbSection,
    HardwareSection,
    ModelSection,
    ParallelSection,
    SchedulerSection,
    SpeculativeSection,
    Topology,
    WorkloadSection,
)

__all__ = [
    "BUILTIN_PREFIX",
    "DEFAULT_TOPOLOGY",
    "builtin_topology_names",
    "load_topology",
    "model_config_path",
    "parse_topology",
    "yaml_field",
]

BUILTIN_PREFIX = "builtin:"
DEFAULT_TOPOLOGY = "builtin:tiny-cpu"
TOPOLOGY_PACKAGE = "deepinfer.artifacts.topologies"


@dataclass(frozen=True)
class Key:
    """One YAML key: its dataclass field, kind, range and unit conversion."""

    name: str  # the YAML key
    field: str  # the dataclass field it fills
    kind: str  # int | float | enum | str | path
    minimum: float | None = None  # smallest allowed value (inclusive unless exclusive_min)
    exclusive_min: bool = False
    maximum: float | None = None  # largest allowed value (inclusive)
    choices: tuple[str, ...] = ()  # for kind == "enum"
    scale: float = 1  # YAML unit -> field unit


def _int(name: str, field: str | None = None, minimum: int = 1) -> Key:
    return Key(name, field or name, "int", minimum=minimum)


def _fraction(name: str) -> Key:
    return Key(name, name, "float", minimum=0.0, exclusive_min=True, maximum=1.0)


def _positive(name: str, field: str, scale: float) -> Key:
    return Key(name, field, "float", minimum=0.0, exclusive_min=True, scale=scale)


SECTIONS: dict[str, tuple[type, tuple[Key, ...]]] = {
    "model": (ModelSection, (
        Key("path", "path", "str"),
        Key("weights", "weights", "enum", choices=("auto", "synthetic")),
    )),
    "hardware": (HardwareSection, (
        Key("device", "device", "enum", choices=DEVICE_KINDS),
        _positive("memory_gib", "memory_bytes", GIB),
        _positive("hbm_tb_per_s", "hbm_bytes_per_s", TERA),
        _positive("bf16_tflops", "bf16_flops_per_s", TERA),
        _positive("fp8_tflops", "fp8_flops_per_s", TERA),
        _int("sm_arch", minimum=0),
        _int("gpus_per_node"),
        _int("nodes"),
    )),
    "parallel": (ParallelSection, (_int("dp"), _int("cp"), _int("ep"), _int("engram"))),
    "cache": (CacheSection, (
        _int("block_size", "block_size_tokens"),
        _fraction("memory_fraction"),
        _int("max_model_len", "max_model_len_tokens", minimum=0),
        Key("prefill_bf16_weights", "prefill_bf16_weights", "enum",
            choices=("auto", "on", "off")),
    )),
    "scheduler": (SchedulerSection, (
        _int("max_num_seqs"),
        _int("max_num_batched_tokens"),
        _int("prefill_chunk_size", "prefill_chunk_size_tokens"),
        Key("mode", "mode", "enum", choices=("normal", "prompt", "completion")),
        _fraction("prefill_watermark"),
        _int("vote_interval_steps"),
    )),
    "speculative": (SpeculativeSection, (
        Key("method", "method", "enum", choices=("none", "dspark")),
        _int("num_draft_tokens", minimum=0),
    )),
    "eplb": (EplbSection, (
        _int("redundant_experts", minimum=0),
        _int("expert_groups", minimum=0),
        Key("load_stats", "load_stats", "path"),
        Key("decode_load_stats", "decode_load_stats", "path"),
    )),
    "workload": (WorkloadSection, (
        _int("prompt_len", "prompt_len_tokens"),
        _int("output_len", "output_len_tokens"),
        _int("num_requests"),
    )),
}
CUSTOM_REQUIRED = ("memory_gib", "hbm_tb_per_s", "bf16_tflops", "fp8_tflops")


# ---- entry points -----------------------------------------------------------------------------
def load_topology(path_or_builtin: str | Path = DEFAULT_TOPOLOGY) -> Topology:
    """Read ``topology.yaml`` (a path, or ``builtin:NAME`` for a shipped topology).

    Raises:
        TopologyError: naming the file, the dotted field and what was expected.
    """
    text, source, base_dir = _read_source(str(path_or_builtin))
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise TopologyError(source, "", f"not valid YAML: {where}{problem}") from None
    return parse_topology(raw, source=source, base_dir=base_dir)


def parse_topology(raw: Any, source: str = "<memory>", base_dir: str | Path = ".") -> Topology:
    """Validate an already-parsed YAML document (a dict) and build the :class:`Topology`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise TopologyError(source, "", f"expected a mapping of sections at the top level, got "
                            f"{_describe(raw)}")
    _reject_unknown(raw, SECTIONS, source, "")
    if "model" not in raw:
        raise TopologyError(source, "model", "missing (required): the model section with "
                            "'path' (a checkpoint directory or builtin:NAME)")
    values = {name: _read_section(raw, name, source) for name in SECTIONS}
    given = {name: set(raw.get(name) or ()) for name in SECTIONS}
    base = Path(base_dir).resolve()

    model = _resolve_model(values["model"], source, base)
    hardware = _resolve_hardware(values["hardware"], given["hardware"], source)
    parallel = _resolve_parallel(values["parallel"], given["parallel"], hardware,
                                 "gpus_per_node" in given["hardware"], source)
    eplb = _resolve_eplb(values["eplb"], source, base)
    _check_scheduler(values["scheduler"], source)
    _check_speculative(values["speculative"], source)
    _check_workload(values["workload"], values["cache"], source)
    return Topology(
        model=ModelSection(**model), hardware=HardwareSection(**hardware),
        parallel=ParallelSection(**parallel), cache=CacheSection(**values["cache"]),
        scheduler=SchedulerSection(**values["scheduler"]),
        speculative=SpeculativeSection(**values["speculative"]), eplb=EplbSection(**eplb),
        workload=WorkloadSection(**values["workload"]), source=source, base_dir=str(base))


def builtin_topology_names() -> list[str]:
    """Names ``NAME`` of the shipped topologies (``builtin:NAME``), sorted."""
    root = files(TOPOLOGY_PACKAGE)
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir()
                  if p.name.endswith(".yaml"))


def model_config_path(model_path: str) -> Path:
    """The ``config.json`` a resolved ``model.path`` stands for (directory, file or builtin)."""
    if model_path.startswith(BUILTIN_PREFIX):
        return builtin_config_path(model_path.removeprefix(BUILTIN_PREFIX))
    path = Path(model_path)
    return path / "config.json" if path.is_dir() else path


def yaml_field(field: str) -> str:
    """A dotted dataclass field (``hardware.memory_bytes``) as the topology.yaml key a user
    writes (``hardware.memory_gib``); names that are not dataclass fields come back unchanged."""
    section, _, name = field.partition(".")
    for key in SECTIONS.get(section, (None, ()))[1]:
        if key.field == name:
            return f"{section}.{key.name}"
    return field


# ---- reading ------------------------------------------------------------------------------------
class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_source(spec: str) -> tuple[str, str, Path]:
    """(text, source name for messages, directory relative paths resolve against)."""
    if spec.startswith(BUILTIN_PREFIX):
        name = spec.removeprefix(BUILTIN_PREFIX)
        names = builtin_topology_names()
        if name not in names:
            raise TopologyError(spec, "", "unknown built-in topology; expected one of "
                                + ", ".join(BUILTIN_PREFIX + n for n in names))
        resource = files(TOPOLOGY_PACKAGE) / f"{name}.yaml"
        return resource.read_text(), spec, Path(str(resource)).parent
    path = Path(spec).expanduser()
    try:
        return path.read_text(), str(path), path.resolve().parent
    except FileNotFoundError:
        raise TopologyError(str(path), "", "file not found (expected a topology.yaml, or "
                            f"builtin:NAME with NAME one of {', '.join(builtin_topology_names())})"
                            ) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise TopologyError(str(path), "", f"cannot read the file ({exc.__class__.__name__}: "
                            f"{exc})") from None


def _reject_unknown(raw: dict, allowed: Any, source: str, prefix: str) -> None:
    allowed_names = list(allowed)
    for key in raw:
        if key in allowed:
            continue
        hint = difflib.get_close_matches(str(key), allowed_names, n=1)
        did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
        raise TopologyError(source, f"{prefix}{key}", f"unknown key{did_you_mean}; allowed keys: "
                            f"{', '.join(allowed_names)}")


def _read_section(raw: dict, name: str, source: str) -> dict[str, Any]:
    """Checked values of one section, keyed by dataclass field; absent keys take defaults."""
    cls, keys = SECTIONS[name]
    section = raw.get(name)
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise TopologyError(source, name, f"expected a mapping of keys, got {_describe(section)}")
    by_name = {k.name: k for k in keys}
    _reject_unknown(section, by_name, source, f"{name}.")
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    out: dict[str, Any] = {}
    for key in keys:
        if key.name in section:
            out[key.field] = _check_value(key, section[key.name], source, f"{name}.{key.name}")
        elif key.field in defaults:
            out[key.field] = defaults[key.field]
    return out


def _check_value(key: Key, value: Any, source: str, where: str) -> Any:
    """Type, range and enum check of one value; returns it converted to the field's unit."""
    if key.kind == "enum":
        if isinstance(value, bool) and {"on", "off"} <= set(key.choices):
            value = "on" if value else "off"  # YAML 1.1 reads a bare on / off as a boolean
        if not isinstance(value, str) or value not in key.choices:
            raise TopologyError(source, where, f"expected one of {', '.join(key.choices)}; got "
                                f"{_describe(value)}")
        return value
    if key.kind in ("str", "path"):
        if key.kind == "path" and value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            expected = "a file path or null" if key.kind == "path" else "a non-empty string"
            raise TopologyError(source, where, f"expected {expected}, got {_describe(value)}")
        return value
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if key.kind == "int" and not is_int:
        raise TopologyError(source, where, f"expected an integer >= {key.minimum:g}, got "
                            f"{_describe(value)}")
    if key.kind == "float" and not (is_int or isinstance(value, float)):
        raise TopologyError(source, where, f"expected a number {_range(key)}, got "
                            f"{_describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise TopologyError(source, where, f"expected a finite number {_range(key)}, got {value}")
    too_small = key.minimum is not None and (
        value <= key.minimum if key.exclusive_min else value < key.minimum)
    too_large = key.maximum is not None and value > key.maximum
    if too_small or too_large:
        kind = "an integer" if key.kind == "int" else "a number"
        raise TopologyError(source, where, f"expected {kind} {_range(key)}, got {value}")
    if key.kind == "float":
        converted = float(value) * key.scale
        return int(round(converted)) if key.field == "memory_bytes" else converted
    return value


def _range(key: Key) -> str:
    low = "" if key.minimum is None else f"{'>' if key.exclusive_min else '>='} {key.minimum:g}"
    high = "" if key.maximum is None else f"<= {key.maximum:g}"
    return " and ".join(s for s in (low, high) if s)


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


# ---- resolving and cross-field checks ------------------------------------------------------------
def _resolve_model(values: dict, source: str, base: Path) -> dict:
    if "path" not in values:
        raise TopologyError(source, "model.path", "missing (required): a checkpoint directory "
                            "with config.json, or one of " + ", ".join(_builtin_model_names()))
    path: str = values["path"]
    if path.startswith(BUILTIN_PREFIX):
        if path not in _builtin_model_names():
            raise TopologyError(source, "model.path", f"unknown built-in model {path!r}; "
                                f"expected one of {', '.join(_builtin_model_names())}")
        return values
    resolved = Path(path).expanduser()
    resolved = (resolved if resolved.is_absolute() else base / resolved).resolve()
    if not resolved.exists():
        raise TopologyError(source, "model.path", f"{resolved}: not found (expected a checkpoint "
                            "directory with config.json, or one of "
                            f"{', '.join(_builtin_model_names())})")
    if resolved.is_dir() and not (resolved / "config.json").is_file():
        raise TopologyError(source, "model.path", f"{resolved}: the directory has no "
                            "config.json (expected a checkpoint directory in the released layout)")
    return {**values, "path": str(resolved)}


def _builtin_model_names() -> list[str]:
    return [BUILTIN_PREFIX + n for n in BUILTIN_MODELS]


def _resolve_hardware(values: dict, given: set[str], source: str) -> dict:
    """Fill the numbers of a named device from the table; explicit keys override them."""
    device = values["device"]
    if device == "custom":
        missing = [k for k in CUSTOM_REQUIRED if k not in given]
        if missing:
            raise TopologyError(source, f"hardware.{missing[0]}", "missing: device 'custom' "
                                f"needs explicit {', '.join(CUSTOM_REQUIRED)}")
        table = {}
    else:
        spec = hardware_spec(device)
        table = {"memory_bytes": spec.memory_bytes, "hbm_bytes_per_s": spec.hbm_bytes_per_s,
                 "bf16_flops_per_s": spec.bf16_flops_per_s,
                 "fp8_flops_per_s": spec.fp8_flops_per_s, "sm_arch": spec.sm_arch}
    yaml_key = {k.field: k.name for k in SECTIONS["hardware"][1]}
    for field_name, number in table.items():
        if yaml_key[field_name] not in given:
            values[field_name] = number
    return values


def _resolve_parallel(values: dict, given: set[str], hardware: dict, hw_given: bool,
                      source: str) -> dict:
    """Default dp from the device count (and the device count from dp, filling ``hardware``),
    default ep to every rank, and check divisibility."""
    nodes = hardware["nodes"]
    if "dp" not in given and hw_given:
        devices = hardware["gpus_per_node"] * nodes
        if devices % values["cp"]:
            raise TopologyError(source, "parallel.cp", f"cp = {values['cp']} must divide the "
                                f"{devices} devices (gpus_per_node * nodes)")
        values["dp"] = devices // values["cp"]
    world = values["dp"] * values["cp"]
    if not hw_given:
        if world % nodes:
            raise TopologyError(source, "hardware.nodes", f"{nodes} nodes cannot hold "
                                f"dp * cp = {world} ranks evenly")
        hardware["gpus_per_node"] = world // nodes
    devices = hardware["gpus_per_node"] * nodes
    if world != devices:
        raise TopologyError(source, "parallel.dp", f"dp * cp = {values['dp']} * {values['cp']} "
                            f"= {world} ranks, but hardware has gpus_per_node * nodes = "
                            f"{hardware['gpus_per_node']} * {nodes} = {devices} devices; "
                            "one rank per device")
    if "ep" not in given:
        values["ep"] = world
    for name in ("ep", "engram"):
        if world % values[name]:
            divisors = [d for d in range(1, world + 1) if world % d == 0]
            raise TopologyError(source, f"parallel.{name}", f"{name} = {values[name]} must "
                                f"divide dp * cp = {world}; allowed: "
                                f"{', '.join(map(str, divisors))}")
    return values


def _resolve_eplb(values: dict, source: str, base: Path) -> dict:
    for name in ("load_stats", "decode_load_stats"):
        if values[name] is None:
            continue
        path = Path(values[name]).expanduser()
        path = (path if path.is_absolute() else base / path).resolve()
        if not path.is_file():
            raise TopologyError(source, f"eplb.{name}", f"{path}: file not found (expected a "
                                'JSON file {"load": [[tokens per expert] per MoE layer]})')
        values[name] = str(path)
    return values


def _check_scheduler(values: dict, source: str) -> None:
    if values["prefill_chunk_size_tokens"] > values["max_num_batched_tokens"]:
        raise TopologyError(source, "scheduler.prefill_chunk_size", "expected at most "
                            f"max_num_batched_tokens ({values['max_num_batched_tokens']}), got "
                            f"{values['prefill_chunk_size_tokens']}")


def _check_speculative(values: dict, source: str) -> None:
    if values["method"] == "none" and values["num_draft_tokens"]:
        raise TopologyError(source, "speculative.num_draft_tokens", "expected 0 with method "
                            f"'none' (set method: dspark to draft), got "
                            f"{values['num_draft_tokens']}")


def _check_workload(workload: dict, cache: dict, source: str) -> None:
    limit = cache["max_model_len_tokens"]
    total = workload["prompt_len_tokens"] + workload["output_len_tokens"]
    if limit and total > limit:
        raise TopologyError(source, "workload.prompt_len", f"prompt_len + output_len = {total} "
                            f"exceeds cache.max_model_len = {limit}")
