"""``cpu``: a verl platform that runs the trainer on the CPU (``VERL_PLATFORM=cpu``).

verl 0.9.1 resolves every device call through ``verl.plugin.platform.get_platform()``; this platform answers them
for a machine without an accelerator:

* device module: ``torch.cpu`` plus the CUDA-style calls verl makes on it (memory statistics answer 0 or the host's
  memory, ``empty_cache``/``reset_peak_memory_stats`` do nothing, the RNG is the CPU generator);
* ``current_device()`` is ``"cpu"``, not an index: verl passes it to ``torch.device``/``.to()``, where an int means
  ``cuda:N`` (verl 0.9.1 ``workers/engine/fsdp/transformer_impl.py`` and ``utils/fsdp_utils.py``);
* collectives use gloo;
* the Ray resource is reported as ``"GPU"``: verl's worker groups count only GPU/NPU bundles
  (``single_controller/ray/base.py:229-233``), so the local profile starts Ray with one logical GPU per trainer
  process (``+ray_kwargs.ray_init.num_gpus``) and nothing ever touches CUDA.

The platform is never auto-detected: it is chosen only by ``VERL_PLATFORM=cpu`` (a CPU-only box that forgot to set
it keeps verl's own behaviour and error).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


class _CpuDevice(ModuleType):
    """``torch.cpu`` with the ``torch.cuda``-style calls verl makes on a device module."""

    def __init__(self) -> None:
        super().__init__("afm_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    # device selection and sync
    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    # memory: there is no device memory to manage; statistics answer 0, free/total answer the host's memory
    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        page, total_pages = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_PHYS_PAGES")
        free_pages = os.sysconf("SC_AVPHYS_PAGES")
        return int(page * free_pages), int(page * total_pages)

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    max_memory_allocated = memory_allocated
    memory_reserved = memory_allocated
    max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        return {}

    # random numbers: the CPU generator
    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)


CPU_DEVICE = _CpuDevice()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform for CPU-only training and rollout (see the module docstring)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Nothing reads it on a CPU; a name of our own keeps Ray and verl away from CUDA_VISIBLE_DEVICES.
        return "AFM_CPU_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def cudart(self) -> Any:
        return None

    def is_ipc_supported(self) -> bool:
        return False
