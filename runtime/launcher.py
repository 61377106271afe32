"""Start the ranks of a multi-rank plan on this machine (``deepinfer-run`` with world size > 1).

Each rank is ``python -m deepinfer.runtime.cli <the same arguments>`` with torchrun's
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT`` = a free port), so a rank started here and one started
by ``torchrun`` run the same code (``runtime/distributed.py``). ``OMP_NUM_THREADS`` defaults to
the CPU count divided among the ranks. Rank 0 writes the results file, the progress line and
the rejections; the other ranks only compute (``runtime/lockstep.py`` brings their results to
rank 0).

The launcher only waits. When a rank exits with a failure (any code but 0 or 3) it says which,
stops the others (SIGTERM, then SIGKILL after ``grace_s``) and exits with that rank's code — a
rank that fails while the others wait for it in a collective never hangs the job. Otherwise it
exits with rank 0's code. On Linux a rank also dies with the launcher. Ctrl-C reaches the
ranks too (same process group): rank 0 reports what was written, the launcher stops whatever is
left and exits 130.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from deepinfer.artifacts.plan_dir import read_plan

__all__ = ["free_port", "is_rank_process", "launch_ranks", "plan_world_size"]

SUCCESS_CODES = (0, 3)  # 3: some lines rejected (rank 0 decides), not a rank failure
POLL_S = 0.05
CAUSE_WAIT_S = 3.0  # how long a rank that failed with 1 waits for a peer with a cause (_wait)


def is_rank_process() -> bool:
    """True in a process started as one rank of several (torchrun's environment is set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def plan_world_size(plan_dir: str | Path) -> int:
    """``rank_groups.world_size`` of a plan (PlanError if the plan directory is unusable)."""
    return int(read_plan(plan_dir)["rank_groups"]["world_size"])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (rank 0's store binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_ranks(argv: list[str], world_size: int, *, grace_s: float = 5.0) -> int:
    """Run ``deepinfer-run argv`` as ``world_size`` rank processes; returns the exit code."""
    port = free_port()
    threads = str(max(1, (os.cpu_count() or 1) // world_size))
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("OMP_NUM_THREADS", threads)
        procs.append(subprocess.Popen([sys.executable, "-m", "deepinfer.runtime.cli", *argv],
                                      env=env, preexec_fn=_die_with_parent))
    try:
        return _wait(procs, grace_s)
    except KeyboardInterrupt:  # the ranks got it too: give rank 0 time to report, then stop
        try:
            _wait_all(procs, grace_s)
        except KeyboardInterrupt:
            pass
        _stop(procs, grace_s)
        return 130


def _wait(procs: list[subprocess.Popen], grace_s: float) -> int:
    """Rank 0's code once all exit with success; the first failure's code otherwise."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c is not None and c not in SUCCESS_CODES]
        if failed and all(codes[r] == 1 for r in failed):
            # maybe a rank whose peer died: the peer (the cause) may still be exiting
            codes = _wait_for_cause(procs, CAUSE_WAIT_S)
            failed = [r for r, c in enumerate(codes) if c is not None and c not in SUCCESS_CODES]
        if failed:  # prefer a cause over a rank whose peer died (1)
            rank = min(failed, key=lambda r: (codes[r] == 1, r))
            print(f"deepinfer-run: rank {rank} of {len(procs)} failed (exit code "
                  f"{codes[rank]}); stopping the other ranks", file=sys.stderr)
            _stop(procs, grace_s)
            return _as_exit_code(codes[rank])
        if all(c is not None for c in codes):
            return int(codes[0])
        time.sleep(POLL_S)


def _wait_for_cause(procs: list[subprocess.Popen], timeout_s: float) -> list[int | None]:
    """Exit codes after waiting up to timeout_s for a rank to fail with another code than 1
    (or for all to exit): a rank that fails at start-up exits after its peers have seen the
    closed connection and failed with 1."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        cause = any(c is not None and c != 1 and c not in SUCCESS_CODES for c in codes)
        if cause or all(c is not None for c in codes) or time.monotonic() >= deadline:
            return codes
        time.sleep(POLL_S)


def _wait_all(procs: list[subprocess.Popen], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(POLL_S)


def _stop(procs: list[subprocess.Popen], grace_s: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGKILL when the launcher dies (even by
    SIGKILL), so no rank outlives it waiting in a collective. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _as_exit_code(code: int) -> int:
    """A child's return code as ours: killed by signal N (negative) -> 128 + N."""
    return 128 - code if code < 0 else code
