#!/usr/bin/env python3
"""A 24/7 agent loop: one never-ending session, a tool call every turn, and a daemon restart
survived by resuming the same session (its snapshot).

Each turn asks the model for the next step, runs the tool the step names (a calculator or a
clock; the 135M default model rarely writes a well-formed call, so the loop falls back to the
turn's scheduled tool and says so), appends the tool's result to the same session and lets the
model read it. With --spawn it starts its own daemon and kill -9s and restarts it at
--restart-at, checking that the loop goes on in the same session id with its context intact.
Exits non-zero on any failure.
"""
import argparse
import asyncio
import datetime
import re
import sys
import time

import streamd_client as sc
from _common import add_connection_args, connect_target, inter_token_gaps, summary_ms

SYSTEM = ("You are an agent with two tools. Write `calc: <expression>` to compute, or "
          "`clock:` to read the time. Keep every answer short.")
TASKS = ["What is 17 * 23?", "What time is it?", "Add 1024 and 2048.", "What is 99 - 42?",
         "Is it morning or evening now?", "What is 12 squared?"]


def run_tool(text: str, turn: int) -> "tuple[str, str]":
    m = re.search(r"calc:\s*([0-9+\-*/ ().]+)", text)
    if m and m.group(1).strip():
        try:
            return "calc", str(eval(m.group(1), {"__builtins__": {}}))  # digits and operators only
        except Exception as e:  # noqa: BLE001 - a tool error is a result too
            return "calc", f"error: {e}"
    if "clock:" in text:
        return "clock", datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M UTC")
    # scheduled fallback: the same tools, in turn
    if turn % 2:
        return "clock(scheduled)", datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M")
    a, b = 3 + turn, 7 * turn + 1
    return "calc(scheduled)", f"{a} * {b} = {a * b}"


async def retrying(session, what, make):
    """Runs make() and retries after a disconnect, once the session is resumed."""
    for attempt in range(5):
        try:
            return await make()
        except sc.GenerationInterrupted as e:
            print(f"  ! {what} interrupted ({e.code.name}); waiting for the resume", flush=True)
            await session.wait_connected(90)
            print(f"  ! session {session.id} resumed (resume #{session.resumes}, "
                  f"tokens_seen {session.cache.tokens_seen})", flush=True)
    raise RuntimeError(f"{what}: interrupted 5 times")


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_connection_args(p)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--restart-at", type=int, default=3,
                   help="with --spawn: kill -9 and restart the daemon during this turn (0: never)")
    p.add_argument("--max-tokens", type=int, default=24)
    args = p.parse_args()
    address, daemon = connect_target(args)
    gaps = []
    try:
        async with sc.Client(address, ca=args.ca, api_key=args.api_key) as client:
            s = await client.open()
            sid = s.id
            print(f"session {sid} opened")
            await s.append(SYSTEM, role="system")
            for turn in range(1, args.turns + 1):
                task = TASKS[(turn - 1) % len(TASKS)]
                print(f"turn {turn}: user: {task}", flush=True)
                await retrying(s, "append", lambda: s.append(task, role="user"))

                async def step():
                    gen = s.generate(args.max_tokens, temperature=0.0)
                    times = []
                    async for d in gen:
                        times.append(d.received_at)
                        if daemon is not None and turn == args.restart_at and len(times) == 3 \
                                and s.resumes == 0:
                            print("  ! kill -9 of the daemon mid-generation, restart", flush=True)
                            daemon.kill9()
                            daemon.start()
                    gaps.extend(inter_token_gaps(times))
                    return gen.result
                r = await retrying(s, "generate", step)
                print(f"  model: {r.text.strip()[:100]!r} ({r.usage.output_tokens} tokens, "
                      f"{r.reason.name})")
                if r.usage.output_tokens < 1:
                    raise RuntimeError("the model produced no tokens")
                tool, result = run_tool(r.text, turn)
                print(f"  tool {tool} -> {result}")
                await retrying(s, "append", lambda: s.append(f"Tool result: {result}",
                                                               role="user"))
                r2 = await retrying(s, "generate", lambda: s.generate(
                    args.max_tokens // 2, temperature=0.0).wait())
                print(f"  model: {r2.text.strip()[:100]!r}")
                if s.id != sid:
                    raise RuntimeError("the session id changed")
            info = await client.get_session(sid)
            print(f"done: {args.turns} turns in session {sid}, tokens_seen "
                  f"{info.cache.tokens_seen}, resumes {s.resumes}")
            print(summary_ms("inter-token latency", gaps))
            if daemon is not None and 0 < args.restart_at <= args.turns and s.resumes < 1:
                raise RuntimeError("the daemon was restarted but the session never resumed")
            await s.close()
        return 0
    finally:
        if daemon is not None:
            daemon.stop()


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except (sc.StreamdError, RuntimeError) as e:
        print(f"agent_loop: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
