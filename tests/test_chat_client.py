"""The shared OpenAI-compatible chat client against the real stand-in server: replies, usage, retries, errors."""

from __future__ import annotations

import asyncio

import pytest

from afm.common.chat_client import ChatClient, ChatEndpoint, ChatError
from afm.offline.openai_standin import StandIn


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply="fine") as server:
        yield server


def call(llm, messages, **kw):
    async def go():
        client = ChatClient(ChatEndpoint(llm.base_url, "m", api_key="k", backoff=0.01, max_backoff=0.05, **kw))
        try:
            return await client.complete(messages, temperature=0.0, max_tokens=5)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_reply_usage_and_request_body(llm):
    llm.reset()
    llm.queue("two words")
    reply = call(llm, [{"role": "user", "content": "a b c"}])
    assert reply.content == "two words" and reply.attempts == 1
    assert (reply.prompt_tokens, reply.completion_tokens) == (3, 2)
    body = llm.requests()[0]["body"]
    assert body["model"] == "m" and body["max_tokens"] == 5 and body["messages"][0]["content"] == "a b c"


def test_retries_server_errors_and_malformed_bodies(llm):
    llm.reset()
    llm.queue({"status": 503, "content": "busy"}, {"raw": "not json"}, "ok")
    reply = call(llm, [{"role": "user", "content": "x"}])
    assert reply.content == "ok" and reply.attempts == 3


def test_client_errors_fail_at_once_and_retries_are_bounded(llm):
    llm.reset()
    llm.queue({"status": 400, "content": "bad request"})
    with pytest.raises(ChatError) as err:
        call(llm, [{"role": "user", "content": "x"}])
    assert err.value.status == 400 and err.value.attempts == 1
    llm.reset()
    llm.queue(*[{"status": 500, "content": "down"}] * 3)
    with pytest.raises(ChatError, match="after 3 attempt") as err:
        call(llm, [{"role": "user", "content": "x"}], retries=2)
    assert err.value.status == 500


def test_check_rejects_replies_like_failed_attempts(llm):
    async def go(check):
        client = ChatClient(ChatEndpoint(llm.base_url, "m", backoff=0.01, retries=1))
        try:
            return await client.complete([{"role": "user", "content": "x"}], check=check)
        finally:
            await client.aclose()

    llm.reset()
    llm.queue("  ", "a verdict")
    assert asyncio.run(go(lambda c: None if c.strip() else "answered with an empty message")).attempts == 2
    llm.reset()
    llm.queue("no", "still no")
    with pytest.raises(ChatError, match="no verdict after 2 attempt"):
        asyncio.run(go(lambda c: "no verdict"))


def test_timeout_is_retried_then_reported(llm):
    llm.reset()
    llm.queue({"delay": 2.0, "content": "late"}, {"delay": 2.0, "content": "late"})
    with pytest.raises(ChatError, match="timed out"):
        call(llm, [{"role": "user", "content": "x"}], timeout_s=0.3, retries=1)
