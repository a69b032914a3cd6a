# shellcheck shell=bash
# configs/verl/ppo.sh: the original project's MHQA recipe (AFM/train/mhqa_agent/rl/train_ppo_mhqa_agent.sh) as verl
# 0.9.1 Hydra overrides: PPO with GAE and a critic, a KL loss (low_var_kl), one rollout per prompt.
# Built by afm/launch/rl_overrides.py; chosen with ALGORITHM=ppo (experiments/train_ppo_mhqa_agent.sh sets it).
#
#   piece                     override(s)                                                   why
#   advantages                algorithm.adv_estimator=gae                                   value baseline, n=1 works
#   critic                    critic.enable=True, critic.model.path=<the actor's model>     the original passed an
#                             critic.optim.lr=$CRITIC_LR, warmup ratio $CRITIC_WARMUP_RATIO  undefined $MODEL_PATH here;
#                             critic.use_dynamic_bsz=True, ppo_max_token_len_per_gpu        the SFT policy is the
#                             =$CRITIC_MAX_TOKEN_LEN, no offload                            natural start for both
#   KL to the reference       actor.use_kl_loss=True kl_loss_coef=$KL_COEF                  keeps the policy near SFT
#                             kl_loss_type=low_var_kl
#   clipping                  actor.clip_ratio_low/high=0.2/0.2                             the original defined
#                                                                                           0.2/0.28 but passed neither
#                                                                                           (verl's default 0.2 applied)
#   no dynamic sampling       algorithm.filter_groups.enable=False                          a GRPO-group notion
#   reward                    ALGORITHM=ppo's REWARD_MANAGER: no DAPO overlong shaping      the original used EM only

# The overrides are built in Python, in the launcher's one process: afm/launch/rl_overrides.py (ppo_overrides), with
# the knobs' values from RlSettings (no bash round trip). This file stays as the recipe's description; the knobs'
# values ($CRITIC_LR, $KL_COEF, ...) and what ALGORITHM=ppo changes: docs/rl_knobs.md or
# `ALGORITHM=ppo bash experiments/train_ppo_mhqa_agent.sh --help`.
