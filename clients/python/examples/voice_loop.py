#!/usr/bin/env python3
"""A voice loop: simulated ASR partial transcripts, a TTS playback clock, barge-in, and the
context truncated to what was actually played.

Per turn: the "ASR" sends growing partial transcripts of the user's utterance (Append
partial=True, each replaced by the next) and then the final one; the assistant's reply is
generated and "played" by a TTS clock at --tts-rate tokens/s (a token counts as played once
the clock passes it); after --barge-in-after played tokens the user speaks again: the reply is
cancelled and truncated to the played tokens (Truncate), so the model's context holds what the
user heard, not what was generated ahead of the playback.

FULL MODE is the default: partials are appended (partial=True) and every barged-in reply is
truncated to what was played; each Truncate's answer is checked (tokens_seen must go back by
exactly the unplayed tokens), so a daemon that gets it wrong fails the run.
REDUCED MODE (flagged in the output): --reduced; or this client's streamd.proto has no Truncate
or Append.partial; or the daemon has not (each session asks it first, daemon_has_truncate): a
daemon from before them would take a partial for final input. Partials stay in the client (only finals are appended) and the unplayed
tail of a barged-in reply stays in the context. Everything else, and every measurement, is the
same.

Measures: barge-in to first new token (the user's final transcript appended during playback ->
the first token of the new reply), inter-token latency (median/p90). Exits non-zero on failure.
"""
import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import List

import streamd_client as sc
from streamd_client.client import HAS_PARTIAL_APPEND, HAS_TRUNCATE_FORK
from _common import add_connection_args, connect_target, inter_token_gaps, summary_ms

UTTERANCES = ["tell me about the moon", "no wait, tell me about the sea",
              "what about mountains", "and rivers in spring", "say something about cities"]
# Whether this client can send Truncate and Append.partial at all.
CAN_FULL = HAS_TRUNCATE_FORK and HAS_PARTIAL_APPEND


@dataclass
class VoiceStats:
    barge_in_to_first_token: List[float] = field(default_factory=list)
    inter_token: List[float] = field(default_factory=list)
    turns: int = 0
    truncated_tokens: int = 0
    full: bool = False  # the mode it ran in


async def _deltas(first, gen):
    if first is not None:
        yield first
    async for d in gen:
        yield d


async def play(gen: sc.Generation, rate: float, stop_after: int, stats: VoiceStats,
               first_delta=None):
    """The TTS clock: token k is played at start + k/rate. Returns (played, first_token_time)."""
    played, start, first, times = 0, None, None, []
    async for d in _deltas(first_delta, gen):
        times.append(d.received_at)
        if first is None:
            first, start = d.received_at, d.received_at
        for _ in d.tokens:
            await asyncio.sleep(max(0.0, start + played / rate - time.monotonic()))
            played += 1
            if played >= stop_after:
                break
        if played >= stop_after:
            break
    stats.inter_token.extend(inter_token_gaps(times))
    return played, first


async def voice_session(client: sc.Client, turns: int, rate: float, barge_after: int,
                        max_tokens: int, full: bool, log=print) -> VoiceStats:
    stats = VoiceStats()
    s = await client.open()
    log(f"session {s.id} opened")
    if full and not await daemon_has_truncate(s):
        full = False
        log("  the daemon has no Truncate / partial Append (older than them): REDUCED MODE")
    stats.full = full
    await s.append("You are a friendly voice assistant. Answer in two sentences.",
                   role="system")
    await asr_partials_only(s, UTTERANCES[0], full, log)
    await s.append(UTTERANCES[0], role="user")
    gen = s.generate(max_tokens, temperature=0.0)
    first = None
    for turn in range(1, turns + 1):
        played, _ = await play(gen, rate, barge_after, stats, first)
        log(f"  turn {turn}: played {played} tokens; the user barges in")
        utterance = UTTERANCES[turn % len(UTTERANCES)]
        if not full:
            # REDUCED MODE: the final transcript is appended while the reply still streams:
            # the server cancels it (barge-in) and appends; nothing can be truncated.
            await asr_partials_only(s, utterance, full, log)
            t0 = time.monotonic()
            await s.append(utterance, role="user")
            r = await gen
            # Generation runs ahead of the playback: a short reply may have ended already.
            how = ("cancelled the reply" if r.reason == sc.FinishReason.CANCELLED else
                   f"came after the reply ended ({r.reason.name})")
            log(f"    REDUCED MODE: barge-in {how}; no Truncate, so "
                f"{r.usage.output_tokens - played} unplayed tokens stay in the context")
        else:
            # barge-in: stop the reply, keep only what was played, then the new utterance
            await gen.cancel()
            r = await gen
        generated = r.usage.output_tokens
        if full:
            kept = min(played, generated)
            st = await s.truncate(r.request_id, kept)
            if r.cache is not None and st.tokens_seen != r.cache.tokens_seen - (generated - kept):
                raise RuntimeError(
                    f"Truncate to {kept} of {generated} tokens left tokens_seen {st.tokens_seen}"
                    f", expected {r.cache.tokens_seen - (generated - kept)}")
            stats.truncated_tokens += generated - kept
            log(f"    truncated to the {kept} played of {generated} "
                f"generated tokens (tokens_seen {st.tokens_seen})")
            await asr_partials_only(s, utterance, full, log)
            t0 = time.monotonic()
            await s.append(utterance, role="user")
        gen = s.generate(max_tokens, temperature=0.0)
        first = await gen.__anext__()
        stats.barge_in_to_first_token.append(first.received_at - t0)
        log(f"    asr final {utterance!r} -> first new token in "
            f"{(first.received_at - t0) * 1e3:.1f} ms: {first.text!r}")
        stats.turns += 1
    await gen.cancel()
    await gen
    await s.close()
    return stats


async def daemon_has_truncate(session: sc.Session) -> bool:
    """Asks with a Truncate that cannot succeed (nothing was generated yet): a daemon that has
    Truncate answers NOT_FOUND; one from before it has no such message, so to it the
    ClientMessage is empty (INVALID_ARGUMENT message.kind). Both leave the session as it was."""
    try:
        await session.truncate("probe", 0)
    except sc.NotFoundError:
        return True
    except sc.InvalidArgumentError as e:
        if e.field == "message.kind":
            return False
        raise
    raise RuntimeError("a Truncate of a session that never generated succeeded")


async def asr_partials_only(session, utterance, full, log):
    words = utterance.split()
    for i in range(1, len(words)):
        partial = " ".join(words[:i])
        if full:
            await session.append(partial, partial=True)
        log(f"    asr partial: {partial!r}" + ("" if full else " (kept client-side)"))


def add_mode_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reduced", action="store_true",
                   help="no Truncate or partial Append (a daemon from before them)")


def resolve_mode(args) -> bool:
    """True to try full mode (each session still checks that its daemon has Truncate); says
    why not on stdout."""
    if args.reduced or not CAN_FULL:
        why = ("--reduced" if args.reduced else
               "this client's streamd.proto has no Truncate / Append.partial")
        print(f"reduced mode asked for: {why}")
        return False
    return True


def mode_line(full: bool) -> str:
    return ("MODE: FULL (partial Appends, Truncate to what was played after each barge-in)"
            if full else "MODE: REDUCED (partials stay client-side, no truncation)")


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_connection_args(p)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--tts-rate", type=float, default=25.0, help="tokens played per second")
    p.add_argument("--barge-in-after", type=int, default=8, help="played tokens before barge-in")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--json", action="store_true", help="print one JSON object last")
    add_mode_arg(p)
    args = p.parse_args()
    full = resolve_mode(args)
    address, daemon = connect_target(args)
    try:
        async with sc.Client(address, ca=args.ca, api_key=args.api_key) as client:
            st = await voice_session(client, args.turns, args.tts_rate, args.barge_in_after,
                                     args.max_tokens, full)
        if st.turns != args.turns or not st.barge_in_to_first_token:
            raise RuntimeError("not every turn completed")
        print(mode_line(st.full))
        print(summary_ms("barge-in to first new token", st.barge_in_to_first_token))
        print(summary_ms("inter-token latency", st.inter_token))
        if args.json:
            print(json.dumps({"mode": "full" if st.full else "reduced", "turns": st.turns,
                              "barge_in_ms": [round(x * 1e3, 2) for x in
                                              st.barge_in_to_first_token]}))
        return 0
    finally:
        if daemon is not None:
            daemon.stop()


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except (sc.StreamdError, RuntimeError) as e:
        print(f"voice_loop: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
