"""The batched engine (C++ scheduler, paged cache, pipeline) against one-at-a-time forwards.

The oracle runs each prompt alone through the plain model forward: no scheduler, no cache reuse
(every token re-runs the whole sequence from an empty cache), greedy argmax. The engine must
produce the same tokens exactly (the reference backend is bit-reproducible across batch shapes,
see test_model_incremental.py) with chunked prefill, with preemption forced by a tiny block
count, and with the zero-overhead pipeline on and off.
"""

import copy
import dataclasses

import pytest
import torch

from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology
from deepinfer.runtime.api import normalize_prompts
from deepinfer.runtime.decode_graphs import DecodeGraphs
from deepinfer.runtime.engine import Engine
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from deepinfer.runtime.model_loader import load_model
from deepinfer.runtime.plan_loader import load_runtime_plan
from deepinfer.runtime.sampling_params import SamplingParams
from deepinfer.runtime.worker import Worker

NUM_PROMPTS = 16
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "plan"
    p = compile_plan(load_topology("builtin:tiny-cpu"))
    write_plan(out, p, render_report(p), force=False)
    return load_runtime_plan(out)


@pytest.fixture(scope="module")
def loaded(plan):
    return load_model(plan.model_path, plan.weights, seed=0)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(3, 60, (NUM_PROMPTS,), generator=g).tolist()
    return [torch.randint(3, 500, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture(scope="module")
def expected(loaded, prompts):
    model = loaded.model
    out = []
    for ids in prompts:
        seq = list(ids)
        for _ in range(MAX_TOKENS):
            logits = model(ForwardBatch.build([seq], [SequenceCache.empty(model.spec)]),
                           all_logits=False)
            seq.append(int(torch.argmax(logits[0])))
        out.append(seq[len(ids):])
    return out


def with_scheduler(plan, **limits):
    p = copy.deepcopy(plan.plan)
    p["scheduler"].update(limits)
    return dataclasses.replace(plan, plan=p)


def run(plan, loaded, prompts, params, *, pipeline=True, static_decode=False):
    engine = Engine(plan, loaded, pipeline=pipeline)
    if static_decode:  # the CUDA-graph path's buffers and padding, run eagerly on CPU
        engine.graphs = DecodeGraphs(loaded.model, engine.pool, plan.decode_buckets,
                                     engine.max_model_len)
        engine.graphs.capture()
        engine.worker.graphs = engine.graphs
    reqs = normalize_prompts(prompts, params, loaded.tokenizer, engine.max_model_len,
                             vocab_size=loaded.spec.vocab_size,
                             image_token_id=loaded.spec.image_token_id)
    for r in reqs:
        engine.add(r)
    outs = {}
    while engine.has_work():
        for o in engine.step():
            outs[o.request_id] = o
    return [outs[r.request_id] for r in reqs], engine


GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


@pytest.mark.parametrize("pipeline", [True, False])
def test_batched_engine_equals_one_at_a_time(plan, loaded, prompts, expected, pipeline):
    outs, engine = run(plan, loaded, prompts, GREEDY, pipeline=pipeline)
    assert [o.token_ids for o in outs] == expected
    assert all(o.finish_reason == "length" for o in outs)
    assert engine.stats.num_prefill_steps >= 1 and engine.stats.num_decode_steps >= MAX_TOKENS - 1
    assert engine.scheduler.num_free_blocks() == plan.scheduler["num_blocks"] - 1  # all back
    stats = engine.stats.summary()  # host time: step time minus the waits for results
    assert 0 < stats["host_s"] < stats["wall_s"], stats


@pytest.mark.parametrize("limits", [{}, {"num_blocks": 16, "prefill_watermark": 1.0}],
                         ids=["plain", "preempting"])
def test_static_decode_buffers_equal_eager_engine(plan, loaded, prompts, limits, monkeypatch):
    """Decode steps through ``DecodeGraphs`` (static buffers, padding rows up to the bucket,
    sentinel slot and block, the key width of max_model_len; eager on CPU) give the same tokens
    as the plain engine, also with one-token prompts (their first token is a decode-shaped
    step: the engine resets the slot's engram history) and with preemption."""
    sized = with_scheduler(plan, **limits)
    batch = [[7], *prompts[:7], [9]]
    want, _ = run(sized, loaded, batch, GREEDY)
    replays, fed = [], []
    real_run = DecodeGraphs.run

    def counted(self, ids, *rest, **kwargs):
        replays.append((len(ids), self.bucket_for(len(ids))))
        fed.append(kwargs.get("feed") is not None)
        return real_run(self, ids, *rest, **kwargs)

    monkeypatch.setattr(DecodeGraphs, "run", counted)
    got, engine = run(sized, loaded, batch, GREEDY, static_decode=True)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert len(replays) >= MAX_TOKENS - 1
    assert any(bucket > rows for rows, bucket in replays)  # padding rows were exercised
    assert any(fed)  # steps launched behind the one in flight, tokens fed on the device
    if limits:
        assert engine.stats.preemptions > 0
    # one-token prompts only, on slots a finished batch used before: their very first step is
    # decode-shaped and replays a graph, which must start from a fresh engram history
    want = [run(sized, loaded, [ids], GREEDY)[0][0].token_ids for ids in ([7], [9], [5])]
    engine = run(sized, loaded, prompts[:3], GREEDY, static_decode=True)[1]
    replays.clear()
    reqs = normalize_prompts([[7], [9], [5]], GREEDY, loaded.tokenizer, engine.max_model_len,
                             vocab_size=loaded.spec.vocab_size)
    for r in reqs:
        engine.add(r)
    outs = {}
    while engine.has_work():
        outs.update((o.request_id, o.token_ids) for o in engine.step())
    assert [outs[r.request_id] for r in reqs] == want
    assert len(replays) == MAX_TOKENS


def test_static_decode_sampled_with_logprobs_equals_eager_engine(plan, loaded, prompts):
    """Seeded sampling (not greedy) and logprobs through the static decode path, each step
    launched behind the one in flight: the same tokens and logprobs as the eager engine (the
    logprobs are taken at launch, before the next replay reuses the logits buffer)."""
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=20, seed=7, logprobs=2,
                            max_tokens=MAX_TOKENS, ignore_eos=True)
    want, _ = run(plan, loaded, prompts[:6], params)
    got, _ = run(plan, loaded, prompts[:6], params, static_decode=True)
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        assert [(lp.token_id, lp.logprob, lp.top) for lp in a.logprobs] == \
            [(lp.token_id, lp.logprob, lp.top) for lp in b.logprobs]


def test_chunked_prefill_equals_one_at_a_time(plan, loaded, prompts, expected, monkeypatch):
    """Chunks of the prompts, each prefill chunk launched behind the step in flight (its
    tokens are the prompt's: nothing to wait for), give the one-at-a-time tokens."""
    behind = []
    real_launch = Worker.launch

    def launch(self, inputs):
        behind.append((inputs.batch is not None, len(self._launched)))
        return real_launch(self, inputs)

    monkeypatch.setattr(Worker, "launch", launch)
    small = with_scheduler(plan, prefill_chunk_size_tokens=8, max_num_batched_tokens=24)
    outs, engine = run(small, loaded, prompts, GREEDY)
    assert [o.token_ids for o in outs] == expected
    assert engine.stats.num_prefill_steps > NUM_PROMPTS // 2  # prompts really were chunked
    assert any(eager and in_flight for eager, in_flight in behind)  # eager behind eager
    assert all(in_flight <= 1 for _, in_flight in behind)
    behind.clear()
    outs, _ = run(small, loaded, prompts, GREEDY, pipeline=False)
    assert [o.token_ids for o in outs] == expected
    assert not any(in_flight for _, in_flight in behind)


def test_forward_error_of_a_step_in_flight_surfaces(plan, loaded, prompts, monkeypatch):
    """A prefill chunk that fails on the worker thread while the next one is launched behind it
    raises its error from ``step`` (no hang, no silent drop)."""
    calls = []
    real_forward = type(loaded.model).forward

    def forward(self, batch, all_logits=True):
        calls.append(batch.input_ids.shape[0])
        if len(calls) == 2:
            raise RuntimeError("injected forward failure")
        return real_forward(self, batch, all_logits)

    monkeypatch.setattr(type(loaded.model), "forward", forward)
    small = with_scheduler(plan, prefill_chunk_size_tokens=8, max_num_batched_tokens=8)
    with pytest.raises(RuntimeError, match="injected forward failure"):
        run(small, loaded, prompts[:4], GREEDY)
    assert len(calls) >= 2


def test_preemption_by_recompute_equals_one_at_a_time(plan, loaded, prompts, expected):
    # 14 usable blocks of 16 tokens: far less than 16 prompts of up to 66 tokens need.
    tiny = with_scheduler(plan, num_blocks=16, prefill_watermark=1.0)
    outs, engine = run(tiny, loaded, prompts, GREEDY)
    assert engine.stats.preemptions > 0
    assert [o.token_ids for o in outs] == expected


def test_seeded_sampling_is_independent_of_batch(plan, loaded, prompts):
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=1234, max_tokens=MAX_TOKENS,
                            ignore_eos=True)
    alone, _ = run(plan, loaded, [prompts[3]], params)
    batch, _ = run(plan, loaded, prompts[:6], params)
    again, _ = run(plan, loaded, prompts[:6], params)
    assert alone[0].token_ids == batch[3].token_ids
    assert [o.token_ids for o in batch] == [o.token_ids for o in again]
    greedy, _ = run(plan, loaded, [prompts[3]], GREEDY)
    assert alone[0].token_ids != greedy[0].token_ids  # sampling really sampled


def test_outputs_are_copies(plan, loaded, prompts):
    outs, engine = run(plan, loaded, prompts[:2], GREEDY)
    outs[0].token_ids.append(-1)
    assert not engine.live  # nothing retained by the engine after finishing


def test_image_prompt_with_in_memory_embeds(plan, loaded):
    """Multimodal dict prompts (token ids + an image span + precomputed embeddings) through the
    engine, chunked so a chunk boundary would fall inside the span, against the plain model."""
    spec, model = loaded.spec, loaded.model
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 500, (30,), generator=g).tolist()
    ids[6:18] = [spec.image_token_id] * 12
    embeds = torch.randn(12, spec.hidden_size, generator=g).to(torch.bfloat16)
    mask = [6 <= p < 18 for p in range(len(ids))]
    cache, gen = SequenceCache.empty(spec), []
    logits = model(ForwardBatch.build([ids], [cache], [mask], embeds), all_logits=False)
    for _ in range(MAX_TOKENS):
        gen.append(int(torch.argmax(logits[0])))
        logits = model(ForwardBatch.build([[gen[-1]]], [cache]), all_logits=False)
    prompt = {"prompt_token_ids": ids, "images": [{"span": [6, 18], "embeds": embeds}]}
    small = with_scheduler(plan, prefill_chunk_size_tokens=10, max_num_batched_tokens=16)
    with_lp = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=0)
    outs, _ = run(small, loaded, [prompt, prompts_without_images()], with_lp)
    assert outs[0].token_ids == gen
    text_only, _ = run(plan, loaded, [ids], with_lp)
    # The embeddings really were used: the first token's probability moved.
    assert outs[0].logprobs[0].logprob != text_only[0].logprobs[0].logprob


def prompts_without_images():
    return list(range(40, 60))
