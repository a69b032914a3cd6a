"""The local RL backend's parts, without Ray: the hf engine's sampling semantics, weight loading, the verl plugin's
registrations and the patches (which must fail loudly if verl changes under them)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import types

import pytest
import torch

from afm.rl.local import patches
from afm.rl.local.hf_engine import HFEngine, weights_checksum

STOPS = ["</code>", "</answer>"]


@pytest.fixture(scope="module")
def engine(tiny_model):
    return HFEngine(str(tiny_model), max_model_len=256, seed=0)


def _prompt(engine, text: str) -> list[int]:
    return engine.tokenizer.encode(text, add_special_tokens=False)


def _greedy_reference(engine, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """Greedy decoding without cache, batch or padding: the engine must agree with it."""
    ids, lps = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            logits = engine.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            tok = int(logits.argmax())
            lps.append(float(torch.log_softmax(logits, -1)[tok]))
            ids.append(tok)
    return ids[len(prompt):], lps


def test_batched_greedy_equals_unbatched_reference(engine):
    prompts = [_prompt(engine, t) for t in ("Question: what is 6*7?", "x", "<code>\nprint(1)\n</code> and more text")]

    async def go():
        return await asyncio.gather(*[engine.generate(p, {"max_tokens": 12, "temperature": 0, "logprobs": 1,
                                                          "ignore_eos": True}) for p in prompts])

    results = asyncio.run(go())
    assert engine.batch_sizes[-1] == 3  # the three concurrent requests shared one batch
    for p, res in zip(prompts, results, strict=True):
        ref_ids, ref_lps = _greedy_reference(engine, p, 12)
        assert res.ids == ref_ids
        assert res.finish == "length"
        assert res.logprobs == pytest.approx(ref_lps, abs=1e-4)


def test_stop_string_is_kept_and_ends_the_row(engine):
    req = engine.make_request(_prompt(engine, "hi"), {"max_tokens": 40, "stop": ["</code>"]})
    # Force the continuation: a scripted "model" whose next token is always the next one of a target text.
    target = engine.tokenizer.encode("<code>\nprint(6*7)\n</code>\nafter", add_special_tokens=False)

    class Scripted(torch.nn.Module):
        def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache, logits_to_keep=0):
            step = 0 if past_key_values is None else past_key_values + 1
            logits = torch.full((input_ids.shape[0], 1, len(engine.tokenizer)), -1e9)
            logits[:, -1, target[min(step, len(target) - 1)]] = 0.0
            return types.SimpleNamespace(logits=logits, past_key_values=step)

    real = engine.model
    engine.model = Scripted()
    try:
        res = engine._decode([req])[0]
    finally:
        engine.model = real
    text = engine.tokenizer.decode(res.ids)
    assert res.finish == "stop"
    # The row ends with the token that completes the stop string (here `>` merged with the newline after it).
    assert text.rstrip().endswith("</code>") and "after" not in text
    assert "</code>" not in engine.tokenizer.decode(res.ids[:-1])
    assert res.ids == target[: len(res.ids)]  # exactly the sampled ids, nothing trimmed or re-tokenised


def test_eos_max_tokens_and_room(engine):
    eos = sorted(engine.eos_ids)[0]
    req = engine.make_request([1, 2, 3], {"max_tokens": 10_000})
    assert req.max_tokens == 256 - 3  # capped by max_model_len
    assert eos in req.stop_ids and eos not in engine.make_request([1], {"ignore_eos": True}).stop_ids
    with pytest.raises(ValueError, match="no room"):
        engine.make_request(list(range(256)), {})


def test_sampling_follows_temperature_and_top_k(engine):
    prompt = _prompt(engine, "Question:")

    async def go(params, n=24):
        return await asyncio.gather(*[engine.generate(prompt, dict(params)) for _ in range(n)])

    top1 = asyncio.run(go({"max_tokens": 1, "temperature": 1.0, "top_k": 1}))
    greedy = asyncio.run(go({"max_tokens": 1, "temperature": 0}, 1))[0].ids
    assert {tuple(r.ids) for r in top1} == {tuple(greedy)}
    hot = asyncio.run(go({"max_tokens": 1, "temperature": 5.0}))
    assert len({tuple(r.ids) for r in hot}) > 1


def test_samples_do_not_depend_on_how_requests_were_batched(tiny_model):
    """Seeded sampling belongs to the request: the same requests sampled in one batch, or one at a time in another
    order, give the same samples (identical prompts are interchangeable: the same multiset), and a request's own
    ``seed`` fixes its ids. On a busy machine multi-turn rollouts reach the engine at other times and in other
    groups than on an idle one; with one shared generator that alone changed a seeded RL run."""
    texts = ["Question:", "Question:", "Question:", "x y", "<code>\nprint(1)"]
    params = {"max_tokens": 8, "temperature": 1.0, "ignore_eos": True}

    def sample(order: list[int], together: bool) -> list[tuple[int, ...]]:
        engine = HFEngine(str(tiny_model), max_model_len=256, seed=3)
        prompts = [_prompt(engine, texts[i]) for i in order]

        async def go():
            if together:
                return await asyncio.gather(*[engine.generate(p, dict(params)) for p in prompts])
            return [await engine.generate(p, dict(params)) for p in prompts]

        results = asyncio.run(go())
        assert max(engine.batch_sizes) == (len(order) if together else 1)
        by_text: dict[str, list[tuple[int, ...]]] = {}
        for i, r in zip(order, results, strict=True):
            by_text.setdefault(texts[i], []).append(tuple(r.ids))
        return sorted((t, tuple(sorted(v))) for t, v in by_text.items())

    one_batch = sample([0, 1, 2, 3, 4], together=True)
    assert one_batch == sample([4, 3, 2, 1, 0], together=False) == sample([3, 0, 4, 1, 2], together=True)
    assert len(set(dict(one_batch)["Question:"])) > 1  # identical prompts still get different draws
    engine = HFEngine(str(tiny_model), max_model_len=256, seed=3)
    seeded = {**params, "seed": 11}
    p = _prompt(engine, "Question:")
    first = asyncio.run(engine.generate(p, dict(seeded))).ids
    assert asyncio.run(engine.generate(p, dict(seeded))).ids == first  # vLLM's per-request seed


def test_prefill_projects_only_the_last_position(engine):
    """The LM head runs on one position per row, at prefill too: a [B, prompt, vocab] logits tensor is 5 GB for
    64 prompts of 256 tokens with a 152k vocabulary (bench_hf_rollout's Qwen2.5 shape)."""
    widths: list[int] = []
    hook = engine.model.get_output_embeddings().register_forward_hook(lambda m, i, o: widths.append(o.shape[1]))
    try:
        req = engine.make_request(_prompt(engine, "Question: what is 6*7? Think step by step."),
                                  {"max_tokens": 3, "temperature": 0, "ignore_eos": True})
        engine.run_batch([req])
    finally:
        hook.remove()
    assert len(widths) == 3 and set(widths) == {1}


def test_sampled_logprobs_are_the_tempered_distribution(engine):
    prompt = _prompt(engine, "Question:")
    res = asyncio.run(engine.generate(prompt, {"max_tokens": 4, "temperature": 0.7, "logprobs": 1,
                                               "ignore_eos": True}))
    ids = list(prompt)
    with torch.no_grad():
        for tok, lp in zip(res.ids, res.logprobs, strict=True):
            logits = engine.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            assert lp == pytest.approx(float(torch.log_softmax(logits / 0.7, -1)[tok]), abs=1e-4)
            ids.append(tok)


def test_load_weights_moves_the_served_model(engine, tiny_model):
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    before = engine.checksum()
    assert before == weights_checksum(other)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.01)
    # Trainer names include both names of the tied embedding; a wrong name or shape is an error, not a skip.
    n = engine.load_weights(other.state_dict().items())
    assert n == len(other.state_dict())
    assert engine.checksum() == weights_checksum(other) != before
    with pytest.raises(KeyError, match="does not have"):
        engine.load_weights([("not.a.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match="shape"):
        engine.load_weights([("model.norm.weight", torch.zeros(3))])


def test_a_bf16_engine_samples_and_takes_float32_weights(tiny_model):
    """CPU_PRECISION=bf16: the rollout's dtype is rollout.dtype (the launcher sets it on the CPU); a bfloat16 engine
    samples, its log-probs are the tempered distribution of its own bfloat16 logits, and the trainer's float32 push
    lands as the bfloat16 of those weights."""
    from transformers import AutoModelForCausalLM

    from afm.rl.local.hf_rollout import rollout_dtype

    assert rollout_dtype("float32") == "float32" and rollout_dtype("bf16") == "bfloat16"
    assert rollout_dtype(None) == "bfloat16"  # verl's default: afm's launcher always sets it on the CPU
    engine = HFEngine(str(tiny_model), max_model_len=256, seed=0, dtype=rollout_dtype("bfloat16"))
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    prompt = _prompt(engine, "Question:")
    res = asyncio.run(engine.generate(prompt, {"max_tokens": 4, "temperature": 0.7, "logprobs": 1,
                                               "ignore_eos": True}))
    assert len(res.ids) == 4
    with torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    assert res.logprobs[0] == pytest.approx(float(torch.log_softmax(logits / 0.7, -1)[res.ids[0]]), abs=1e-3)
    other = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.01)
    engine.load_weights(other.state_dict().items())
    served = dict(engine.model.named_parameters())["model.norm.weight"]
    assert torch.equal(served, other.state_dict()["model.norm.weight"].to(torch.bfloat16))


def test_plugin_registers_in_a_fresh_process():
    """Installing afm is enough: `import verl` loads the plugin (entry point), which registers hf lazily."""
    code = (
        "import sys, verl\n"
        "assert 'afm.rl.local.plugin' in sys.modules\n"
        "assert 'verl.workers.rollout.replica' not in sys.modules  # nothing heavy at import\n"
        "from verl.workers.rollout.replica import RolloutReplicaRegistry, get_rollout_replica_class\n"
        "from verl.workers.rollout.base import get_rollout_class\n"
        "print(get_rollout_replica_class('hf').__name__, get_rollout_class('hf', 'async').__name__)\n"
        "from verl.utils import distributed\n"
        "from verl.workers import engine_workers\n"
        "assert engine_workers.initialize_global_process_group_ray is distributed.initialize_global_process_group_ray\n"
        "assert distributed.initialize_global_process_group_ray.__afm_patched__\n"
        "from verl.plugin.platform import get_platform\n"
        "p = get_platform(); print(p.device_name, p.current_device(), p.ray_resource_name(), p.communication_backend_name())\n"
        "import os; print(os.environ.get('VERL_ENGINE_DEVICE'))\n"
    )
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    env.pop("VERL_ENGINE_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["HFReplica", "HFServerAdapter", "cpu", "cpu", "GPU", "gloo", "cuda"]


def test_cpu_process_group_backend():
    """The patched function gives gloo on the cpu platform; verl's own default string would be rejected."""
    code = (
        "import os, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=os.environ['PORT'], RANK='0', WORLD_SIZE='1')\n"
        "from verl.utils.distributed import initialize_global_process_group_ray\n"
        "initialize_global_process_group_ray()\n"
        "print(dist.get_backend())\n"
        "t = __import__('torch').ones(2); dist.all_reduce(t); print(int(t.sum()))\n"
    )
    from afm.common.procs import free_port

    env = {**os.environ, "VERL_PLATFORM": "cpu", "PORT": str(free_port())}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["cpu:gloo", "2"]
    with pytest.raises(ValueError, match="Duplicate device type"):
        torch.distributed.distributed_c10d.BackendConfig("cpu:gloo,cpu:gloo")


def test_a_one_process_group_whose_port_was_taken_moves_to_a_free_one():
    """verl picks the master port, then torch listens on it; when another process took it in between (EADDRINUSE),
    a one-process group starts on a new port (nobody else uses its store); a group of two ranks still fails."""
    code = (
        "import os, socket, torch.distributed as dist\n"
        "taken = socket.socket(); taken.bind(('127.0.0.1', 0)); taken.listen()\n"
        "port = str(taken.getsockname()[1])\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=port, RANK='0', WORLD_SIZE=os.environ['WS'])\n"
        "from verl.utils.distributed import initialize_global_process_group_ray\n"
        "try:\n"
        "    initialize_global_process_group_ray(timeout_second=20)\n"
        "except Exception as exc:\n"
        "    print('failed', 'EADDRINUSE' in str(exc) or 'in use' in str(exc)); raise SystemExit(0)\n"
        "print('started', os.environ['MASTER_PORT'] != port, dist.get_world_size())\n"
    )
    for ws, want in (("1", ["started", "True", "1"]), ("2", ["failed", "True"])):
        env = {**os.environ, "VERL_PLATFORM": "cpu", "WS": ws}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.split() == want, (ws, out.stdout, out.stderr[-2000:])


def test_patches_refuse_a_changed_verl():
    """Each patch checks the verl code it works around; a verl whose code moved makes it fail, not run unpatched."""
    fake = types.ModuleType("fake_distributed")

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return backend or "nccl"  # not verl's "cpu:gloo,{device}:{ccl}" default any more

    fake.initialize_global_process_group_ray = initialize_global_process_group_ray
    with pytest.raises(RuntimeError, match="verl changed under the patch"):
        patches.patch_process_group_backend(fake)

    class ReplayBuffer:
        def __init__(self, trainer_mode, poll_interval: float = 1.0):
            self.poll_interval = poll_interval

    with pytest.raises(RuntimeError, match=r"poll_interval=2\.0"):
        patches.patch_replay_poll_interval(types.SimpleNamespace(ReplayBuffer=ReplayBuffer))


class _ReplayBufferShape:
    """verl 0.9.1's ReplayBuffer constructor and poll, reduced to what the patch relies on."""

    def __init__(self, trainer_mode, trainer_config, max_off_policy_threshold, max_off_policy_strategy,
                 sampler_kwargs, poll_interval: float = 2.0, refill_fn=None):
        self.poll_interval = poll_interval

    def _wait_for_next_poll(self, partition_id, last_debug_time):
        import time

        time.sleep(self.poll_interval)

    def _evict_terminal_groups(self, global_steps, partition_id, eviction_reasons):
        return set(), 0, 0, {}

    def sample(self, global_steps, partition_id, batch_size):  # no refill credit: not verl 0.9.1's loop
        return None, {}


def test_replay_poll_patch(monkeypatch):
    from verl.trainer.ppo.v1 import replay_buffer

    assert replay_buffer.ReplayBuffer.__init__.__afm_patched__  # applied in this process by the plugin
    patches.patch_replay_poll_interval(types.SimpleNamespace(ReplayBuffer=_ReplayBufferShape))
    args = ("sync", {}, None, "drop", {})
    monkeypatch.delenv(patches.REPLAY_POLL_ENV, raising=False)
    assert _ReplayBufferShape(*args).poll_interval == 2.0  # unset: verl's default
    monkeypatch.setenv(patches.REPLAY_POLL_ENV, "0.05")
    assert _ReplayBufferShape(*args).poll_interval == 0.05
    assert _ReplayBufferShape(*args, poll_interval=1.5).poll_interval == 1.5  # an explicit value wins
    assert _ReplayBufferShape(*args, 3.0).poll_interval == 3.0


class _FakeTransferQueue:
    """The three TransferQueue calls the sync ReplayBuffer makes, over a dict: groups of ``n`` trajectories whose
    ``acc`` is the same within a group (what a policy that always or never solves its prompts produces)."""

    def __init__(self, n: int = 2) -> None:
        self.items: dict[str, dict] = {}
        self.n, self.made = n, 0

    def add_groups(self, count: int, acc: float = 1.0) -> None:
        for _ in range(count):
            uid = f"p{self.made}"
            self.made += 1
            self.items[uid] = {"is_prompt": True, "global_steps": 1, "status": "finished"}
            for i in range(self.n):
                self.items[f"{uid}_{i}"] = {"acc": acc}

    def kv_list(self):
        return {"train": {k: dict(v) for k, v in self.items.items()}}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {"extra_fields": [{"reward_extra_info": {"acc": self.items[k]["acc"]}} for k in keys]}

    def kv_clear(self, partition_id, keys):
        for k in keys:
            self.items.pop(k, None)


def _sync_buffer(monkeypatch, cap: int | None):
    from verl.trainer.ppo.v1 import replay_buffer

    fake = _FakeTransferQueue()
    monkeypatch.setattr(replay_buffer, "tq", fake)
    buffer = replay_buffer.ReplayBuffer("sync", {}, None, "drop", {}, poll_interval=0.0, refill_fn=fake.add_groups,
                                        filter_groups_metric="acc", train_batch_size=2, gen_batch_size=1,
                                        max_inflight_gen_batches=2)
    if cap is not None:
        setattr(buffer, patches.REFILL_CAP_ATTR, cap)
    return fake, buffer


def test_dapo_refills_stop_at_max_num_gen_batches(monkeypatch):
    """verl's own sync sampling loop, with groups that never carry a gradient: it refills forever unpatched; with
    max_num_gen_batches=3 and 2 prompts a step it stops after 6 filtered groups, saying what to change."""
    from verl.trainer.ppo.v1 import replay_buffer

    assert replay_buffer.ReplayBuffer._evict_terminal_groups.__afm_patched__  # applied here by the plugin
    fake, buffer = _sync_buffer(monkeypatch, cap=3)
    fake.add_groups(2)
    with pytest.raises(patches.TooManyFilteredGroups, match=r"max_num_gen_batches=3 x data.train_batch_size=2"):
        buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert 6 <= fake.made <= 6 + 2 * 2  # the cap, plus at most the refills already in flight

    # a mixed group (one right, one wrong) carries a gradient: sampling returns as verl's does
    fake, buffer = _sync_buffer(monkeypatch, cap=3)
    fake.add_groups(1, acc=1.0)
    fake.items["p0_1"]["acc"] = 0.0
    fake.add_groups(1, acc=1.0)
    fake.items["p1_0"]["acc"] = 0.0
    batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert len(batch.keys) == 4 and fake.made == 2  # both groups' trajectories, no refill


class _TrainerShape:
    """verl 0.9.1's PPOTrainer._build_replay_buffer, reduced to what the patch relies on."""

    def __init__(self, config) -> None:
        self.config = config

    def _build_replay_buffer(self):
        filter_groups = self.config.algorithm.get("filter_groups", None)  # noqa: F841 - the patch checks the name
        return types.SimpleNamespace()


def test_trainer_gives_the_buffer_max_num_gen_batches():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import trainer_base

    assert trainer_base.PPOTrainer._build_replay_buffer.__afm_patched__  # applied here by the plugin
    patches.patch_build_replay_buffer(types.SimpleNamespace(PPOTrainer=_TrainerShape))
    on = OmegaConf.create({"algorithm": {"filter_groups": {"enable": True, "max_num_gen_batches": 10}}})
    off = OmegaConf.create({"algorithm": {"filter_groups": {"enable": False, "max_num_gen_batches": 10}}})
    assert getattr(_TrainerShape(on)._build_replay_buffer(), patches.REFILL_CAP_ATTR) == 10
    assert not hasattr(_TrainerShape(off)._build_replay_buffer(), patches.REFILL_CAP_ATTR)
    with pytest.raises(RuntimeError, match="verl changed under the patch"):
        patches.patch_replay_refill_cap(types.SimpleNamespace(ReplayBuffer=_ReplayBufferShape))


def test_dapo_refill_cap_zero_keeps_verl_behaviour(monkeypatch):
    """MAX_NUM_GEN_BATCHES=0 (or a buffer the trainer did not configure): refills go on past any cap."""
    for cap in (0, None):
        fake, buffer = _sync_buffer(monkeypatch, cap=cap)
        fake.add_groups(2)
        real_add = fake.add_groups

        def add(count, real_add=real_add, fake=fake):
            # after 40 filtered groups (far past any cap) a refill finally brings two mixed groups
            real_add(count)
            if fake.made > 40:
                for uid in [k for k, v in fake.items.items() if v.get("is_prompt")][-2:]:
                    fake.items[f"{uid}_0"]["acc"] = 0.0

        buffer.refill_fn = add
        batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
        assert fake.made > 40 and len(batch.keys) == 4
