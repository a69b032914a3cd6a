# shellcheck shell=bash
# configs/verl/dapo.sh: the DAPO recipe as verl 0.9.1 Hydra overrides (described here, built by afm/launch/rl_overrides.py).
#
# verl 0.9.1 has no recipe/ folder: every DAPO piece is a built-in key of the `ppo_trainer` config.
#
#   piece                     override(s)                                                   why
#   group baseline            algorithm.adv_estimator=grpo (rollout.n > 1)                  no critic
#   clip-higher               actor.clip_ratio_low/high=$CLIP_RATIO_LOW/$CLIP_RATIO_HIGH    keeps entropy up
#   dual clip                 actor.clip_ratio_c=$CLIP_RATIO_C (per task)                   bounds negative-adv ratio
#   token-level loss          actor.loss_agg_mode=$LOSS_AGG_MODE (token-level by default)   long responses count per token
#   no KL                     algorithm.use_kl_in_reward=False  actor.use_kl_loss=False     no reference model needed
#   dynamic sampling          algorithm.filter_groups.{enable,metric,max_inflight_gen_batches}
#                             (V1 trainer only: trainer.use_v1=true)                        drops all-0 / all-1 groups
#   overlong reward shaping   reward.reward_manager.name=afm_dapo (verl's dapo manager, registered by afm so that
#                             the reward function also sees the agent loop's fields: afm/rl/reward_manager.py)
#                             +reward.reward_kwargs.{max_resp_len,overlong_buffer_cfg.*}    see afm/launch/rl_overrides.py
#
# filter_groups.metric=acc: our compute_score returns `acc` (the answer alone, 0/1) next to `score` (acc after the
# format rule and penalties). Filtering on acc keeps a group whose answers differ even when every score carries
# an overlong penalty; filtering on score would keep groups that differ only in length penalty.
# max_num_gen_batches: verl 0.9.1's V1 ReplayBuffer no longer reads it and refills filtered groups forever; afm's
# patch (afm/rl/local/patches.py, applied by the verl plugin on every device) stops a step that has filtered
# max_num_gen_batches x data.train_batch_size groups with an error, as the DAPO paper's trainer did (0 = no cap).
# max_inflight_gen_batches bounds the prompt batches generating at once while filtered groups are refilled.

# The overrides are built in Python, in the launcher's one process: afm/launch/rl_overrides.py (dapo_overrides), with
# the knobs' values from RlSettings (no bash round trip). This file stays as the recipe's description; the knobs'
# values ($CLIP_RATIO_*, $LOSS_AGG_MODE, ... and each task's): docs/rl_knobs.md or `bash experiments/<script> --help`.
