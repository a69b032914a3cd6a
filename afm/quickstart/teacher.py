"""A rule-based teacher model for the demo world, behind the OpenAI-compatible chat API.

``afm data distill`` drives its multi-agent teacher (planner, tool agents, reflector, answerer, verifier; see
:mod:`afm.data.teacher.roles`) against an OpenAI-compatible endpoint. On a laptop there is no LLM to put there, so
this module serves one that knows how to solve :mod:`afm.quickstart.world`: it reads the role from the system prompt,
the question, the current step and the work so far from the user message, and answers in the role's fields.
It reads facts only from the observations it is shown (never from the world's answer key), so its trajectories are
the tools' evidence, and it makes the mistakes a student makes — with probability ``mistake_rate`` the code agent
copies an operand wrongly, and with ``miss_rate`` the verifier accepts a wrong answer — so that the verifier's
re-plans give self-corrected runs to upsample, and the SFT quality filter has wrong runs to drop. With
``shortcut_rate`` (0 unless asked: the teacher-shortcut world of :mod:`afm.quickstart.world`) it reads a town's
census page, the top search result, instead of the town's own page (the shortcut RL removes). Mistakes and
shortcuts are drawn from a hash of (seed, question, attempt), so a rerun writes the same trajectories.

    with TeacherModel(seed=0) as teacher:      # a thread on 127.0.0.1; teacher.base_url = http://127.0.0.1:PORT/v1
        ...
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from afm.quickstart.profile import TEACHER_MISS_RATE, TEACHER_MISTAKE_RATE
from afm.quickstart.world import YEAR, census_slug, slug

_Q = re.compile(r"^Question: (.*)$", re.MULTILINE)
_STEP = re.compile(r"Current step \((\w+)\): (.*)")
_ARITH = re.compile(r"Compute (\d+)\*(\d+)\+(\d+)\.")
_LOOKUP = re.compile(r"What is the population of (.+?)\?")
_MULTI = re.compile(r"What is the founding year of the birthplace of (.+?)\?")
_CALC = re.compile(r"How many years before (\d+) was the founding of (.+?)\?")
_STDOUT = re.compile(r"\[STDOUT:BEGIN\]\n(.*?)\n?\[STDOUT:END\]", re.DOTALL)
_CODE = re.compile(r"print\((\d+)\*(\d+)\+(\d+)\)")


def _chance(seed: int, *key: Any) -> float:
    digest = hashlib.sha256(json.dumps([seed, *key]).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def _observations(history: str) -> list[str]:
    return re.findall(r"<observation>\n?(.*?)\n?</observation>", history, re.DOTALL)


class Solver:
    """The role replies for one world (stateless: everything comes from the request)."""

    def __init__(self, seed: int = 0, mistake_rate: float = TEACHER_MISTAKE_RATE,
                 miss_rate: float = TEACHER_MISS_RATE, shortcut_rate: float = 0.0) -> None:
        self.seed, self.mistake_rate, self.miss_rate = seed, mistake_rate, miss_rate
        self.shortcut_rate = shortcut_rate

    # -- reading the request --------------------------------------------------------------------------------
    @staticmethod
    def role(system: str) -> str:
        m = re.match(r"You are the (\w+)(?: AGENT)?", system)
        word = m.group(1) if m else ""
        if "AGENT of a research team" in system.split("\n", 1)[0]:
            return f"{word}_agent"
        return word.lower()

    @staticmethod
    def family(question: str) -> str:
        for name, rx in (("arith", _ARITH), ("lookup", _LOOKUP), ("multihop", _MULTI), ("calc", _CALC)):
            if rx.search(question):
                return name
        return "unknown"

    # -- facts read from the work so far ------------------------------------------------------------------------
    @staticmethod
    def _stdout(history: str) -> str | None:
        outs = [m.group(1).strip() for obs in _observations(history) for m in [_STDOUT.search(obs)] if m]
        return outs[-1] if outs else None

    @staticmethod
    def _find(history: str, pattern: str) -> re.Match | None:
        for obs in reversed(_observations(history)):
            m = re.search(pattern, obs)
            if m:
                return m
        return None

    def _answer_from(self, question: str, history: str) -> str | None:
        fam = self.family(question)
        if fam in ("arith", "calc"):
            return self._stdout(history)
        if fam == "lookup":
            town = _LOOKUP.search(question).group(1)
            # the current page, or in the shortcut world the census page the hurried teacher read instead
            m = self._find(history, rf"{re.escape(town)} is a town in \w+\. Its population (?:is|was) (\d+)")
            return m.group(1) if m else None
        if fam == "multihop":
            town = self._birthplace(question, history)
            m = self._find(history, rf"{re.escape(town)} is a town in \w+, founded in (\d+)") if town else None
            return m.group(1) if m else None
        return None

    def _birthplace(self, question: str, history: str) -> str | None:
        person = _MULTI.search(question).group(1)
        m = self._find(history, rf"{re.escape(person)} was an? \w+ born in (.+?)\.")
        return m.group(1) if m else None

    def _expected(self, question: str, history: str) -> str | None:
        """What the verifier recomputes: arithmetic from the question itself, facts from the evidence."""
        m = _ARITH.search(question)
        if m:
            a, b, c = map(int, m.groups())
            return str(a * b + c)
        m = _CALC.search(question)
        if m:
            year = self._find(history, rf"{re.escape(m.group(2))} is a town in \w+, founded in (\d+)")
            return str(int(m.group(1)) - int(year.group(1))) if year else None
        return self._answer_from(question, history)

    # -- roles --------------------------------------------------------------------------------------------------
    def planner(self, question: str, history: str, user: str) -> str:
        fam = self.family(question)
        replan = "double check scored" in user or "rated the progress poor" in user
        if fam == "arith":
            # the expression restated right after the question, after the same word: each later copy (plan, the
            # tool agent's think, the program) then has a nearby source behind a matching anchor, as the town
            # numbers of the other families do; without it most runs left this family at 0-4%
            # (benchmarks/RESULTS.md, 2026-11-26 afternoon)
            expr = "{}*{}+{}".format(*_ARITH.search(question).groups())
            think, plan = f"Compute {expr} with code.", f"1. Compute {expr} with code. 2. Answer."
            steps = ["code: compute the expression"]
        elif fam == "lookup":
            town = _LOOKUP.search(question).group(1)
            think = f"{town}: I need its population; search for its page, then read it."
            plan = f"1. Search for {town}. 2. Read its page. 3. Answer with the population."
            steps = [f"web_search: find the page of {town}", f"crawl_page: read the page of {town}"]
            if self._find(history, rf"/{re.escape(slug(town))}\.html"):
                plan, steps = f"1. Read the page of {town}. 2. Answer.", steps[1:]
        elif fam == "multihop":
            person = _MULTI.search(question).group(1)
            think = f"{person}: I need where they were born, then when that town was founded."
            plan = f"1. Find the birthplace of {person}. 2. Find when it was founded. 3. Answer."
            steps = [f"wiki_search: find where {person} was born", "wiki_search: find when that town was founded"]
        elif fam == "calc":
            town = _CALC.search(question).group(2)
            think = f"{town}: I need its founding year, then a subtraction with code."
            plan = f"1. Find when {town} was founded. 2. Subtract it from {YEAR} with code. 3. Answer."
            steps = [f"wiki_search: find when {town} was founded", "code: compute the difference"]
            if replan and self._find(history, r"founded in (\d+)"):
                plan, steps = "1. Compute the difference again with code. 2. Answer.", steps[1:]
        else:
            return ("<think>I cannot solve this.</think><plan>1. Answer.</plan>"
                    "<steps>\nanswer: nothing to look up\n</steps>")
        if replan and fam == "arith":
            think = "The check failed: compute it again, copying the numbers carefully."
        steps.append("answer: the evidence then answers the question")
        return f"<think>{think}</think><plan>{plan}</plan><steps>\n" + "\n".join(steps) + "\n</steps>"

    def tool_agent(self, tool: str, question: str, history: str, goal: str) -> str:
        fam = self.family(question)
        attempt = history.count(f"<{tool}>")
        if tool == "code" and fam == "arith":
            a, b, c = _ARITH.search(question).groups()
            if attempt == 0 and _chance(self.seed, question, "copy") < self.mistake_rate:
                a = a[::-1] if a[::-1] != a else str(int(a) + 1)  # a copying slip the verifier can catch
            return f"<think>Compute {a}*{b}+{c}.</think><argument>```py\nprint({a}*{b}+{c})\n```</argument>"
        if tool == "code":  # calc
            m = _CALC.search(question)
            year = self._find(history, rf"{re.escape(m.group(2))} is a town in \w+, founded in (\d+)")
            founded = year.group(1) if year else "0"
            if attempt == 0 and _chance(self.seed, question, "copy") < self.mistake_rate:
                founded = founded[:2] + founded[3] + founded[2]
            return f"<think>Subtract the year.</think><argument>```py\nprint({m.group(1)}-{founded})\n```</argument>"
        if tool == "web_search":
            town = _LOOKUP.search(question).group(1)
            return f"<think>Search for the town.</think><argument>{town} population</argument>"
        if tool == "crawl_page":
            town = _LOOKUP.search(question).group(1)
            page = slug(town)
            # the town's own page: the host, then the page (never a census page's address)
            pattern = rf"(https?://[^\s/]+/{re.escape(page)}\.html)"
            if attempt == 0 and _chance(self.seed, question, "shortcut") < self.shortcut_rate:
                # the hurried teacher (afm.quickstart.world, "The shortcut RL removes"): the top search result, the
                # census page, instead of the town's own page; the same plan, the same copy, another address
                pattern = rf"(https?://[^\s/]+/{re.escape(census_slug(town))}\.html)"
            m = self._find(history, pattern)
            url = m.group(1) if m else f"http://127.0.0.1/{page}.html"
            return f"<think>Read the page.</think><argument>{url}</argument>"
        if tool == "wiki_search":
            if fam == "multihop":
                town = self._birthplace(question, history)
                if town is None:
                    return f"<think>Look up the person.</think><argument>{_MULTI.search(question).group(1)}</argument>"
                return f"<think>{town}: look it up.</think><argument>{town}</argument>"
            town = _CALC.search(question).group(2)
            return f"<think>Look up the town.</think><argument>{town}</argument>"
        return "<think>?</think><argument>?</argument>"

    def reflector(self, question: str, history: str) -> str:
        last = (_observations(history) or [""])[-1]
        good = bool(last.strip()) and "No results" not in last and "error" not in last.lower()
        rating = "good" if good else "poor"
        text = ("The sources agree and each tool returned what the step needed." if good
                else "The last tool call brought no useful evidence.")
        return f"<think>Check the progress.</think><rating>{rating}</rating><reflection>{text}</reflection>"

    def answerer(self, question: str, history: str) -> str:
        answer = self._answer_from(question, history) or "unknown"
        return f"<think>The evidence gives {answer}.</think><answer>{answer}</answer>"

    def verifier(self, question: str, history: str, user: str) -> str:
        m = re.search(r"Suggested answer: (.*?)\n\nDouble-check", user, re.DOTALL)
        suggested = (m.group(1) if m else "").strip()
        expected = self._expected(question, history)
        ok = expected is not None and suggested == expected
        if not ok and _chance(self.seed, question, "miss", suggested) < self.miss_rate:
            ok = True  # the verifier misses the slip: a wrong run the quality filter has to drop
        if ok:
            return (f"<think>Check it.</think><check>The evidence supports {suggested}.</check><score>4</score>")
        fam = self.family(question)
        why = ("the program did not use the numbers of the question" if fam in ("arith", "calc")
               else "the evidence does not support it")
        return f"<think>Check it.</think><check>{suggested} is wrong: {why}.</check><score>1</score>"

    def reply(self, messages: list[dict[str, str]]) -> str:
        """The reply to a chat request of the teacher (system + user; a re-ask appends turns)."""
        system = messages[0]["content"] if messages else ""
        user = next((m["content"] for m in messages if m["role"] == "user"), "")
        q = _Q.search(user)
        question = q.group(1).strip() if q else ""
        history = user.split("Work so far:\n", 1)[-1]
        role = self.role(system)
        if role == "planner":
            return self.planner(question, history, user)
        if role.endswith("_agent"):
            step = _STEP.search(user)
            return self.tool_agent(role.removesuffix("_agent"), question, history, step.group(2) if step else "")
        if role == "reflector":
            return self.reflector(question, history)
        if role == "answerer":
            return self.answerer(question, history)
        if role == "verifier":
            return self.verifier(question, history, user)
        return "<think>?</think>"


class _Handler(BaseHTTPRequestHandler):
    solver: Solver
    # keep-alive: the distillation client reuses its connections (HTTP/1.0 closed each: ~11k connects a run)
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: with Nagle's algorithm on, the second waits for the client's delayed
    # ACK of the first, ~40 ms a reply on a kept-alive connection (44 ms a call measured, most of a distillation's
    # wall time); the demo site does the same
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "afm-demo-teacher", "object": "model"}]})
        else:
            self._json(200 if self.path == "/health" else 404, {"status": "healthy"})

    def do_POST(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            messages = body["messages"]
        except (ValueError, KeyError, TypeError) as exc:
            self._json(400, {"error": {"message": f"bad request: {exc}"}})
            return
        text = self.solver.reply(messages)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        self._json(200, {"id": "chatcmpl-demo", "object": "chat.completion", "model": body.get("model", "teacher"),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                                   "total_tokens": prompt_tokens + len(text.split())}})

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that leaves a kept-alive connection (a distillation cancelled by a signal) is not the teacher's
        # error: no traceback for it
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class TeacherModel:
    """The rule-based teacher served on 127.0.0.1 in a background thread (``base_url`` ends in ``/v1``)."""

    def __init__(self, seed: int = 0, mistake_rate: float = TEACHER_MISTAKE_RATE,
                 miss_rate: float = TEACHER_MISS_RATE, shortcut_rate: float = 0.0) -> None:
        handler = type("Handler", (_Handler,), {"solver": Solver(seed, mistake_rate, miss_rate, shortcut_rate)})
        self.server = _Server(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> TeacherModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
