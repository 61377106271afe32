"""Model loading from a checkpoint directory, the demo generator and the deepinfer-run CLI."""

import json

import pytest
import torch

from deepinfer.runtime.cli import main as run_main
from deepinfer.runtime.demo import demo_prompts, greedy_generate
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


def test_batched_greedy_equals_one_at_a_time(tiny):
    prompts = demo_prompts()
    batched = greedy_generate(tiny, prompts, max_tokens=6)
    alone = [greedy_generate(tiny, [p], max_tokens=6)[0] for p in prompts]
    assert [r.token_ids for r in batched] == [r.token_ids for r in alone]
    assert all(len(r.token_ids) == 6 and r.finish_reason == "length" for r in batched)


def test_run_cli_writes_json_lines(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert run_main(["--max-tokens", "3", "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [p["id"] for p in demo_prompts()]
    assert all(len(r["token_ids"]) == 3 for r in rows)


@pytest.mark.parametrize("argv, words", [
    (["topology.yaml"], "deepinfer-compile topology.yaml"),
    (["--model", "/no/such/dir"], "file not found"),
    (["--max-tokens", "0"], "--max-tokens"),
])
def test_run_cli_user_errors(argv, words, capsys):
    assert run_main(argv) == 2
    assert words in capsys.readouterr().err
