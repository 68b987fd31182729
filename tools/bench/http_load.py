#!/usr/bin/env python3
"""Closed-loop load on streamd's HTTP front door, the twin of grpc_load (tools/bench/grpc_load.cc)
for tools/bench/http_overhead.sh: N concurrent streamed POST /v1/chat/completions, stateless
(each request opens a session, appends one user message, generates, closes it: what an OpenAI
client does), all released together at t0, greedy (temperature 0, seed 1), max_tokens G.

Per run, from the client's clock (each text chunk timed at its arrival; a chunk may carry more
than one token, its tokens then share that time), with the definitions of `streamd bench`:
  first_i / last_i = arrival of request i's first / last text chunk
  decode tok/s     = sum_i (G - 1) / (max_i last_i - min_i first_i)
  ttft             = first_i - t0, p50/p99 over requests (nearest rank)
and CPU seconds from t0 to the last response: the daemon's (--server-pid, /proc/PID/stat user +
system, clock-tick resolution) and this process's. A generation that ends before G tokens
(usage.completion_tokens, asked with stream_options.include_usage) fails the run.

Standard library only. Prints one JSON object as the last line with --json.
Usage: http_load.py --port PORT --prompt-text FILE [--sessions 1,16] [--gen-tokens 64]
                    [--server-pid PID] [--reps 1] [--json]
"""

import argparse
import http.client
import json
import math
import os
import resource
import statistics
import sys
import threading
import time

HOST = "127.0.0.1"


def percentile(values, p):
    s = sorted(values)
    return s[max(1, min(len(s), math.ceil(p / 100.0 * len(s)))) - 1]


def process_cpu_s(pid):
    """User + system CPU seconds of `pid` (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu_s():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


class Stream:
    def __init__(self, port, text, gen_tokens):
        self.port, self.gen_tokens = port, gen_tokens
        self.body = json.dumps({
            "model": "m", "messages": [{"role": "user", "content": text}],
            "max_tokens": gen_tokens, "temperature": 0, "seed": 1, "stream": True,
            "stream_options": {"include_usage": True}}).encode()
        self.conn = http.client.HTTPConnection(HOST, port, timeout=600)
        self.conn.connect()  # not timed, like grpc_load's Open
        self.first = self.last = None
        self.error = None
        self.prompt_tokens = 0

    def run(self, t0):
        try:
            self.conn.request("POST", "/v1/chat/completions", body=self.body,
                              headers={"Content-Type": "application/json",
                                       "Authorization": "Bearer none"})
            resp = self.conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
            usage = None
            for raw in resp:
                if not raw.startswith(b"data: "):
                    continue
                payload = raw[6:].strip()
                if payload == b"[DONE]":
                    break
                event = json.loads(payload)
                if "error" in event:
                    raise RuntimeError(f"error event {event}")
                if event.get("usage"):
                    usage = event["usage"]
                for c in event.get("choices") or []:
                    if (c.get("delta") or {}).get("content"):
                        now = time.perf_counter() - t0
                        self.first = now if self.first is None else self.first
                        self.last = now
            if usage is None or usage["completion_tokens"] != self.gen_tokens:
                raise RuntimeError(f"the generation ended early: usage {usage}; use a prompt "
                                   "the model answers for that long")
            self.prompt_tokens = usage["prompt_tokens"]
        except Exception as e:  # reported by the caller
            self.error = e
        finally:
            self.conn.close()


def run_once(args, text, n, gen_tokens):
    streams = [Stream(args.port, text, gen_tokens) for _ in range(n)]
    start = threading.Barrier(n + 1)
    t0_box = []

    def worker(s):
        start.wait()
        s.run(t0_box[0])

    threads = [threading.Thread(target=worker, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    server0 = process_cpu_s(args.server_pid) if args.server_pid else -1
    client0 = self_cpu_s()
    t0_box.append(time.perf_counter())
    start.wait()
    for t in threads:
        t.join()
    client_cpu = self_cpu_s() - client0
    server_cpu = process_cpu_s(args.server_pid) - server0 if args.server_pid else -1
    for s in streams:
        if s.error:
            raise SystemExit(f"http_load: {s.error}")
    span = max(s.last for s in streams) - min(s.first for s in streams)
    ttft = [1e3 * s.first for s in streams]
    return {"decode_tokens_per_s": n * (gen_tokens - 1) / span if span > 0 else 0.0,
            "ttft_ms_p50": percentile(ttft, 50), "ttft_ms_p99": percentile(ttft, 99),
            "client_cpu_s": client_cpu, "server_cpu_s": server_cpu,
            "prompt_tokens": streams[0].prompt_tokens}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--prompt-text", required=True)
    p.add_argument("--sessions", default="1")
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--server-pid", type=int, default=0)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    text = open(args.prompt_text).read()
    counts = [int(x) for x in args.sessions.split(",")]
    run_once(args, text, 1, 2)  # warm-up
    results = []
    for n in counts:
        runs = [run_once(args, text, n, args.gen_tokens) for _ in range(args.reps)]
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row["sessions"] = n
        row["runs"] = runs
        results.append(row)
        print(f"{n:>4} sessions: {row['decode_tokens_per_s']:8.1f} tok/s  ttft p50 "
              f"{row['ttft_ms_p50']:7.1f} ms  server cpu {row['server_cpu_s']:.2f} s  client cpu "
              f"{row['client_cpu_s']:.2f} s  prompt {row['prompt_tokens']} tokens")
    if args.json:
        print(json.dumps({"gen_tokens": args.gen_tokens, "results": results}))


if __name__ == "__main__":
    sys.exit(main())
