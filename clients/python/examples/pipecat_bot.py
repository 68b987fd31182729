#!/usr/bin/env python3
"""A Pipecat bot on a streamd session, in text (no audio devices needed):

    Script (stands in for the STT) -> StreamdLLMService -> Speaker (stands in for TTS and
    transport.output(): prints text at a speaking pace) -> the service's spoken tracker

The "user" sends interim transcripts and a final one, then talks over the bot's answer; the
interruption cancels the generation and truncates the session to what the Speaker had spoken.
Prints the session id (store it: `--session ID` resumes it), what was spoken, what the session
kept, and the next answer. In a real bot, put your STT, TTS and transport where Script and
Speaker are:

    Pipeline([transport.input(), stt, llm, tts, transport.output(), llm.spoken_tracker()])

Needs `pip install './clients/python[pipecat]'`. Exits non-zero when the interruption did not
truncate the session to what was spoken.
"""
import argparse
import asyncio
import sys

from loguru import logger
from pipecat.frames.frames import (EndFrame, InterimTranscriptionFrame, LLMFullResponseEndFrame,
                                   LLMTextFrame, TranscriptionFrame, UserStartedSpeakingFrame)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from streamd_client.pipecat import StreamdLLMService
from _common import add_connection_args, connect_target


class Script(FrameProcessor):
    """The user's side: transcripts in, and a barge-in."""

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)

    async def hear(self, text, final=True):
        cls = TranscriptionFrame if final else InterimTranscriptionFrame
        await self.push_frame(cls(text, user_id="user", timestamp=""))

    async def talk_over_the_bot(self):
        await self.push_frame(UserStartedSpeakingFrame())
        await self.broadcast_interruption()


class Speaker(FrameProcessor):
    """Prints the bot's words at --pace seconds per text frame, as a TTS would speak them."""

    def __init__(self, pace):
        super().__init__()
        self.pace = pace
        self.frames = 0
        self.replies = 0

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame) and direction == FrameDirection.DOWNSTREAM:
            await asyncio.sleep(self.pace)
            print(frame.text, end="", flush=True)
            self.frames += 1
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.replies += 1
            print()
        await self.push_frame(frame, direction)


async def wait_for(cond, timeout=120.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise SystemExit("timed out")
        await asyncio.sleep(0.02)


async def run(address, session_id, pace, client_options):
    llm = StreamdLLMService(address=address, session_id=session_id, max_tokens=64,
                            temperature=0.0, client_options=client_options,
                            system_prompt="You are a friendly assistant. Answer briefly.")

    @llm.event_handler("on_session_ready")
    async def on_session_ready(service, sid):
        print(f"session {sid} (resume it with --session {sid})")

    script, speaker = Script(), Speaker(pace)
    worker = PipelineWorker(Pipeline([script, llm, speaker, llm.spoken_tracker()]),
                            params=PipelineParams(), cancel_on_idle_timeout=False)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.ensure_future(runner.run())
    ok = True
    try:
        await asyncio.sleep(0.5)
        for partial in ("tell me", "tell me about the", "tell me about the sea"):
            await script.hear(partial, final=False)  # partial appends, replaced on the daemon
            await asyncio.sleep(0.1)
        print("user: Tell me about the sea and its tides.\nbot:  ", end="")
        await script.hear("Tell me about the sea and its tides.")
        await wait_for(lambda: speaker.frames >= 8 or speaker.replies >= 1)
        await script.talk_over_the_bot()
        print(" [interrupted]")
        await wait_for(lambda: llm.truncations or speaker.replies >= 1, 30)
        if llm.truncations:
            t = llm.truncations[-1]
            print(f"spoken:  {t.spoken_text!r}\nkept:    {t.keep_tokens} of "
                  f"{t.generated_tokens} generated tokens ({t.kept_text!r})")
            ok = t.kept_text == t.spoken_text and t.keep_tokens < t.generated_tokens
        else:
            print("the answer ended before the interruption: nothing to truncate")
        n = speaker.replies
        print("user: And the moon?\nbot:  ", end="")
        await script.hear("And the moon?")
        await wait_for(lambda: speaker.replies > n)
    finally:
        await worker.queue_frame(EndFrame())
        await running
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_connection_args(p)
    p.add_argument("--session", help="resume this session id instead of opening one")
    p.add_argument("--pace", type=float, default=0.05, help="seconds per spoken text frame")
    args = p.parse_args()
    logger.remove()  # Pipecat logs with loguru at DEBUG by default
    logger.add(sys.stderr, level="WARNING")
    address, daemon = connect_target(args)
    try:
        ok = asyncio.run(run(address, args.session, args.pace,
                             {"ca": args.ca, "api_key": args.api_key}))
    finally:
        if daemon is not None:
            daemon.stop()
    if not ok:
        print("FAIL: the session was not truncated to what was spoken", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
