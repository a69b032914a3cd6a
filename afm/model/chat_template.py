"""Gemma's chat format, stated here rather than taken from a hub.

A turn is ``<start_of_turn>ROLE\\nCONTENT<end_of_turn>\\n`` with roles ``user`` and ``model`` (an ``assistant``
message is a ``model`` turn); Gemma has no system role, so a system message is put at the head of the first user
turn, followed by a blank line. The text starts with ``<bos>``; a generation prompt opens a ``model`` turn.
A turn of any other role (``tool``) is written under its own name: Gemma was not trained on one, and afm's CoA
format keeps observations inside the assistant text.
"""

from __future__ import annotations

GEMMA_TURN_START = "<start_of_turn>"
GEMMA_TURN_END = "<end_of_turn>"

GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set turns = messages -%}{%- set prefix = '' -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set turns = messages[1:] -%}"
    "{%- if turns and turns[0]['role'] == 'user' -%}{%- set prefix = messages[0]['content'] | trim + '\n\n' -%}"
    "{%- else -%}{{ '<start_of_turn>user\n' + messages[0]['content'] | trim + '<end_of_turn>\n' }}{%- endif -%}"
    "{%- endif -%}"
    "{%- for m in turns -%}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\n' }}"
    "{%- if loop.first -%}{{ prefix }}{%- endif -%}"
    "{{ m['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
