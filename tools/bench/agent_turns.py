#!/usr/bin/env python3
"""A 40-turn agent conversation, three ways, turn by turn (tools/bench/agent_turns.sh runs it):

  responses  streamd POST /v1/responses, each turn continuing the previous one with
             previous_response_id: only the new user message is sent and prefilled.
  chat       streamd POST /v1/chat/completions, stateless (no x-streamd-session header): the
             whole history is re-sent, and re-prefilled, every turn.
  llama      llama-server POST /v1/chat/completions with the whole history every turn, as an
             OpenAI client does; llama-server's own prompt cache (cache_prompt, on by default)
             reuses the prefix its slot still holds.

Every turn is a short user or tool-result message (fixed seed), answered greedily with at most
--max-tokens tokens, streamed. Each conversation continues with its own assistant answers, so the
three see the same user turns but may diverge in what the model answered. Turns are interleaved
(turn k of responses, of chat, of llama, then turn k + 1) so a noisy neighbour hurts all alike.

Per turn and way: tokens prefilled (streamd: usage input_tokens - cached_tokens, prompt_tokens -
cached_tokens; llama-server: timings.prompt_n), context tokens, generated tokens, time to first
token (the client's clock, request sent to the first text delta) and total time (to the end of
the stream). Standard library only. Prints one JSON line per turn and way, then a JSON summary
line {"summary": ...} when --json, or a table.

Usage: agent_turns.py --streamd-port P --llama-port Q [--turns 40] [--max-tokens 48]
                      [--seed 7] [--rounds 1]
"""

import argparse
import http.client
import json
import random
import statistics
import sys
import time

HOST = "127.0.0.1"
SYSTEM = "You are a helpful assistant for a small software team. Answer briefly."

# An agent's turns: questions, instructions and tool results, short, as a coding agent sends.
ASKS = [
    "What does the build step do?", "List the failing tests.", "Why did {f} fail?",
    "Summarise the last answer in one line.", "Which file defines {f}?",
    "Suggest a fix for {f}.", "Is {f} thread-safe?", "What should we test next?",
    "Rename {f} to something clearer.", "Explain the error in plain words.",
]
TOOLS = [
    'Tool result: {{"file": "{f}.cc", "lines": {n}, "status": "ok"}}',
    'Tool result: {{"test": "{f}_test", "passed": {n}, "failed": 1}}',
    'Tool result: {{"grep": "{f}", "matches": {n}}}',
    'Tool result: {{"build": "done", "warnings": {n}}}',
]
NAMES = ["parse_header", "session_pool", "token_queue", "write_snapshot", "load_model",
         "route_request", "flush_cache", "open_socket"]


def user_turns(n, seed):
    rng = random.Random(seed)
    turns = []
    for i in range(n):
        template = rng.choice(TOOLS if i % 3 == 2 else ASKS)
        turns.append(template.format(f=rng.choice(NAMES), n=rng.randint(1, 400)))
    return turns


def sse_post(port, path, body, headers=None):
    """POSTs `body`, reads the server-sent events; returns (ttft_s, total_s, events)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=600)
    h = {"Content-Type": "application/json", "Authorization": "Bearer none"}
    h.update(headers or {})
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    conn.request("POST", path, body=data, headers=h)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {resp.read()[:500]!r}")
    ttft = None
    events = []
    for raw in resp:
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        payload = line[len("data: "):]
        if payload == "[DONE]":
            break
        event = json.loads(payload)
        if event.get("type") == "error" or ("error" in event and "choices" not in event):
            raise RuntimeError(f"{path}: error event {event}")
        events.append(event)
        if ttft is None and has_text(event):
            ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    conn.close()
    return ttft if ttft is not None else total, total, events


def has_text(event):
    if event.get("type") == "response.output_text.delta":
        return bool(event.get("delta"))
    for choice in event.get("choices") or []:
        if (choice.get("delta") or {}).get("content"):
            return True
    return False


def chat_text(events):
    return "".join((c.get("delta") or {}).get("content") or ""
                   for e in events for c in e.get("choices") or [])


class Responses:
    name = "responses"

    def __init__(self, port, args):
        self.port, self.args, self.previous = port, args, None

    def turn(self, user):
        body = {"model": "m", "input": user, "max_output_tokens": self.args.max_tokens,
                "temperature": 0, "seed": self.args.seed, "stream": True}
        if self.previous is None:
            body["instructions"] = SYSTEM
        else:
            body["previous_response_id"] = self.previous
        ttft, total, events = sse_post(self.port, "/v1/responses", body)
        done = next(e for e in events if e.get("type") in ("response.completed",
                                                           "response.incomplete"))
        r = done["response"]
        self.previous = r["id"]
        u = r["usage"]
        cached = u["input_tokens_details"]["cached_tokens"]
        return dict(prefilled=u["input_tokens"] - cached, context=u["input_tokens"],
                    generated=u["output_tokens"], ttft_ms=1e3 * ttft, total_ms=1e3 * total)


class Chat:
    """Whole history every turn. `llama` reads llama-server's timings, streamd's usage."""

    def __init__(self, name, port, args):
        self.name, self.port, self.args = name, port, args
        self.messages = [{"role": "system", "content": SYSTEM}]

    def turn(self, user):
        self.messages.append({"role": "user", "content": user})
        body = {"model": "m", "messages": self.messages, "max_tokens": self.args.max_tokens,
                "temperature": 0, "seed": self.args.seed, "stream": True,
                "stream_options": {"include_usage": True}}
        ttft, total, events = sse_post(self.port, "/v1/chat/completions", body)
        self.messages.append({"role": "assistant", "content": chat_text(events)})
        usage = next(e["usage"] for e in reversed(events) if e.get("usage"))
        if self.name == "llama":
            timings = next(e["timings"] for e in reversed(events) if e.get("timings"))
            prefilled = timings["prompt_n"]
            generated = timings["predicted_n"]
        else:
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            prefilled = usage["prompt_tokens"] - cached
            generated = usage["completion_tokens"]
        return dict(prefilled=prefilled, context=usage["prompt_tokens"], generated=generated,
                    ttft_ms=1e3 * ttft, total_ms=1e3 * total)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streamd-port", type=int, required=True)
    p.add_argument("--llama-port", type=int, default=0, help="0: no llama-server column")
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--pause", type=float, default=0.2,
                   help="seconds between requests (idle threads that spin settle down)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    turns = user_turns(args.turns, args.seed)
    rows = []  # (round, turn, way, figures)
    for rnd in range(args.rounds):
        ways = [Responses(args.streamd_port, args), Chat("chat", args.streamd_port, args)]
        if args.llama_port:
            ways.append(Chat("llama", args.llama_port, args))
        for t, user in enumerate(turns, 1):
            for way in ways:
                figures = way.turn(user)
                rows.append((rnd, t, way.name, figures))
                print(json.dumps(dict(round=rnd, turn=t, way=way.name, **figures)),
                      flush=True)
                time.sleep(args.pause)

    names = ["responses", "chat"] + (["llama"] if args.llama_port else [])
    summary = {}
    for t in range(1, args.turns + 1):
        for name in names:
            rs = [f for (_, tt, n, f) in rows if tt == t and n == name]
            summary.setdefault(name, {})[t] = {
                k: statistics.median(f[k] for f in rs)
                for k in ("prefilled", "context", "generated", "ttft_ms", "total_ms")}
    marks = sorted({m for m in (1, 10, 20, 40, args.turns) if m <= args.turns})
    if args.json:
        print(json.dumps({"summary": summary}))
    print(f"\nmedians over {args.rounds} round(s); per turn: tokens prefilled / context tokens, "
          "time to first token, total time; cumulative: prefilled tokens and time, turns 1..t")
    for name in names:
        s = summary[name]
        for m in marks:
            cum_pre = sum(s[t]["prefilled"] for t in range(1, m + 1))
            cum_ms = sum(s[t]["total_ms"] for t in range(1, m + 1))
            r = s[m]
            print(f"{name:<9} turn {m:>2}: prefilled {r['prefilled']:>5.0f} / {r['context']:>5.0f}"
                  f"  generated {r['generated']:>3.0f}  ttft {r['ttft_ms']:>7.1f} ms"
                  f"  total {r['total_ms']:>7.1f} ms | cumulative {cum_pre:>6.0f} tok"
                  f" {cum_ms / 1e3:>6.2f} s")


if __name__ == "__main__":
    sys.exit(main())
