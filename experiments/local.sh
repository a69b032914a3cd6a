# shellcheck shell=bash
# experiments/local.sh: verl's real trainer without vLLM/SGLang (a description; nothing here runs).
#
#   ROLLOUT_ENGINE=hf   the rollout is afm's transformers server (afm/rl/local): one model copy per trainer rank,
#                       batched token-in-token-out, weights pushed after every step. For a GPU box without vLLM or
#                       SGLang, and for the CPU. TP is 1 (one replica per rank).
#   DEVICE=cpu          train on the CPU: verl's FSDP2 engine over gloo on afm's `cpu` platform (VERL_PLATFORM),
#                       float32, SDPA attention, no offload, one logical "GPU" per trainer rank for Ray.
#   --local             the laptop profile: the CPU device, the hf engine, a few prompts and rollouts, short
#                       responses and a few steps, checkpoints with a Hugging Face copy, a learning rate for the toy
#                       policy (a pretrained MODEL_PATH keeps LR's default, the original's). The code script
#                       defaults to the toy code task and its tiny policy (python -m afm.rl.local.toy, built once
#                       under runs/rl_local/); the web/MHQA scripts need MODEL_PATH and TRAIN_FILES. The real
#                       afm_agent loop, tools, compute_score and DAPO. Every knob can still be set.
#
# Where things run: multi-GPU nodes → vLLM/SGLang (the default); one GPU without them → ROLLOUT_ENGINE=hf;
# no GPU → --local (or the CPU device and the hf engine with your own model and data).
# The profile's values are data in afm/launch/rl.py (LOCAL; `bash experiments/train_dapo_code_agent.sh --help`
# and docs/rl_knobs.md list them); the overrides of the hf engine, the CPU device and SAVE_HF_MODEL are
# afm/launch/rl_overrides.py's (device_overrides, checkpoint_overrides), the toy task's build afm/rl/knobs.py's
# (prepare_local). This file describes them.
