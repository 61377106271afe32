"""Engine statistics: per-step timings, throughput, cache usage, preemptions, bucket padding."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deepinfer.runtime.outputs import RequestOutput

__all__ = ["EngineStats"]


@dataclass
class EngineStats:
    """Accumulated over a run. ``padding_rows`` counts the rows a decode step's graph bucket adds
    beyond the scheduled rows (the waste of the planned bucket sizes)."""

    num_steps: int = 0
    num_prefill_steps: int = 0
    num_decode_steps: int = 0
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_finished: int = 0
    preemptions: int = 0
    padding_rows: int = 0
    scheduled_rows: int = 0
    host_s: float = 0.0
    step_s: float = 0.0
    forward_s: float = 0.0  # launching the steps' device work (added as each is collected)
    max_cache_usage: float = 0.0
    step_ms: list[float] = field(default_factory=list)
    decode_step_ms: list[float] = field(default_factory=list)  # wall time of decode steps
    # op -> calls that ran the reference although the plan says triton (the kernel's supports()
    # rejects the model's shapes; runtime/kernel_backends.py); the KernelSet's live counts
    kernel_fallback_calls: dict[str, int] = field(default_factory=dict)

    def step(self, plan: Any, inputs: Any, *, host_s: float, step_s: float, usage: float) -> None:
        """Record one step (``plan``: the scheduler's StepPlan; ``inputs``: None if empty)."""
        self.num_steps += 1
        self.preemptions += len(plan.preempted)
        self.host_s += host_s
        self.step_s += step_s
        self.step_ms.append(step_s * 1e3)
        self.max_cache_usage = max(self.max_cache_usage, usage)
        if inputs is None:
            return
        if inputs.is_prefill:
            self.num_prefill_steps += 1
        else:
            self.num_decode_steps += 1
            self.decode_step_ms.append(step_s * 1e3)
            rows = len(inputs.seq_ids)
            self.scheduled_rows += rows
            self.padding_rows += max(0, inputs.num_padded_rows - rows)

    def finished(self, output: RequestOutput) -> None:
        self.num_finished += 1
        self.num_prompt_tokens += output.num_prompt_tokens
        self.num_output_tokens += output.num_output_tokens

    def summary(self) -> dict[str, Any]:
        """Plain numbers for the CLI summary and the results (JSON-able)."""
        waste = self.padding_rows / max(1, self.padding_rows + self.scheduled_rows)
        return {
            "steps": self.num_steps, "prefill_steps": self.num_prefill_steps,
            "decode_steps": self.num_decode_steps, "finished": self.num_finished,
            "prompt_tokens": self.num_prompt_tokens, "output_tokens": self.num_output_tokens,
            "output_tokens_per_s": self.num_output_tokens / self.step_s if self.step_s else 0.0,
            "preemptions": self.preemptions, "decode_padding_waste": round(waste, 4),
            "host_s": round(self.host_s, 4), "forward_s": round(self.forward_s, 4),
            "wall_s": round(self.step_s, 4), "max_cache_usage": round(self.max_cache_usage, 4),
            **({"kernel_fallback_calls": dict(self.kernel_fallback_calls)}
               if self.kernel_fallback_calls else {}),
        }
