"""Where the runtime's tensors live, and the few host<->device copies of a step.

Everything the model, the batch, the cache pool and the sampler touch lives on the plan's
device (``RuntimePlan.device``: ``cpu`` or ``cuda``). The host keeps the scheduler's numpy
arrays; per step they cross once: token ids, positions and the block tables go to the device
(``to_device``), sampling parameters as two packed columns (``sampling_columns``), and the
sampled token ids come back as one list. On CPU every helper here is the identity (no copy),
so CPU results are unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["plan_device", "sampling_columns", "to_device"]


def plan_device(kind: str) -> torch.device:
    """``cpu`` -> cpu; ``cuda`` -> the current CUDA device (``cuda:N``)."""
    if kind == "cpu":
        return torch.device("cpu")
    if kind != "cuda":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {kind!r}")
    return torch.device("cuda", torch.cuda.current_device())


def to_device(array: np.ndarray | torch.Tensor, device: torch.device | str,
              dtype: torch.dtype | None = None) -> torch.Tensor:
    """A host array as a tensor on ``device`` (one copy; none on CPU beyond numpy's).

    To a CUDA device the copy goes through pinned memory, asynchronously: it queues behind the
    step in flight instead of waiting for it (a pageable copy would block the host until the
    device is idle; the caching host allocator keeps the pinned block until the copy is done).
    """
    t = torch.from_numpy(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) else array
    if dtype is not None:
        t = t.to(dtype)
    target = torch.device(device)
    if target.type == "cuda" and t.device.type == "cpu":
        if not t.is_pinned():
            t = t.pin_memory()
        return t.to(target, non_blocking=True)
    return t.to(target)


def sampling_columns(float_columns: list[np.ndarray], int_columns: list[np.ndarray],
                     device: torch.device | str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-row float32 and int64 columns (each (rows,)) -> tensors on ``device``, two copies.

    Returns views of a (len(float_columns), rows) float32 and a (len(int_columns), rows) int64
    tensor, in the order given.
    """
    f32 = to_device(np.stack([np.asarray(c, dtype=np.float32) for c in float_columns]), device)
    i64 = to_device(np.stack([np.asarray(c, dtype=np.int64) for c in int_columns]), device)
    return list(f32.unbind(0)), list(i64.unbind(0))
