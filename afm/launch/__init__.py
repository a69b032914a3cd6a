"""The launch wing: every launch knob declared once (a settings dataclass per recipe: default, variable, help,
check), read from the environment, checked, and turned into the command a launch script runs or prints.

- :mod:`afm.launch.sft`       the SFT/DPO settings (sft_scripts/) and their afm-sft launch
- :mod:`afm.launch.rl`        the RL settings (experiments/), per-task defaults and profiles as data
- :mod:`afm.launch.rl_overrides` the verl Hydra overrides, one function per group (data, actor, the DAPO/PPO recipe,
                              rollout, device, checkpoint, reward, trainer); afm.rl.knobs checks, resolves and joins them
- :mod:`afm.launch.settings`  the field declaration (``knob``), the checks and the ``--help`` table
- :mod:`afm.launch.names`     the original project's knob names (aliases) and the misspelling check
- :mod:`afm.launch.values`    how values read (numbers, booleans, lists) and the error naming a knob
- :mod:`afm.launch.command`   the printed command (bash quoting) and the logged run
- :mod:`afm.launch.multinode` torchrun's rendezvous and hang settings, and one line saying why a node stopped

Standard library only: the scripts run it with whatever interpreter they found.
"""
