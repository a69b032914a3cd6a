"""The rollout engine: multi-turn CoA trajectories with tools, token-in-token-out, over pluggable backends."""

from afm.agent.backend import Generation, ModelBackend, SamplingParams
from afm.agent.loop import AgentConfig, AgentLoop, ToolRunner, run_trajectory
from afm.agent.record import Segment, ToolCallRecord, Trajectory
from afm.agent.tokens import TokenizerAdapter

__all__ = ["AgentConfig", "AgentLoop", "Generation", "ModelBackend", "SamplingParams", "Segment", "TokenizerAdapter",
           "ToolCallRecord", "ToolRunner", "Trajectory", "run_trajectory"]
