"""CUDA graphs of the plan's decode buckets: captured once at start, replayed every decode step.

A decode step of n rows runs the graph of the smallest bucket b >= n (the scheduler names it,
``plan.graph_buckets.decode``). Every graph reads the same static input buffers, allocated
once for the largest bucket::

    input_ids    (B,)              int64   the rows' new tokens
    positions    (B,)              int64   their positions
    slots        (B,)              int64   their state slots
    block_tables (B, max_blocks)   int64   their block tables, 0-padded

The step writes rows [0, n) from a pinned host staging buffer (one host -> device copy; two
buffers used in turn, so a step is staged while the previous one's copy may still be queued)
and rows [n, b) with padding: token 0, position 0, slot 0 and block 0, the pools' sentinels, which
no sequence owns (``runtime/cache_pool.py``), so a padding row's writes are never read by a
real row. A row whose token the step in flight is still sampling takes it on the device
(``feed``: the index of its sampling row there; ``input_ids[i] = feed_tokens[feed[i]]``), so
step t+1 is enqueued before step t's tokens reach the host. Graph b then replays
:meth:`DeepseekV41.forward_decode` over rows [0, b) and leaves the (b, vocab) fp32 logits in
its static output, of which the step returns rows [0, n).

The indexer's key width is static: ``max_model_len // ratio`` per KV source
(``DecodeRows.max_position = max_model_len - 1``); the scoring kernel skips the tiles beyond
each row's visible count, so the work still follows the context.

Capture runs each bucket eagerly once first (Triton compiles its kernels outside the capture),
largest bucket first, all graphs sharing one memory pool. Both runs use padding rows only, so
capturing never touches a sequence's cache.

A plan that runs a reference op which syncs the host (``kernels.reference.HOST_SYNC_OPS``, e.g.
the reference MoE's per-expert loop) cannot be captured: :func:`graph_blocking_ops` names them and
the engine then decodes eagerly.

On a CPU model there is nothing to capture: :meth:`DecodeGraphs.run` then runs the same
static-buffer forward eagerly, which lets CPU tests check everything but the capture itself
(buffers, padding, buckets, the engine's use of them).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from deepinfer.kernels.registry import REFERENCE, KernelSet
from deepinfer.runtime.cache_pool import CachePool
from deepinfer.runtime.model.decode_rows import DecodeRows
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41

__all__ = ["DecodeGraphs", "graph_blocking_ops"]

_COLUMNS = 4  # input_ids, positions, slots, feed; then the block table


class DecodeGraphs:
    """The captured decode graphs of one rank (see the module docstring).

    Args:
        model: on a CUDA device, weights loaded; pool: the rank's cache pool.
        buckets: the plan's decode buckets (row counts); max_model_len: the plan's.
        log: called with one line per captured bucket (start-up progress), or None.

    After :meth:`capture`, ``warmup_s`` / ``graph_s`` hold each bucket's eager warm-up (the
    first one also compiles the Triton kernels: a cold kernel cache dominates start-up) and
    capture times, and ``capture_s`` the total.
    """

    def __init__(self, model: DeepseekV41, pool: CachePool, buckets: list[int],
                 max_model_len: int, log: Callable[[str], None] | None = None):
        if not buckets or any(b <= 0 for b in buckets):
            raise ValueError(f"decode buckets must be positive row counts, got {buckets}")
        self.model, self.pool = model, pool
        self.buckets = sorted(set(buckets))
        self.max_model_len = max_model_len
        self.max_blocks = -(-max_model_len // pool.block_size_tokens)
        rows, width = self.buckets[-1], _COLUMNS + self.max_blocks
        device = model.device
        self._cuda = device.type == "cuda"
        # run(): replay the captured graph, or run the same static-buffer forward eagerly (on
        # the CPU; on a GPU a diagnostic that tells a capture problem from a shape problem)
        self.replay = self._cuda
        self._hosts = [torch.zeros(rows, width, dtype=torch.int64) for _ in range(2)]
        if self._cuda:
            self._hosts = [h.pin_memory() for h in self._hosts]
        self._turn = 0
        self._static = torch.zeros(rows, width, dtype=torch.int64, device=device)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._logits: dict[int, torch.Tensor] = {}
        self._mempool = None
        self._log = log
        self.capture_s = 0.0
        self.warmup_s: dict[int, float] = {}
        self.graph_s: dict[int, float] = {}

    def rows(self, bucket: int) -> DecodeRows:
        """The :class:`DecodeRows` over the first ``bucket`` rows of the static buffers."""
        s = self._static[:bucket]
        # the columns are strided views of the static buffer: contiguous copies (inside the
        # graph) so that no kernel sees a stride it does not expect
        return DecodeRows(self.pool, s[:, 0].contiguous(), s[:, 1].contiguous(),
                          s[:, 2].contiguous(), s[:, _COLUMNS:], self.max_model_len - 1)

    def capture(self) -> None:
        """Capture every bucket's graph (largest first, one shared memory pool); on CPU only
        mark the buckets ready."""
        t0 = time.perf_counter()
        if not self._cuda:
            self._graphs = dict.fromkeys(self.buckets)
            return
        self._static.zero_()  # padding rows everywhere: sentinel slot and block
        device = self.model.device
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        syncs: list[str] = []
        with torch.cuda.stream(stream):
            for bucket in reversed(self.buckets):
                t = time.perf_counter()
                with _host_syncs_noted(syncs):  # what would break the capture, named early
                    self.model.forward_decode(self.rows(bucket))  # compile + allocate, eagerly
                torch.cuda.synchronize(device)
                self.warmup_s[bucket] = time.perf_counter() - t
                self._note(f"decode bucket {bucket}: eager warm-up "
                           f"{self.warmup_s[bucket]:.2f} s")
        for line in syncs:
            self._note(f"host sync in the decode forward: {line}")
        torch.cuda.current_stream(device).wait_stream(stream)
        self._mempool = torch.cuda.graph_pool_handle()
        for bucket in reversed(self.buckets):
            t = time.perf_counter()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, pool=self._mempool):
                    self._logits[bucket] = self.model.forward_decode(self.rows(bucket))
            except RuntimeError as e:
                seen = "; ".join(syncs) or "none noted"
                raise RuntimeError(f"capturing the CUDA graph of decode bucket {bucket} failed "
                                   f"(host syncs seen in the warm-up: {seen}): {e}") from e
            self._graphs[bucket] = graph
            torch.cuda.synchronize(device)
            self.graph_s[bucket] = time.perf_counter() - t
            self._note(f"decode bucket {bucket}: captured in {self.graph_s[bucket]:.2f} s")
        self.capture_s = time.perf_counter() - t0

    def _note(self, line: str) -> None:
        if self._log is not None:
            self._log(line)

    def bucket_for(self, num_rows: int) -> int:
        """The smallest bucket holding ``num_rows`` rows."""
        for b in self.buckets:
            if b >= num_rows:
                return b
        raise ValueError(f"a decode step of {num_rows} rows exceeds the largest CUDA-graph "
                         f"bucket {self.buckets[-1]}")

    def run(self, input_ids: np.ndarray, positions: np.ndarray, slots: np.ndarray,
            block_tables: np.ndarray, feed: np.ndarray | None = None,
            feed_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Replay one decode step of n rows -> (n, vocab) fp32 logits (a view of the graph's
        static output: valid until the next replay).

        Args: (n,) int64 token ids, positions and state slots; (n, blocks) int64 block tables
        (blocks <= max_blocks; padded here with block 0); ``feed`` (n,) int64 and
        ``feed_tokens`` (device): row i's token is ``feed_tokens[feed[i]]`` where
        ``feed[i] >= 0`` (then ``input_ids[i]`` is ignored).
        """
        n = input_ids.shape[0]
        bucket = self.bucket_for(n)
        if not self._graphs:
            raise RuntimeError("DecodeGraphs.run before capture()")
        blocks = block_tables.shape[1]
        if blocks > self.max_blocks:
            raise ValueError(f"block tables have {blocks} columns, the graphs {self.max_blocks}")
        staging = self._hosts[self._turn]
        self._turn ^= 1
        host = staging.numpy()
        host[:bucket] = 0
        host[:n, 0], host[:n, 1], host[:n, 2] = input_ids, positions, slots
        host[:n, 3] = -1 if feed is None else feed
        host[:n, _COLUMNS:_COLUMNS + blocks] = block_tables
        static = self._static[:bucket]
        static.copy_(staging[:bucket], non_blocking=self._cuda)
        if feed is not None and feed_tokens is not None and bool((feed >= 0).any()):
            src = static[:n, 3]
            fed = feed_tokens[src.clamp(min=0)]
            static[:n, 0] = torch.where(src >= 0, fed, static[:n, 0])
        if not self.replay:
            return self.model.forward_decode(self.rows(bucket))[:n]
        self._graphs[bucket].replay()
        return self._logits[bucket][:n]


@contextlib.contextmanager
def _host_syncs_noted(found: list[str]):
    """Collect torch's synchronizing-call warnings (``set_sync_debug_mode("warn")``) raised in
    the block as "file:line: message" (each once) into ``found``; other warnings pass on."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:  # also torch's "prototype" notice
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    for w in caught:
        text = str(w.message)
        if "Synchronization debug mode is a prototype" in text:
            continue  # the notice setting the mode prints: noise at every start-up
        if "synchronizing CUDA operation" not in text:  # not ours to keep: pass it on
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        line = f"{w.filename}:{w.lineno}: {text.splitlines()[0]}"
        if line not in found:
            found.append(line)


def graph_blocking_ops(kernels: KernelSet) -> list[str]:
    """The ops ``kernels`` runs with a reference implementation that syncs the host (sorted)."""
    from deepinfer.kernels.reference import HOST_SYNC_OPS

    return sorted(op for op in HOST_SYNC_OPS if kernels.backend_of(op) == REFERENCE)
