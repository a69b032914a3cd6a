"""Data builders: multi-agent distillation into CoA trajectories, the paper's SFT filters, DPO pairs, RL
difficulty selection and the RL parquet (``afm data ...``)."""
