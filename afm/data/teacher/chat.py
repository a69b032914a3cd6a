"""The teacher's chat calls: :class:`afm.common.chat_client.ChatClient` per role endpoint, with usage for accounting.

Retries (connection errors, timeouts, 408/409/425/429/5xx, malformed bodies) are the shared client's; other HTTP
errors raise :class:`ChatError` at once. When a server omits ``usage`` the counts are estimated (4 characters per
token) and flagged, so cost reports never silently read zero.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from afm.common.chat_client import ChatClient as EndpointClient
from afm.common.chat_client import ChatEndpoint, ChatError
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

    def __init__(self, backoff_s: float | None = None, max_backoff_s: float | None = None) -> None:
        self.backoff_s = backoff_s  # None = the role endpoint's own
        self.max_backoff_s = max_backoff_s
        self._clients: dict[ChatEndpoint, EndpointClient] = {}

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def _client(self, role: RoleConfig) -> EndpointClient:
        endpoint = replace(role.endpoint, api_key=role.api_key or "")  # the key is read now, never stored
        if self.backoff_s is not None:
            endpoint = replace(endpoint, backoff=self.backoff_s)
        if self.max_backoff_s is not None:
            endpoint = replace(endpoint, max_backoff=self.max_backoff_s)
        if endpoint not in self._clients:
            self._clients[endpoint] = EndpointClient(endpoint)
        return self._clients[endpoint]

    async def complete(self, role: RoleConfig, messages: list[dict[str, str]]) -> ChatReply:
        """One chat completion for ``messages`` with ``role``'s endpoint and sampling settings."""
        try:
            reply = await self._client(role).complete(messages, temperature=role.temperature,
                                                      max_tokens=role.max_tokens, **role.extra_body)
        except ChatError as exc:
            where = f"{role.endpoint.base_url} ({role.endpoint.model})"
            raise ChatError(f"{where}: {exc}", exc.status, exc.attempts) from exc
        prompt_tokens, completion_tokens = reply.prompt_tokens, reply.completion_tokens
        if not reply.usage_reported:
            prompt_tokens = _estimate_tokens("".join(m.get("content", "") for m in messages))
            completion_tokens = _estimate_tokens(reply.content)
        return ChatReply(content=reply.content, model=reply.model, prompt_tokens=prompt_tokens,
                         completion_tokens=completion_tokens, latency_s=reply.latency_s, attempts=reply.attempts,
                         finish_reason=reply.finish_reason, usage_estimated=not reply.usage_reported)
