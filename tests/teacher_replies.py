"""Scripted teacher replies for the stand-in (helpers, no tests): one rule per role, matched on its system prompt."""

from __future__ import annotations

from typing import Any

FENCE = "```"
PLANNER, REFLECTOR, ANSWERER, VERIFIER = ("You are the PLANNER", "You are the REFLECTOR", "You are the ANSWERER",
                                          "You are the VERIFIER")


def agent(tool: str) -> str:
    return f"You are the {tool} AGENT"


def plan_reply(steps: list[str], plan: str = "1. Compute the pieces with code. 2. Check and answer.") -> str:
    return (f"<think>I will split the work into small computations.</think>\n<plan>{plan}</plan>\n"
            "<steps>\n" + "\n".join(steps) + "\n</steps>")


def code_reply(expr: str = "6 * 7") -> str:
    return (f"<think>Run the computation in the sandbox.</think>\n<argument>\n{FENCE}py\nprint({expr})\n{FENCE}\n"
            "</argument>")


def reflect_reply(rating: str = "good") -> str:
    return (f"<think>Progress check.</think>\n<rating>{rating}</rating>\n<reflection>Information conflict: "
            f"{rating}. Tool effectiveness: {rating}. Trajectory monitoring: {rating}.</reflection>")


def answer_reply(answer: str = "42") -> str:
    return f"<think>The computations agree on {answer}.</think>\n<answer>{answer}</answer>"


def verify_reply(score: int) -> str:
    return (f"<think>Re-derive the value.</think>\n<check>The code printed the value and it fits the question."
            f"</check>\n<score>{score}</score>")


def rule(match: str, content: str, times: int = -1, delay: float = 0.0) -> dict[str, Any]:
    out: dict[str, Any] = {"match": match, "content": content, "times": times}
    if delay:
        out["delay"] = delay
    return out


def code_run_rules(n_code: int = 5, scores: tuple[int, ...] = (4,)) -> list[dict[str, Any]]:
    """A run with ``n_code`` code calls, then one verification per score (earlier ones used once each)."""
    steps = [f"code: compute part {i + 1}" for i in range(n_code)] + ["answer: the parts give the result"]
    rules = [rule(PLANNER, plan_reply(steps)), rule(agent("code"), code_reply()), rule(REFLECTOR, reflect_reply()),
             rule(ANSWERER, answer_reply())]
    rules += [rule(VERIFIER, verify_reply(s), times=1) for s in scores[:-1]]
    rules.append(rule(VERIFIER, verify_reply(scores[-1])))
    return rules
