"""streamd_client.pipecat in a real Pipecat pipeline (text frames, no audio) against a real
daemon: interruption -> the session holds only what was spoken; interim transcripts as partial
appends; resume after a daemon restart and by id in a new pipeline.

The pipeline is the voice pipeline with the audio parts replaced by text:
    UserInput (the STT: transcription frames; the user's barge-in: an interruption)
    -> StreamdLLMService -> Playout (the TTS and the output transport: lets text frames out at
    a speaking pace) -> the service's spoken tracker -> Sink (collects what was delivered)
Every check compares against a control session on the same daemon that only ever saw the final
transcripts and the spoken words (greedy decoding, so equal contexts give equal tokens).
"""
import asyncio
import os
import time

import pytest

try:
    from pipecat.frames.frames import (AggregatedTextFrame, EndFrame, ErrorFrame,
                                       InterimTranscriptionFrame, InterruptionFrame,
                                       LLMFullResponseEndFrame, LLMFullResponseStartFrame,
                                       LLMTextFrame, TranscriptionFrame, TTSTextFrame,
                                       UserStartedSpeakingFrame)
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    from streamd_client.pipecat import StreamdLLMService
except ImportError as e:  # CI installs the extra and sets STREAMD_REQUIRE_PIPECAT=1: a failure
    if os.environ.get("STREAMD_REQUIRE_PIPECAT") == "1":
        raise
    pytest.skip(f"pipecat extra not installed ({e}): pip install './clients/python[pipecat]'",
                allow_module_level=True)

from streamd_client import Client
from streamd_client.testing import Daemon

STORY = "Tell me a long story about a lighthouse keeper and a storm."
FOLLOW_UP = "Stop. What was the keeper's name?"
PROMPT = "Name three rivers of Europe."
SPEAKING_PACE_S = 0.04  # per text frame at the output: generation outruns it, as with speech


class UserInput(FrameProcessor):
    """The head of the pipeline: the test's transcripts and barge-ins enter here; errors that
    processors push upstream are kept (a test fails on any)."""

    def __init__(self):
        super().__init__()
        self.errors = []

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            self.errors.append(frame.error)
        await self.push_frame(frame, direction)

    async def say(self, text, final=True):
        cls = TranscriptionFrame if final else InterimTranscriptionFrame
        await self.push_frame(cls(text, user_id="user", timestamp=""))

    async def barge_in(self):
        # What Pipecat's user turn handling does when the user starts speaking over the bot.
        await self.push_frame(UserStartedSpeakingFrame())
        await self.broadcast_interruption()


class Playout(FrameProcessor):
    """Stands in for TTS + transport.output(): each text frame leaves after SPEAKING_PACE_S,
    so generated text queues here and an interruption drops what was not 'played' yet."""

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            await asyncio.sleep(SPEAKING_PACE_S)
        await self.push_frame(frame, direction)


class WordTTS(FrameProcessor):
    """Stands in for a word-timestamp TTS and the output transport, as Pipecat 1.14's do it:
    the LLM's text is consumed (announced as an AggregatedTextFrame with
    append_to_context=False), and each word leaves as a TTSTextFrame (no spaces) when it has
    been "played", SPEAKING_PACE_S per word; an interruption drops the words not played."""

    def __init__(self):
        super().__init__()
        self._pending = ""

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._pending = ""
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMTextFrame):
            announced = AggregatedTextFrame(frame.text, text_type="sentence")
            announced.append_to_context = False
            await self.push_frame(announced, direction)
            self._pending += frame.text
            *words, self._pending = self._pending.split(" ")
            await self._play(words)
        elif isinstance(frame, LLMFullResponseEndFrame):
            words, self._pending = self._pending.split(" "), ""
            await self._play(words)
            await self.push_frame(frame, direction)
        else:
            await self.push_frame(frame, direction)

    async def _play(self, words):
        for w in words:
            if w.strip():
                await asyncio.sleep(SPEAKING_PACE_S)
                await self.push_frame(TTSTextFrame(w.strip(), text_type="word"))


class Sink(FrameProcessor):
    """Collects the bot's responses as they were delivered."""

    def __init__(self):
        super().__init__()
        self.responses = []  # one list of texts per LLMFullResponseStartFrame
        self.words = []      # the same, of TTSTextFrames
        self.ended = 0
        self.interruptions = 0

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, LLMFullResponseStartFrame):
                self.responses.append([])
                self.words.append([])
            elif isinstance(frame, TTSTextFrame):
                self.words[-1].append(frame.text)
            elif isinstance(frame, LLMTextFrame):
                self.responses[-1].append(frame.text)
            elif isinstance(frame, LLMFullResponseEndFrame):
                self.ended += 1
            elif isinstance(frame, InterruptionFrame):
                self.interruptions += 1
        await self.push_frame(frame, direction)

    def text(self, i):
        return "".join(self.responses[i])


async def until(cond, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.01)


class Bot:
    """A running pipeline: UserInput -> service -> Playout -> tracker -> Sink."""

    def __init__(self, service, output=Playout):
        self.service = service
        self.user = UserInput()
        self.sink = Sink()
        pipeline = Pipeline([self.user, service, output(), service.spoken_tracker(), self.sink])
        self.worker = PipelineWorker(pipeline, params=PipelineParams(),
                                     cancel_on_idle_timeout=False)
        self._started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _started(worker, frame):
            self._started.set()

    async def __aenter__(self):
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self._run = asyncio.ensure_future(runner.run())
        await asyncio.wait_for(self._started.wait(), 30)
        return self

    async def __aexit__(self, *exc):
        await self.worker.queue_frame(EndFrame())
        await asyncio.wait_for(self._run, 60)
        if exc[0] is None:
            assert self.user.errors == [], self.user.errors

    async def turn(self, text, timeout=120.0):
        """A final transcript; returns the bot's reply as delivered."""
        n = self.sink.ended
        await self.user.say(text)
        await until(lambda: self.sink.ended > n, timeout, "the end of the bot's reply")
        return self.sink.text(-1)


async def greedy(session, n):
    return await session.generate(n, temperature=0.0).wait()


async def test_interruption_keeps_only_the_spoken_words(daemon):
    svc = StreamdLLMService(address=daemon.address, max_tokens=48, temperature=0.0)
    async with Bot(svc) as bot:
        await bot.user.say(STORY)
        await until(lambda: bot.sink.responses and len(bot.sink.responses[0]) >= 6,
                    what="six text frames of the story at the output")
        await bot.user.barge_in()
        await until(lambda: svc.truncations, 30, "the truncation of the interrupted turn")
        cut = svc.truncations[0]
        heard = bot.sink.text(0)
        # The output had delivered part of the reply; generation had run ahead of it.
        assert 0 < cut.keep_tokens < cut.generated_tokens, cut
        assert cut.spoken_text.startswith(heard) and len(heard) > 0, (cut, heard)
        # Text frames: the spoken text falls on token boundaries, so all of it is kept.
        assert cut.kept_text == cut.spoken_text, cut
        assert bot.sink.ended == 0  # the interrupted reply never ended
        reply = await bot.turn(FOLLOW_UP)
        seen = svc.session.cache.tokens_seen
        sid = svc.session_id

    # Control: a session that saw the story request, then only the spoken words of the answer.
    async with Client(daemon.address) as c:
        ctl = await c.open()
        await ctl.append(STORY, role="user")
        spoken = await greedy(ctl, cut.keep_tokens)
        assert spoken.text == cut.spoken_text, (spoken.text, cut.spoken_text)
        await ctl.append(FOLLOW_UP, role="user")
        want = await greedy(ctl, 48)
        assert reply == want.text, (reply, want.text)
        assert seen == ctl.cache.tokens_seen, (seen, ctl.cache.tokens_seen)
        # And the same reply without the truncation would differ in its context: the session
        # without Truncate holds every generated token.
        assert (await c.get_session(sid)).session_id == sid
        await ctl.close()
        await c.close_session(sid)


async def test_interruption_with_tts_words_keeps_only_the_spoken_words(daemon):
    svc = StreamdLLMService(address=daemon.address, max_tokens=48, temperature=0.0)
    async with Bot(svc, output=WordTTS) as bot:
        await bot.user.say(STORY)
        await until(lambda: svc._turn is not None and len(svc._turn.ledger.spoken_text) >= 20,
                    what="the first spoken words")
        await bot.user.barge_in()
        await until(lambda: svc.truncations, 30, "the truncation of the interrupted turn")
        cut = svc.truncations[0]
        await bot.turn(FOLLOW_UP)
        reply_words = bot.sink.words[-1]
        seen = svc.session.cache.tokens_seen
        sid = svc.session_id
    assert 0 < cut.keep_tokens < cut.generated_tokens, cut
    # The words came without spaces: the kept text is the spoken words, or all but the last
    # one when a token spans its end.
    kept, said = "".join(cut.kept_text.split()), "".join(cut.spoken_text.split())
    last = cut.spoken_text.split()[-1]
    assert said.startswith(kept) and len(said) - len(kept) <= len(last), cut
    async with Client(daemon.address) as c:
        ctl = await c.open()
        await ctl.append(STORY, role="user")
        spoken = await greedy(ctl, cut.keep_tokens)
        assert spoken.text == cut.kept_text, (spoken.text, cut.kept_text)
        await ctl.append(FOLLOW_UP, role="user")
        want = await greedy(ctl, 48)
        assert seen == ctl.cache.tokens_seen, (seen, ctl.cache.tokens_seen)
        assert reply_words == want.text.split(), (reply_words, want.text)
        await ctl.close()
        await c.close_session(sid)


async def test_interim_over_the_bot_waits_for_the_cut(daemon):
    """An interim transcript while the bot speaks is held (an Append then would make the
    Truncate impossible); after the barge-in the turn is cut, the interim goes in as a partial
    append and the final transcript replaces it."""
    svc = StreamdLLMService(address=daemon.address, max_tokens=48, temperature=0.0)
    async with Bot(svc) as bot:
        await bot.user.say(STORY)
        await until(lambda: bot.sink.responses and len(bot.sink.responses[0]) >= 4,
                    what="four text frames of the story at the output")
        await bot.user.say("Stop", final=False)
        await until(lambda: svc._held_interim == "Stop", 10, "the interim to be held")
        assert not svc.truncations
        await bot.user.barge_in()
        await until(lambda: svc.truncations, 30, "the truncation of the interrupted turn")
        cut = svc.truncations[0]
        await until(lambda: svc.session.cache.tokens_seen > cut.tokens_seen, 30,
                    "the held interim's partial append")
        reply = await bot.turn(FOLLOW_UP)
        seen = svc.session.cache.tokens_seen
        sid = svc.session_id
    assert 0 < cut.keep_tokens < cut.generated_tokens, cut
    async with Client(daemon.address) as c:
        ctl = await c.open()
        await ctl.append(STORY, role="user")
        assert (await greedy(ctl, cut.keep_tokens)).text == cut.spoken_text
        await ctl.append(FOLLOW_UP, role="user")
        want = await greedy(ctl, 48)
        assert reply == want.text, (reply, want.text)
        assert seen == ctl.cache.tokens_seen, (seen, ctl.cache.tokens_seen)
        await ctl.close()
        await c.close_session(sid)


async def test_interim_transcripts_are_replaced_by_the_final_one(daemon):
    svc = StreamdLLMService(address=daemon.address, max_tokens=12, temperature=0.0)
    async with Bot(svc) as bot:
        await bot.user.say("Name three", final=False)
        await until(lambda: svc.session is not None and svc.session.cache.tokens_seen > 0,
                    what="the first interim's partial append")
        first = svc.session.cache.tokens_seen
        await bot.user.say("Name three rivers of As", final=False)
        await until(lambda: svc.session.cache.tokens_seen != first,
                    what="the second interim replacing the first")
        assert svc.session.cache.tokens_seen > first
        reply = await bot.turn(PROMPT)
        seen = svc.session.cache.tokens_seen
        sid = svc.session_id
    async with Client(daemon.address) as c:
        ctl = await c.open()
        await ctl.append(PROMPT, role="user")
        want = await greedy(ctl, 12)
        assert reply == want.text and reply.strip(), (reply, want.text)
        assert seen == ctl.cache.tokens_seen, (seen, ctl.cache.tokens_seen)
        await ctl.close()
        await c.close_session(sid)


async def _snapshot_settled(d, sid, quiet=0.5, timeout=30.0):
    """Waits until the session's snapshot exists and has not changed for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last, since = d.snapshot_mtime(sid), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        m = d.snapshot_mtime(sid)
        if m != last:
            last, since = m, time.monotonic()
        elif m and time.monotonic() - since >= quiet:
            return
    raise AssertionError("no settled snapshot of session " + sid)


async def test_session_survives_a_daemon_restart_and_resumes_by_id():
    d = Daemon()
    try:
        opts = {"resume_timeout": 60}
        svc = StreamdLLMService(address=d.address, max_tokens=8, temperature=0.0,
                                client_options=opts)
        ids = []

        @svc.event_handler("on_session_ready")
        async def _ready(service, session_id):
            ids.append(session_id)

        async with Bot(svc) as bot:
            r1 = await bot.turn(PROMPT)
            sid = svc.session_id
            await _snapshot_settled(d, sid)
            d.kill9()
            d.start()
            r2 = await bot.turn("And three of Asia?")  # the client resumes the session
            assert svc.session_id == sid and svc.session.resumes >= 1
        assert ids == [sid]
        # A new pipeline (the app restarted) resumes the stored id.
        svc2 = StreamdLLMService(address=d.address, session_id=sid, max_tokens=8,
                                 temperature=0.0, client_options=opts)
        async with Bot(svc2) as bot:
            r3 = await bot.turn("Which one is the longest?")
            assert svc2.session_id == sid and svc2.session.opened.resumed
            seen = svc2.session.cache.tokens_seen
        async with Client(d.address) as c:
            ctl = await c.open()
            want = []
            for text in (PROMPT, "And three of Asia?", "Which one is the longest?"):
                await ctl.append(text, role="user")
                want.append((await greedy(ctl, 8)).text)
            assert [r1, r2, r3] == want
            assert seen == ctl.cache.tokens_seen
            await ctl.close()
    finally:
        d.stop()
