"""Checkpoint loading: name table, synthetic checkpoints, writer and validating reader."""

from deepinfer.artifacts.weight_names import TensorSpec, expected_tensors, is_skipped_name
from deepinfer.runtime.weights.errors import CheckpointError
from deepinfer.runtime.weights.reader import (
    read_checkpoint,
    read_stored_tensors,
    synthetic_stored_tensors,
    synthetic_weights,
    validate_checkpoint,
)
from deepinfer.runtime.weights.synthetic import (
    check_synthetic_size,
    estimated_checkpoint_bytes,
    synthetic_checkpoint_tensors,
    synthetic_tensors,
)
from deepinfer.runtime.weights.writer import write_checkpoint

__all__ = [
    "CheckpointError",
    "TensorSpec",
    "check_synthetic_size",
    "estimated_checkpoint_bytes",
    "expected_tensors",
    "is_skipped_name",
    "read_checkpoint",
    "read_stored_tensors",
    "synthetic_checkpoint_tensors",
    "synthetic_stored_tensors",
    "synthetic_tensors",
    "synthetic_weights",
    "validate_checkpoint",
    "write_checkpoint",
]
