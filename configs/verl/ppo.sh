# shellcheck shell=bash
# configs/verl/ppo.sh: the original project's MHQA recipe (AFM/train/mhqa_agent/rl/train_ppo_mhqa_agent.sh) as verl
# 0.9.1 Hydra overrides: PPO with GAE and a critic, KL loss 0.001 (low_var_kl), one rollout per prompt.
# Sourced by experiments/common.sh; chosen with ALGORITHM=ppo (experiments/train_ppo_mhqa_agent.sh sets it).
#
#   piece                     override(s)                                                   why
#   advantages                algorithm.adv_estimator=gae                                   value baseline, n=1 works
#   critic                    critic.enable=True, critic.model.path=<the actor's model>     the original passed an
#                             critic.optim.lr=$CRITIC_LR (1e-5), warmup ratio 0.05          undefined $MODEL_PATH here;
#                             critic.use_dynamic_bsz=True, ppo_max_token_len_per_gpu        the SFT policy is the
#                             =$CRITIC_MAX_TOKEN_LEN (100000), no offload                   natural start for both
#   KL to the reference       actor.use_kl_loss=True kl_loss_coef=$KL_COEF (0.001)          keeps the policy near SFT
#                             kl_loss_type=low_var_kl
#   clipping                  actor.clip_ratio_low/high=0.2/0.2                             the original defined
#                                                                                           0.2/0.28 but passed neither
#                                                                                           (verl's default 0.2 applied)
#   no dynamic sampling       algorithm.filter_groups.enable=False                          a GRPO-group notion
#   reward                    REWARD_MANAGER defaults to naive (no DAPO overlong shaping)    the original used EM only

# afm_ppo_overrides: print the PPO overrides, one per line. Reads MODEL (the resolved actor model), CRITIC_LR,
# CRITIC_WARMUP_RATIO, CRITIC_MAX_TOKEN_LEN, KL_COEF, LOSS_AGG_MODE (validated by the caller).
afm_ppo_overrides() {
  printf '%s\n' \
    "algorithm.adv_estimator=gae" \
    "algorithm.use_kl_in_reward=False" \
    "algorithm.filter_groups.enable=False" \
    "actor_rollout_ref.actor.use_kl_loss=True" \
    "actor_rollout_ref.actor.kl_loss_coef=${KL_COEF}" \
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl" \
    "actor_rollout_ref.actor.entropy_coeff=0" \
    "actor_rollout_ref.actor.clip_ratio_low=0.2" \
    "actor_rollout_ref.actor.clip_ratio_high=0.2" \
    "actor_rollout_ref.actor.loss_agg_mode=${LOSS_AGG_MODE}" \
    "actor_rollout_ref.ref.fsdp_config.param_offload=True" \
    "critic.enable=True" \
    "critic.model.path=${MODEL}" \
    "critic.model.enable_gradient_checkpointing=True" \
    "critic.model.use_remove_padding=True" \
    "critic.optim.lr=${CRITIC_LR}" \
    "critic.optim.lr_warmup_steps_ratio=${CRITIC_WARMUP_RATIO}" \
    "critic.use_dynamic_bsz=True" \
    "critic.ppo_max_token_len_per_gpu=${CRITIC_MAX_TOKEN_LEN}" \
    "critic.fsdp.param_offload=False" \
    "critic.fsdp.optimizer_offload=False" \
    "trainer.use_v1=true" \
    "trainer.v1.trainer_mode=${TRAINER_MODE:-sync}"
}
