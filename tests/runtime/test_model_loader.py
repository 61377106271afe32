"""Model loading from a checkpoint directory and the engram token map."""

import pytest
import torch

from deepinfer.runtime.model_loader import engram_token_map, load_model
from deepinfer.runtime.weights import write_checkpoint


@pytest.fixture(scope="module")
def tiny():
    return load_model("builtin:tiny", "synthetic", seed=0)


def test_checkpoint_directory_loads_the_same_model(tiny, tmp_path):
    ckpt = write_checkpoint("builtin:tiny", tmp_path / "ckpt", seed=0)
    assert (ckpt / "tokenizer.json").is_file()
    lm = load_model(str(ckpt))
    got, want = lm.model.state_dict(), tiny.model.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert torch.equal(lm.model.token_map, tiny.model.token_map)


def test_engram_token_map_is_identity_for_tiny_and_checked(tiny):
    assert torch.equal(engram_token_map(tiny.spec, tiny.tokenizer), torch.arange(512))
    bad = tiny.spec.__class__(**{**{f: getattr(tiny.spec, f) for f in
                                     tiny.spec.__dataclass_fields__},
                                 "engram_compressed_vocab_size": 400})
    with pytest.raises(ValueError, match="engram_compressed_vocab_size"):
        engram_token_map(bad, tiny.tokenizer)
