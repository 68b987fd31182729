#!/usr/bin/env python3
"""Closed-loop load on a running llama.cpp server (llama-server), for comparison with
`streamd bench --sessions N`. Standard library only; talks HTTP to 127.0.0.1.

N concurrent /completion requests, all released together at t0, each with a prompt of P random
token ids (fixed seed), n_predict G, ignore_eos, temperature 0 (greedy), cache_prompt false.
Figures use the definitions of `streamd bench --sessions` (see its --help):

  first_i = t_recv_i - timings.predicted_ms_i   (the server's first sampled token)
  last_i  = t_recv_i                            (the response arrives after the last token)
  aggregate decode tok/s = sum_i (predicted_n_i - 1) / (max_i last_i - min_i first_i)
  steady decode tok/s    = tokens in (max_i first_i, min_i last_i] / that window's length
                           (every request decoding; without --stream a request's tokens are
                           taken as evenly spaced between its first and last)
  time to first token    = first_i - t0, p50/p90/p99 over requests (nearest rank)

llama-server's predicted_ms runs from the first sampled token to the last one, and
predicted_n counts the first, so (predicted_n - 1) tokens fall in it: the same tokens streamd
counts. t_recv_i is the client's clock when the whole response has been read, which adds the
HTTP response latency (well under a millisecond on loopback) to the decode phase.

Without --stream there are no per-token timestamps, so the inter-token latency reported is each
request's mean gap, predicted_ms / (predicted_n - 1) (p50/p90/p99 over requests). --stream reads
server-sent events and reports per-token gaps like streamd, at the cost of client CPU that
competes with the server on a small machine.

Usage: llama_server_load.py --port PORT [--sessions 16] [--prompt-tokens 128] [--gen-tokens 64]
                            [--reps 1] [--wait 60] [--stream] [--json]
"""

import argparse
import http.client
import json
import math
import random
import statistics
import sys
import threading
import time

HOST = "127.0.0.1"


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(values)
    rank = max(1, min(len(s), math.ceil(p / 100.0 * len(s))))
    return s[rank - 1]


def request(port, method, path, body=None, timeout=600.0):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_healthy(port, seconds):
    deadline = time.monotonic() + seconds
    while True:
        try:
            status, _ = request(port, "GET", "/health", timeout=5.0)
            if status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"llama_server_load: no healthy server on {HOST}:{port} after {seconds} s")
        time.sleep(0.2)


def vocab_size(port):
    status, body = request(port, "GET", "/v1/models")
    if status != 200:
        sys.exit(f"llama_server_load: GET /v1/models returned HTTP {status}")
    return int(json.loads(body)["data"][0]["meta"]["n_vocab"])


def run_one(port, body, start, stream, out):
    """One request: waits for the common start, posts, records the client receive times."""
    conn = http.client.HTTPConnection(HOST, port, timeout=600.0)
    conn.connect()  # connect before t0 so the start barrier releases requests, not handshakes
    start.wait()
    token_times = []
    conn.request("POST", "/completion", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        out["error"] = f"HTTP {resp.status}: {resp.read()[:200]!r}"
        return
    if not stream:
        result = json.loads(resp.read())
    else:
        result = None
        for line in resp:
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            if event.get("content") or event.get("tokens"):
                token_times.append(time.monotonic())
            if event.get("stop"):
                result = event
                break
    out["t_recv"] = time.monotonic()
    conn.close()
    out["timings"] = result["timings"]
    out["token_times"] = token_times


def run(port, prompts, gen_tokens, stream):
    n = len(prompts)
    start = threading.Barrier(n + 1)
    outs = [{} for _ in range(n)]
    threads = []
    for i in range(n):
        body = {"prompt": prompts[i], "n_predict": gen_tokens, "ignore_eos": True,
                "temperature": 0.0, "cache_prompt": False, "stream": stream}
        t = threading.Thread(target=run_one, args=(port, body, start, stream, outs[i]))
        t.start()
        threads.append(t)
    start.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    for o in outs:
        if "error" in o:
            sys.exit(f"llama_server_load: request failed: {o['error']}")

    firsts, lasts, ttft, itl, rates = [], [], [], [], []
    decode_tokens = 0
    for o in outs:
        tm = o["timings"]
        if tm["predicted_n"] != gen_tokens:
            sys.exit(f"llama_server_load: a request generated {tm['predicted_n']} tokens, "
                     f"not {gen_tokens}")
        first = o["t_recv"] - tm["predicted_ms"] / 1e3
        firsts.append(first)
        lasts.append(o["t_recv"])
        ttft.append(1e3 * (first - t0))
        decode_tokens += tm["predicted_n"] - 1
        rates.append((tm["predicted_n"] - 1) / (tm["predicted_ms"] / 1e3))
        if stream and len(o["token_times"]) > 1:
            tt = o["token_times"]
            itl += [1e3 * (b - a) for a, b in zip(tt, tt[1:])]
        else:
            itl.append(tm["predicted_ms"] / (tm["predicted_n"] - 1))
    decode_wall = max(lasts) - min(firsts)
    total_wall = max(lasts) - t0
    # Steady decode: the window (max first, min last] in which every request is decoding.
    # With --stream the tokens in it are counted; without, each request's tokens are taken as
    # evenly spaced between its first and last.
    w0, w1 = max(firsts), min(lasts)
    steady_tokens = 0.0
    if w1 > w0:
        for o, first, last in zip(outs, firsts, lasts):
            tt = o["token_times"]
            if stream and len(tt) > 1:
                steady_tokens += sum(1 for x in tt if w0 < x <= w1)
            else:
                steady_tokens += (o["timings"]["predicted_n"] - 1) * (w1 - w0) / (last - first)
    return {
        "steady_decode_tokens_per_s": steady_tokens / (w1 - w0) if w1 > w0 else 0.0,
        "decode_tokens_per_s": decode_tokens / decode_wall,
        "decode_tokens": decode_tokens,
        "decode_wall_s": decode_wall,
        "total_wall_s": total_wall,
        "output_tokens_per_s": n * gen_tokens / total_wall,
        "prompt_tokens_per_s": sum(len(p) for p in prompts) / (max(firsts) - t0),
        **{f"ttft_ms_p{p}": percentile(ttft, p) for p in (50, 90, 99)},
        **{f"itl_ms_p{p}": percentile(itl, p) for p in (50, 90, 99)},
        "itl_per_token": stream,
        "session_decode_tokens_per_s_p50": statistics.median(rates),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True, help="the server's port on 127.0.0.1")
    ap.add_argument("--sessions", type=int, default=16, help="concurrent requests (>= 1)")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="prompt length P (>= 1)")
    ap.add_argument("--gen-tokens", type=int, default=64, help="tokens to generate G (>= 2)")
    ap.add_argument("--reps", type=int, default=1, help="runs after one warm-up; medians")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random prompts")
    ap.add_argument("--wait", type=float, default=60.0, help="seconds to wait for /health")
    ap.add_argument("--stream", action="store_true", help="per-token timestamps over SSE")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = ap.parse_args()
    if a.sessions < 1 or a.prompt_tokens < 1 or a.gen_tokens < 2 or a.reps < 1:
        ap.error("need --sessions >= 1, --prompt-tokens >= 1, --gen-tokens >= 2, --reps >= 1")
    if not 0 < a.port < 65536:
        ap.error("--port must be in [1, 65535]")

    wait_healthy(a.port, a.wait)
    n_vocab = vocab_size(a.port)
    # Ordinary ids: vocabularies keep their special tokens at either end, so stay 256 away.
    lo, hi = min(256, n_vocab // 4), max(n_vocab - 256, 3 * n_vocab // 4)
    rng = random.Random(a.seed)
    prompts = [[rng.randrange(lo, hi) for _ in range(a.prompt_tokens)]
               for _ in range(a.sessions)]

    run(a.port, prompts[:1], 2, False)  # warm-up
    runs = [run(a.port, prompts, a.gen_tokens, a.stream) for _ in range(a.reps)]

    m = {k: statistics.median(r[k] for r in runs) for k, v in runs[0].items()
         if isinstance(v, (int, float)) and not isinstance(v, bool)}
    itl_kind = "per token" if a.stream else "per-request mean"
    print(f"llama-server 127.0.0.1:{a.port}  sessions {a.sessions}  prompt {a.prompt_tokens}  "
          f"gen {a.gen_tokens}  runs {a.reps} (medians)")
    print(f"{'':<34} {'p50':>10} {'p90':>10} {'p99':>10}")
    print(f"{'time to first token (ms)':<34} " +
          " ".join(f"{m[f'ttft_ms_p{p}']:>10.1f}" for p in (50, 90, 99)))
    print(f"{'inter-token latency (ms, ' + itl_kind + ')':<34} " +
          " ".join(f"{m[f'itl_ms_p{p}']:>10.2f}" for p in (50, 90, 99)))
    print(f"{'aggregate decode tok/s':<34} {m['decode_tokens_per_s']:>10.1f}   "
          f"({m['decode_tokens']} tokens in {m['decode_wall_s']:.3f} s)")
    print(f"{'steady decode tok/s':<34} {m['steady_decode_tokens_per_s']:>10.1f}")
    print(f"{'per-session decode tok/s':<34} {m['session_decode_tokens_per_s_p50']:>10.1f}")
    print(f"{'output tok/s':<34} {m['output_tokens_per_s']:>10.1f}")
    print(f"{'prompt tok/s':<34} {m['prompt_tokens_per_s']:>10.1f}")
    if a.json:
        m.update({"server": "llama-server", "sessions": a.sessions,
                  "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen_tokens,
                  "reps": a.reps, "itl_per_token": a.stream, "runs": runs})
        print(json.dumps(m))


if __name__ == "__main__":
    main()
