"""The multi-agent teacher used for distillation: planner, tool agents, reflector, answerer, verifier.

>>> from afm.data.teacher import load_teacher_config, Teacher, TeacherTask, ChatClient
"""

from afm.data.teacher.chat import ChatClient, ChatError, ChatReply
from afm.data.teacher.config import (
    Budgets,
    ControllerConfig,
    RoleConfig,
    TeacherConfig,
    load_teacher_config,
    teacher_config_from_dict,
    tool_agent_role,
)
from afm.data.teacher.controller import RunFailed, Teacher, TeacherTask, auto_prompt_key, resolve_protocol
from afm.data.teacher.roles import ProtocolError, Step

__all__ = ["Budgets", "ChatClient", "ChatError", "ChatReply", "ControllerConfig", "ProtocolError", "RoleConfig",
           "RunFailed", "Step", "Teacher", "TeacherConfig", "TeacherTask", "auto_prompt_key", "load_teacher_config",
           "resolve_protocol", "teacher_config_from_dict", "tool_agent_role"]
