"""A complete agent loop with chathistory, no network: a scripted fake model
that asks for a tool, gets its result, answers; the history is reduced by a
context window, stored in SQLite, and the conversation survives a restart.

    python examples/agent_loop.py [path/to/chathistory.db]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from chathistory import ContextWindow, HistoryProvider, Message, Session, open_store


def fake_model(prompt: list[Message]) -> Message:
    """A scripted model: asks for the weather once per question, then answers."""
    last = prompt[-1]
    if last.role == "tool":
        result = last.tool_results[0].text
        return Message.assistant(f"The weather is {result}.")
    question = last.text
    city = question.rsplit(" ", 1)[-1].rstrip("?")
    return Message.assistant("", [{"id": f"call_{abs(hash(question)) % 10**8}",
                                   "name": "get_weather", "arguments": {"city": city}}])


def run_tool(call_name: str, arguments: dict[str, str]) -> str:
    return {"Paris": "sunny, 18C", "Oslo": "snow, -3C"}.get(arguments["city"], "unknown")


def turn(provider: HistoryProvider, session: Session, user_text: str) -> str:
    """One user turn: call the model until it answers without a tool call."""
    new = [Message.user(user_text)]
    while True:
        prompt = provider.before_run(session, new)
        reply = fake_model(prompt)
        responses = [reply]
        for call in reply.tool_calls:
            responses.append(Message.tool_result(call.id, run_tool(call.name, call.arguments),
                                                 name=call.name))
        provider.after_run(session, prompt, responses)
        if not reply.tool_calls:
            return reply.text
        new = []  # the tool results are stored; the next call continues from history


def main(db: str) -> dict[str, object]:
    store = open_store(f"sqlite:///{db}")
    provider = HistoryProvider(store, policy=ContextWindow(200, pin_tokens=40))
    session = provider.new_session()
    provider.after_run(session, [Message.system("You report the weather.")], [])
    answers = [turn(provider, session, f"What's the weather in {city}?")
               for city in ("Paris", "Oslo", "Paris", "Oslo", "Paris", "Oslo")]
    saved = session.to_dict()  # e.g. in a cookie or a job queue
    store.close()

    # a new process: reopen the store, restore the session, continue
    store = open_store(f"sqlite:///{db}")
    provider = HistoryProvider(store, policy=ContextWindow(200, pin_tokens=40))
    session = Session.from_dict(saved)
    answers.append(turn(provider, session, "What's the weather in Paris?"))
    stored = store.range(session.id)
    live = store.range(session.id, include_marked=False)
    store.close()
    return {"answers": answers, "stored": len(stored), "live": len(live),
            "marked": len(stored) - len(live)}


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "chat.db")
    print(json.dumps(main(path), indent=2))
