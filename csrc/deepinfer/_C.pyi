"""Type stubs for deepinfer._C (kept in step with csrc/bindings.cc)."""

import enum
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

ABI_VERSION: int

def abi_version() -> int: ...

# --- block manager (csrc/bind_block_manager.cc) ---

class BlockManager:
    """Paged KV blocks + per-sequence state slots, allocated as one unit. Block 0 and state
    slot 0 are reserved sentinels; allocate/fork keep RESERVE_BLOCKS free blocks in reserve for
    decode appends; free lists are LIFO. ValueError: caller mistake; RuntimeError: out of
    capacity or a broken invariant."""

    RESERVE_BLOCKS: int
    def __init__(self, num_blocks: int, block_size: int, num_state_slots: int) -> None: ...
    def can_allocate(self, num_tokens: int) -> bool: ...
    def allocate(self, seq_id: int, num_tokens: int) -> None: ...
    def can_append(self, seq_id: int, num_new_tokens: int = 1) -> bool: ...
    def append(self, seq_id: int, num_new_tokens: int = 1) -> list[int]: ...
    def can_fork(self, parent_id: int, num_tokens: int | None = None) -> bool: ...
    def fork(
        self, parent_id: int, child_id: int, num_tokens: int | None = None
    ) -> tuple[tuple[int, int] | None, tuple[int, int]]: ...
    def free(self, seq_id: int) -> None: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def num_usable_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def num_state_slots(self) -> int: ...
    def num_free_blocks(self) -> int: ...
    def num_free_state_slots(self) -> int: ...
    def num_sequences(self) -> int: ...
    def has_sequence(self, seq_id: int) -> bool: ...
    def __contains__(self, seq_id: int) -> bool: ...
    def block_table(self, seq_id: int) -> list[int]: ...
    def state_slot(self, seq_id: int) -> int: ...
    def num_tokens(self, seq_id: int) -> int: ...
    def ref_count(self, block_id: int) -> int: ...
    def usage(self) -> float: ...
    def check_integrity(self) -> None: ...

# --- load plans (csrc/bind_load_plan.cc); buffers: C-contiguous writable int32, 4 per segment ---

ZERO_FILL_BLOCK: int
MAX_RING_SEGMENTS: int

def max_paged_segments(view_len: int, block_size: int) -> int: ...
def build_paged_load_plan(
    out: Any, block_table: Sequence[int], block_size: int, num_tokens: int, view_len: int
) -> int: ...
def build_ring_load_plan(out: Any, ring_block_id: int, window: int, num_tokens: int) -> int: ...
def validate_segments(
    segments: Any, view_len: int, block_size: int, num_segments: int | None = None
) -> None: ...

# --- scheduler (csrc/bind_scheduler.cc, csrc/bind_sample_prep.cc) ---
# Rules: csrc/include/deepinfer/scheduler.h. ValueError: caller mistake; RuntimeError: capacity.

class SchedulerMode(enum.Enum):
    NORMAL = 0
    PROMPT = 1  # prefill only: every step is PREFILL (maybe empty)
    COMPLETION = 2  # decode only: waiting requests join decode directly

class Phase(enum.Enum):
    DECODE = 0
    PREFILL = 1

class SchedulerConfig:
    def __init__(
        self,
        *,
        block_size: int,
        num_blocks: int,
        num_state_slots: int,
        max_model_len: int,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        prefill_chunk_size: int = 8192,
        mode: SchedulerMode = ...,
        prefill_watermark: float = 0.9,
        vote_interval_steps: int = 0,
        lookahead_tokens: int = 0,
        decode_buckets: Sequence[int] = (),
        prefill_token_buckets: Sequence[int] = (),
    ) -> None: ...
    block_size: int
    num_blocks: int
    num_state_slots: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    prefill_chunk_size: int
    mode: SchedulerMode
    prefill_watermark: float
    vote_interval_steps: int
    lookahead_tokens: int
    decode_buckets: list[int]
    prefill_token_buckets: list[int]

class StepPlan:
    """One step's batch; array attributes are read-only views over the scheduler's buffers,
    valid until the next step is scheduled (copy what must outlive it)."""

    step_id: int
    phase: Phase
    num_rows: int
    num_padded_rows: int  # decode: the bucket (rows past num_rows point at block 0 / slot 0)
    bucket: int  # decode: rows bucket; prefill: token bucket; -1 = none fits
    num_batched_tokens: int
    preempted: list[int]
    seq_ids: npt.NDArray[np.int64]  # [num_rows]
    epochs: npt.NDArray[np.int64]  # [num_rows]
    start_pos: npt.NDArray[np.int32]  # [num_rows]
    num_tokens: npt.NDArray[np.int32]  # [num_rows]
    seq_lens: npt.NDArray[np.int32]  # [num_rows] start_pos + num_tokens
    samples: npt.NDArray[np.bool_]  # [num_rows] row samples a token
    is_prefill: npt.NDArray[np.bool_]  # [num_rows]
    block_tables: npt.NDArray[np.int32]  # [num_padded_rows, block_table_width]
    state_slots: npt.NDArray[np.int32]  # [num_padded_rows]
    block_copies: npt.NDArray[np.int32]  # [k, 2] (src, dst): perform before the forward
    slot_copies: npt.NDArray[np.int32]  # [k, 2] (src, dst)

class SampleMeta:
    """Sampling metadata of the last prepare_sample (read-only views, [num_rows] each)."""

    num_rows: int
    num_stale: int
    temperature: npt.NDArray[np.float32]
    top_p: npt.NDArray[np.float32]
    top_k: npt.NDArray[np.int32]
    min_p: npt.NDArray[np.float32]
    seeds: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    logits_index: npt.NDArray[np.int32]

class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None: ...
    def add_request(
        self,
        seq_id: int,
        prompt_len: int,
        max_new_tokens: int,
        image_spans: Sequence[tuple[int, int]] = (),
        structured_output: bool = False,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: int = -1,
    ) -> None: ...
    def fork(self, parent_id: int, child_id: int, seed: int | None = None) -> None: ...
    def abort(self, seq_id: int) -> None: ...
    def finish(self, seq_id: int) -> None: ...
    def vote1_local(self) -> int: ...
    def apply_vote1(self, all_flag: bool, any_flag: bool) -> int: ...
    def finish_step(self, any_admitted: bool) -> StepPlan: ...
    def cancel_step(self) -> None: ...
    def schedule(
        self, allreduce_max: Callable[[list[int]], Sequence[int]] | None = None
    ) -> StepPlan: ...
    def commit(self, step_id: int, num_accepted: Any, finished: Any = None) -> list[int]: ...
    def take_finished(self) -> list[tuple[int, str]]: ...
    def prepare_sample(
        self, seq_ids: Any, epochs: Any, is_prefill: Any, query_lens: Any, seq_lens: Any
    ) -> SampleMeta: ...
    def prepare_sample_into(
        self,
        out: tuple[Any, Any, Any, Any, Any, Any, Any],
        seq_ids: Any,
        epochs: Any,
        is_prefill: Any,
        query_lens: Any,
        seq_lens: Any,
    ) -> int: ...
    def request(self, seq_id: int) -> dict[str, Any] | None: ...
    @property
    def config(self) -> SchedulerConfig: ...
    @property
    def block_table_width(self) -> int: ...
    @property
    def row_capacity(self) -> int: ...
    @property
    def step_pending(self) -> bool: ...
    @property
    def num_steps(self) -> int: ...
    def num_uncommitted_steps(self) -> int: ...
    def waiting_ids(self) -> list[int]: ...
    def prefilling_ids(self) -> list[int]: ...
    def running_ids(self) -> list[int]: ...
    def num_free_blocks(self) -> int: ...
    def num_free_state_slots(self) -> int: ...
    def usage(self) -> float: ...
    def block_table(self, seq_id: int) -> list[int]: ...
    def state_slot(self, seq_id: int) -> int: ...
    def num_reserved_tokens(self, seq_id: int) -> int: ...
    def ref_count(self, block_id: int) -> int: ...
    def check_integrity(self) -> None: ...
