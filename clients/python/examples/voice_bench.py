#!/usr/bin/env python3
"""16 concurrent voice sessions (voice_loop.py's loop each): barge-in to first new token and
inter-token latency over all of them, for docs/PERFORMANCE.md. --json prints one JSON object
last. Exits non-zero when a session fails."""
import argparse
import asyncio
import json
import statistics
import sys
import time

import streamd_client as sc
from _common import add_connection_args, connect_target, pct, summary_ms
from voice_loop import add_mode_arg, resolve_mode, voice_session


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_connection_args(p)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--tts-rate", type=float, default=25.0)
    p.add_argument("--barge-in-after", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--json", action="store_true")
    add_mode_arg(p)
    args = p.parse_args()
    full = resolve_mode(args)
    address, daemon = connect_target(args)
    try:
        async with sc.Client(address, ca=args.ca, api_key=args.api_key) as client:
            t0 = time.monotonic()
            results = await asyncio.gather(*[
                voice_session(client, args.turns, args.tts_rate, args.barge_in_after,
                              args.max_tokens, full, log=lambda *_: None)
                for _ in range(args.sessions)])
            wall = time.monotonic() - t0
        barge = [x for r in results for x in r.barge_in_to_first_token]
        itl = [x for r in results for x in r.inter_token]
        if len(barge) != args.sessions * args.turns:
            raise RuntimeError(f"{len(barge)} of {args.sessions * args.turns} barge-ins measured")
        full = all(r.full for r in results)  # each session asked its daemon
        mode = "full" if full else "reduced (no Truncate/partial Append)"
        print(f"{args.sessions} voice sessions x {args.turns} turns, mode {mode}, "
              f"TTS {args.tts_rate:g} tokens/s, {wall:.1f} s")
        print(summary_ms("barge-in to first new token", barge))
        print(summary_ms("inter-token latency", itl))
        if args.json:
            print(json.dumps({
                "sessions": args.sessions, "turns": args.turns, "mode": "full" if full else
                "reduced", "barge_in_to_first_token_ms": {
                    "median": round(statistics.median(barge) * 1e3, 2),
                    "p90": round(pct(barge, 90) * 1e3, 2)},
                "inter_token_ms": {"median": round(statistics.median(itl) * 1e3, 2),
                                   "p90": round(pct(itl, 90) * 1e3, 2)},
                "wall_s": round(wall, 2)}))
        return 0
    finally:
        if daemon is not None:
            daemon.stop()


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except (sc.StreamdError, RuntimeError) as e:
        print(f"voice_bench: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
