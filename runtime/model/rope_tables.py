"""The two RoPE frequency tables of a V4.1 model (model-spec §2.1, §9 item 2)."""

import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.kernels.reference.rope import Yarn, rope_inv_freq


def layer_inv_freq(spec: ModelSpec, compress_ratio: int) -> torch.Tensor:
    """Ratio-0 layers: theta=rope_theta, no YaRN; ratio>0 layers: compress theta + YaRN.

    The same table serves that layer's queries, window KV, compressed latents and indexer Q/K.
    """
    with torch.device("cpu"):  # a real table even while the module tree is built on meta
        if compress_ratio == 0:
            return rope_inv_freq(spec.qk_rope_head_dim, spec.rope_theta)
        yarn = Yarn(spec.rope_factor, spec.rope_original_max_position, spec.rope_beta_fast,
                    spec.rope_beta_slow)
        return rope_inv_freq(spec.qk_rope_head_dim, spec.compress_rope_theta, yarn)
