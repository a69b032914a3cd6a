"""``rollout.name=hf``: verl's async rollout served by a transformers model (:class:`HFEngine`), no vLLM/SGLang.

Three pieces, each the counterpart of verl's vLLM classes (``verl/workers/rollout/vllm_rollout/``):

* :class:`HFRolloutServer` — a Ray actor per replica with the server API verl calls (``generate``,
  ``update_weights``, ``wake_up``/``sleep``, KV-cache and abort/resume calls, ``set_global_steps``); token in, token
  out, batched across concurrent requests;
* :class:`HFReplica` — the ``RolloutReplica`` that launches it (registered as ``hf`` in
  ``RolloutReplicaRegistry``): one replica per trainer rank (``tensor_model_parallel_size=1``), on the node and
  accelerator of that rank;
* :class:`HFServerAdapter` — the ``BaseRollout`` living in the trainer worker (registered in verl's
  ``_ROLLOUT_REGISTRY`` as ``("hf", "async")``): verl's checkpoint engine hands it the actor's weights after every
  step and it pushes them to its server in buckets of ``checkpoint_engine.update_weights_bucket_megabytes``.

Devices: on the ``cpu`` platform the model runs on the CPU in ``rollout.dtype`` (the launcher's CPU_PRECISION:
float32 by default); with CUDA it runs on the trainer rank's GPU
in ``rollout.dtype`` and, with ``rollout.free_cache_engine`` (the default), moves to host memory while the trainer
updates (``sleep``) and back for generation (``wake_up``), so one GPU holds either the trainer's working set or the
rollout's, as with vLLM's sleep mode.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import ray
import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.device import get_device_name
from verl.workers.config import HFModelConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, TokenOutput

from afm.rl.local.hf_engine import HFEngine

logger = logging.getLogger(__name__)

SERVER_PREFIX = "hf_"


def _rollout_device() -> str:
    return "cuda" if get_device_name() == "cuda" and torch.cuda.is_available() else "cpu"


def rollout_dtype(configured: Any) -> str:
    """The engine's dtype: ``rollout.dtype`` (verl's default bfloat16), on the CPU too. afm's launcher sets it on the
    CPU from CPU_PRECISION together with the FSDP actor's compute dtype (float32 unless CPU_PRECISION=bf16), so the
    rollout samples in the precision the trainer recomputes its log-probs in."""
    value = str(configured or "bfloat16")
    return {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}.get(value, value)


class HFRolloutServer:
    """The server actor of one ``hf`` replica (see the module docstring)."""

    def __init__(self, config: Any, model_config: Any, rollout_mode: RolloutMode, replica_rank: int,
                 node_rank: int = 0, cuda_visible_devices: str | None = None, **_: Any) -> None:
        if cuda_visible_devices:
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.rollout_mode = rollout_mode
        self.replica_rank = replica_rank
        self.node_rank = node_rank
        self.engine: HFEngine | None = None
        self.global_steps: int | None = None
        self.weight_version = 0
        self._pending_weights = 0
        self._gate = asyncio.Event()
        self._gate.set()
        self.asleep = False

    async def launch_server(self, **_: Any) -> None:
        """Load the model (the trainer's starting weights; every step's push replaces them)."""
        device = _rollout_device()
        dtype = rollout_dtype(getattr(self.config, "dtype", None))
        override = dict(getattr(self.model_config, "override_config", None) or {})
        max_len = int(getattr(self.config, "max_model_len", None) or
                      (int(self.config.prompt_length) + int(self.config.response_length)))
        max_seqs = int(getattr(self.config, "max_num_seqs", 0) or 64)
        self.engine = await asyncio.to_thread(
            HFEngine, self.model_config.local_path, device=device, dtype=dtype, max_model_len=max_len,
            max_batch_size=min(max_seqs, 256), seed=int(getattr(self.config, "seed", 0) or 0) + self.replica_rank,
            attn_implementation=override.get("attn_implementation", "sdpa"),
            trust_remote_code=bool(getattr(self.model_config, "trust_remote_code", False)))
        logger.info("hf rollout replica %d: %s on %s (%s)", self.replica_rank, self.model_config.local_path,
                    device, dtype)
        if os.environ.get("AFM_RL_TRACE_DIR"):
            self._trace({"event": "launch", "weight_version": 0, "checksum": self.engine.checksum()})

    def get_server_address(self) -> tuple[str, int]:
        return f"hf-replica-{self.replica_rank}-node-{self.node_rank}", 0

    # ---- generation -------------------------------------------------------------------------------------------
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, priority: int = 0, **_: Any) -> TokenOutput:
        if image_data is not None or video_data is not None or audio_data is not None:
            raise ValueError("the hf rollout serves text-only models (image/video/audio input given)")
        await self._gate.wait()
        assert self.engine is not None, "launch_server was not called"
        res = await self.engine.generate(prompt_ids, dict(sampling_params))
        return TokenOutput(token_ids=res.ids, log_probs=res.logprobs,
                           stop_reason="aborted" if res.finish == "aborted" else "completed",
                           num_preempted=0,
                           extra_fields={"global_steps": self.global_steps, "finish_reason": res.finish,
                                         "weight_version": self.weight_version})

    # ---- weights ----------------------------------------------------------------------------------------------
    async def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], done: bool = False,
                             global_steps: int | None = None) -> int:
        """Load one bucket of the trainer's weights; ``done`` marks the last one (a new weight version)."""
        assert self.engine is not None
        n = await asyncio.to_thread(self.engine.load_weights, named_tensors)
        self._pending_weights += n
        if done:
            self.weight_version += 1
            if global_steps is not None:
                self.global_steps = global_steps
            logger.info("hf rollout replica %d: %d tensors loaded (version %d)", self.replica_rank,
                        self._pending_weights, self.weight_version)
            self._pending_weights = 0
            self._trace({"event": "weights", "weight_version": self.weight_version,
                         "global_steps": self.global_steps, "checksum": self.engine.checksum(),
                         "busy_s": self.engine.busy_s, "batches": self.engine.batches,
                         "tokens": self.engine.tokens_generated})
        return n

    def _trace(self, record: dict[str, Any]) -> None:
        """Append to ``$AFM_RL_TRACE_DIR/hf_rollout.<replica>.jsonl`` when set (tests compare the checksums)."""
        trace_dir = os.environ.get("AFM_RL_TRACE_DIR")
        if not trace_dir:
            return
        path = Path(trace_dir) / f"hf_rollout.{self.replica_rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            # the Ray node the replica (and its trainer rank: the server is pinned there) runs on, for multi-node checks
            f.write(json.dumps({**record, "replica": self.replica_rank, "time": time.time(),
                                "node_id": ray.get_runtime_context().get_node_id()}) + "\n")

    def weights_checksum(self) -> str:
        """SHA-256 of the served weights (tests compare it with the trainer's)."""
        assert self.engine is not None
        return self.engine.checksum()

    def stats(self) -> dict[str, Any]:
        assert self.engine is not None
        return {"batches": self.engine.batches, "batch_sizes": list(self.engine.batch_sizes),
                "tokens": self.engine.tokens_generated, "busy_s": self.engine.busy_s, "weight_version": self.weight_version,
                "global_steps": self.global_steps, "device": str(self.engine.device)}

    # ---- memory: only a GPU shared with the trainer has any to give back --------------------------------------
    async def wake_up(self, tags: list[str] | None = None) -> None:
        if self.asleep and self.engine is not None:
            await asyncio.to_thread(self.engine.to, "cuda")
            self.asleep = False

    async def sleep(self) -> None:
        if (self.engine is not None and self.engine.device.type == "cuda"
                and getattr(self.config, "free_cache_engine", True)):
            await asyncio.to_thread(self.engine.to, "cpu")
            torch.cuda.empty_cache()
            self.asleep = True

    async def clear_kv_cache(self) -> None:
        return None  # no cache outlives a batch

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    # ---- partial rollout --------------------------------------------------------------------------------------
    async def wait_for_requests_to_drain(self) -> None:
        while self.engine is not None and (self.engine.pending() or self.engine._model_lock.locked()):
            await asyncio.sleep(0.005)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Stop the running batch (its rows return with ``stop_reason='aborted'``) and hold new requests."""
        self._gate.clear()
        if self.engine is not None:
            self.engine.abort_running()
            await self.wait_for_requests_to_drain()
        return {"aborted": True}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "reason": "the hf rollout aborts whole batches only"}

    async def resume_generation(self) -> None:
        self._gate.set()

    async def resume_engine_generation(self) -> None:
        self._gate.set()

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def start_profile(self, **_: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """``RolloutReplica`` for ``rollout.name=hf``: one :class:`HFRolloutServer` per replica."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.world_size != 1:
            raise ValueError("rollout.name=hf runs one model copy per trainer rank: set "
                             "rollout.tensor_model_parallel_size, data_parallel_size and "
                             f"pipeline_model_parallel_size to 1 (world size {self.world_size})")
        self.server_class = ray.remote(HFRolloutServer)

    def _server_name(self) -> str:
        if self.is_reward_model:
            return f"{SERVER_PREFIX}server_reward_{self.replica_rank}_0{self.name_suffix}"
        if self.is_teacher_model:
            return f"{SERVER_PREFIX}server_teacher_{self.replica_rank}_0{self.name_suffix}"
        return f"{SERVER_PREFIX}server_{self.replica_rank}_0{self.name_suffix}"

    def rollout_worker_use_gpu(self) -> bool:
        return get_device_name() == "cuda"

    async def launch_servers(self) -> None:
        assert len(self.workers) == 1, f"hf replica expects 1 worker, got {len(self.workers)}"
        resource = "GPU"
        node_id, accel = await self.workers[0].__ray_call__.remote(
            lambda self: (ray.get_runtime_context().get_node_id(),
                          ray.get_runtime_context().get_accelerator_ids().get(resource, [])))
        cuda = ",".join(str(a) for a in accel) if get_device_name() == "cuda" else None
        env = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"} if cuda else {}
        server = self.server_class.options(
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id,
                                                                                             soft=False),
            runtime_env={"env_vars": env}, name=self._server_name(), max_concurrency=self.max_concurrency,
            num_cpus=0,
        ).remote(config=self.config, model_config=self.model_config, rollout_mode=self.rollout_mode,
                 replica_rank=self.replica_rank, node_rank=0, cuda_visible_devices=cuda)
        await server.launch_server.remote()
        self.servers = [server]
        self._server_handle = server
        address, _port = await server.get_server_address.remote()
        self._server_address = address


class HFServerAdapter(BaseRollout):
    """The trainer-side end of an ``hf`` replica: forwards weights and sleep/wake to the server actor."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank if replica_rank == -1 else replica_rank
        self.server_handle: Any = None

    def _server(self) -> Any:
        if self.server_handle is None:
            self.server_handle = ray.get_actor(f"{SERVER_PREFIX}server_{self.replica_rank}_0")
        return self.server_handle

    async def resume(self, tags: list[str]) -> None:
        if self.config.free_cache_engine:
            await self._server().wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.config.free_cache_engine:
            await self._server().sleep.remote()

    @torch.no_grad()
    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                             global_steps: int | None = None, wire_format: str = "named_tensors",
                             **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout takes full tensors (wire_format='named_tensors'), got {wire_format!r}")
        start = time.monotonic()
        limit = int(self.config.checkpoint_engine.update_weights_bucket_megabytes) << 20
        server = self._server()
        bucket: list[tuple[str, torch.Tensor]] = []
        size = sent = 0
        pending: list[Any] = []
        for name, tensor in weights:
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            t = tensor.detach().to("cpu", copy=True)
            bucket.append((name, t))
            size += t.numel() * t.element_size()
            if size >= limit:
                pending.append(server.update_weights.remote(bucket))
                sent += len(bucket)
                bucket, size = [], 0
        if pending:
            await asyncio.gather(*pending)
        await server.update_weights.remote(bucket, done=True, global_steps=global_steps)
        sent += len(bucket)
        logger.info("hf rollout: %d tensors pushed to replica %d in %.3fs", sent, self.replica_rank,
                    time.monotonic() - start)
