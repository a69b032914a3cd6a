"""The local RL backend: verl's real trainer without vLLM/SGLang, on a CPU or a GPU.

* :mod:`afm.rl.local.platform` — the ``cpu`` verl platform (``VERL_PLATFORM=cpu``);
* :mod:`afm.rl.local.hf_engine` — batched token-in-token-out sampling from a transformers model;
* :mod:`afm.rl.local.hf_rollout` — ``rollout.name=hf``: server actor, replica and trainer-side adapter;
* :mod:`afm.rl.local.patches` — the two verl functions patched where verl has no extension point;
* :mod:`afm.rl.local.plugin` — the ``verl.plugins`` entry point that registers all of it in every process.
"""
