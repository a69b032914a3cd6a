"""The teacher's chat calls: :class:`afm.chat_client.ChatClient` per role endpoint, with usage for accounting.

Retries (connection errors, timeouts, 408/409/425/429/5xx, malformed bodies) are the shared client's; other HTTP
errors raise :class:`ChatError` at once. When a server omits ``usage`` the counts are estimated (4 characters per
token) and flagged, so cost reports never silently read zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from afm.chat_client import ChatClient as EndpointClient
from afm.chat_client import ChatEndpoint, ChatError
from afm.data.teacher.config import RoleConfig

__all__ = ["ChatClient", "ChatError", "ChatReply"]


@dataclass
class ChatReply:
    """One completion: its text and what it cost."""

    content: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int
    finish_reason: str | None = None
    usage_estimated: bool = False


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class ChatClient:
    """One connection pool per role endpoint, shared by all runs (``async with ChatClient() as c``)."""

    def __init__(self, backoff_s: float = 1.0, max_backoff_s: float = 30.0) -> None:
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clients: dict[tuple[str, str, str, float, int], EndpointClient] = {}

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def _client(self, role: RoleConfig) -> EndpointClient:
        key = (role.base_url, role.model, role.api_key, role.timeout_s, role.max_retries)
        if key not in self._clients:
            self._clients[key] = EndpointClient(ChatEndpoint(
                role.base_url, role.model, api_key=role.api_key, timeout=role.timeout_s,
                max_retries=max(0, role.max_retries), backoff=self.backoff_s, max_backoff=self.max_backoff_s,
                max_connections=512))
        return self._clients[key]

    async def complete(self, role: RoleConfig, messages: list[dict[str, str]]) -> ChatReply:
        """One chat completion for ``messages`` with ``role``'s endpoint and sampling settings."""
        try:
            reply = await self._client(role).complete(messages, temperature=role.temperature,
                                                      max_tokens=role.max_tokens, **role.extra_body)
        except ChatError as exc:
            raise ChatError(f"{role.base_url} ({role.model}): {exc}", exc.status, exc.attempts) from exc
        prompt_tokens, completion_tokens = reply.prompt_tokens, reply.completion_tokens
        if not reply.usage_reported:
            prompt_tokens = _estimate_tokens("".join(m.get("content", "") for m in messages))
            completion_tokens = _estimate_tokens(reply.content)
        return ChatReply(content=reply.content, model=reply.model, prompt_tokens=prompt_tokens,
                         completion_tokens=completion_tokens, latency_s=reply.latency_s, attempts=reply.attempts,
                         finish_reason=reply.finish_reason, usage_estimated=not reply.usage_reported)
