"""deepinfer-make-checkpoint: write a synthetic checkpoint for a config (argument parsing only).

    deepinfer-make-checkpoint CONFIG OUT_DIR [--seed N] [--no-dspark] [--shard-max-bytes B]

CONFIG is a ``config.json`` path (or a directory holding one) or ``builtin:tiny``. User errors
(bad config, existing output directory, a model too big to synthesize) print one line on stderr
and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

from deepinfer.runtime.weights.writer import DEFAULT_SHARD_MAX_BYTES, write_checkpoint

PROG = "deepinfer-make-checkpoint"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Write a deterministic random checkpoint (sharded safetensors, "
        "released tensor names, dtypes and shapes) for a DeepSeek-V4.1 config.")
    parser.add_argument("config", help="config.json path, checkpoint directory, or builtin:tiny")
    parser.add_argument("out_dir", help="directory to create (must not exist, or be empty)")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (default 0)")
    parser.add_argument("--no-dspark", action="store_true",
                        help="leave out the DSpark draft-head tensors (mtp.*)")
    parser.add_argument("--shard-max-bytes", type=int, default=DEFAULT_SHARD_MAX_BYTES,
                        help=f"tensor bytes per shard (default {DEFAULT_SHARD_MAX_BYTES})")
    args = parser.parse_args(argv)
    try:
        out = write_checkpoint(args.config, args.out_dir, seed=args.seed,
                               shard_max_bytes=args.shard_max_bytes,
                               include_dspark=not args.no_dspark)
    except (ValueError, OSError) as exc:  # ConfigError and CheckpointError are ValueErrors
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
