"""A Pipecat LLM service on a streamd session (`pip install streamd-client[pipecat]`).

    pipeline = Pipeline([transport.input(), stt, llm, tts, transport.output(),
                         llm.spoken_tracker()])

StreamdLLMService drives one streamd session per conversation: opened on first use, or resumed
by id (`session_id=`); `service.session_id` is the id to store. The session holds the
conversation, so no LLMContext or context aggregator is involved: the service takes the STT's
transcription frames itself.

- InterimTranscriptionFrame -> Append(role=user, partial=True); the next one, or the final
  TranscriptionFrame, replaces it on the daemon (the common token prefix stays cached).
- TranscriptionFrame -> Append(role=user), then a Generate whose tokens go out as
  LLMFullResponseStartFrame, LLMTextFrame per TokenDelta, LLMFullResponseEndFrame.
- InterruptionFrame -> Cancel, then Truncate(request_id, keep_tokens) to what was spoken.

"Spoken" is what the tracker (`spoken_tracker()`, placed after transport.output(), where
Pipecat's assistant aggregator sits) saw pass: the TextFrames that Pipecat's own assistant
aggregator would put in its context — TTSTextFrames, released by the output transport as their
audio plays (the TTS marks the LLMTextFrames it consumed append_to_context=False), or the
LLMTextFrames themselves in a pipeline without TTS. Text that was generated but never reached
the output is dropped from the session's KV cache (pipecat issues #950, #2791).

A bot turn settles when the tracker sees it end (LLMFullResponseEndFrame: everything was
delivered) or when it is interrupted (the spoken text is final once the tracker has seen the
InterruptionFrame, or after `settle_timeout`). User input that arrives before then is held:
interim transcripts wait (the latest one is appended when the turn settles), a final
transcript cuts the turn on the daemon to what was spoken so far (the pipeline itself is not
interrupted: that stays Pipecat's decision). Without a tracker, spoken means pushed downstream
by this service.

After a daemon restart the client resumes the session by itself (streamd_client.Client,
auto_resume); a session whose stream ended for good is resumed by id on its next use.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

from pipecat.frames.frames import (CancelFrame, EagerTranscriptionFrame, EndFrame, Frame,
                                   InterimTranscriptionFrame, InterruptionFrame,
                                   LLMFullResponseEndFrame, LLMFullResponseStartFrame,
                                   LLMRunFrame, LLMTextFrame, TextFrame,
                                   TranscriptionFrame, TranslationFrame)
from pipecat.metrics.metrics import LLMTokenUsage
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings

from .client import Client, Session
from .errors import GenerationInterrupted, StreamdError
from .spoken import TurnLedger

log = logging.getLogger("streamd_client.pipecat")

# Text frames that are user input, never the bot's speech (Pipecat's assistant aggregator
# skips the same ones).
_USER_TEXT = (TranscriptionFrame, InterimTranscriptionFrame, EagerTranscriptionFrame,
              TranslationFrame)


@dataclass
class Truncation:
    """What an interrupted turn left in the session (StreamdLLMService.truncations)."""
    request_id: str
    generated_tokens: int  # tokens that had arrived when it was cut
    keep_tokens: int       # what Truncate kept
    spoken_text: str       # as the tracker reported it
    kept_text: str         # the generated text of the kept tokens
    tokens_seen: int       # the session's CacheState after the Truncate


class _Turn:
    def __init__(self, request_id: str) -> None:
        self.ledger = TurnLedger(request_id)
        self.generation: Any = None
        self.interrupted = False
        self.ended = False            # the generation ended by itself (all of it was pushed)
        self.output_final = asyncio.Event()  # the tracker will report no more spoken text
        self.settled = asyncio.Event()


class StreamdLLMService(LLMService):
    """An LLM service on one streamd session (see the module comment)."""

    def __init__(self, *, address: str = "127.0.0.1:50051", session_id: Optional[str] = None,
                 client: Optional[Client] = None, client_options: Optional[Dict[str, Any]] = None,
                 open_options: Optional[Dict[str, Any]] = None,
                 system_prompt: Optional[str] = None, max_tokens: Optional[int] = None,
                 temperature: Optional[float] = None, seed: Optional[int] = None,
                 top_k: Optional[int] = None, top_p: Optional[float] = None,
                 stop: Sequence[str] = (), settle_timeout: float = 2.0,
                 close_session_on_end: bool = False, **kwargs: Any) -> None:
        """`client`: a streamd_client.Client to use (else one is made for `address` with
        `client_options`, and closed with the service). `open_options`: Client.open's keyword
        arguments for a new session (cache_mode, sinks, window, sampling). `system_prompt`:
        appended as a system turn when a new session opens. The generation arguments go to
        every Generate. `close_session_on_end`: an EndFrame closes the session instead of
        detaching it (a detached one stays resumable by id)."""
        # Pipecat's runtime-updatable settings (LLMUpdateSettingsFrame): every Generate reads
        # temperature, max_tokens, top_p, top_k and seed from them.
        kwargs.setdefault("settings", LLMSettings(
            model="streamd", system_instruction=system_prompt, temperature=temperature,
            max_tokens=max_tokens, top_p=top_p, top_k=top_k, frequency_penalty=None,
            presence_penalty=None, seed=seed, filter_incomplete_user_turns=False,
            user_turn_completion_config=None))
        super().__init__(**kwargs)
        self._own_client = client is None
        self._client = client or Client(address, **(client_options or {}))
        self._session_id = session_id
        self._session: Optional[Session] = None
        self._open_options = dict(open_options or {})
        self._system_prompt = system_prompt
        self._stop_strings = tuple(stop)
        self._settle_timeout = settle_timeout
        self._close_on_end = close_session_on_end
        self._lock = asyncio.Lock()   # one session mutation at a time (append, truncate, generate)
        self._turn: Optional[_Turn] = None
        self._held_interim: Optional[str] = None
        self._tracker: Optional[StreamdSpokenTracker] = None
        self.truncations: list = []   # Truncation, one per interrupted turn
        self._register_event_handler("on_session_ready", sync=True)

    # ---- what the app sees -----------------------------------------------------------------
    @property
    def session_id(self) -> Optional[str]:
        """The streamd session's id (None until it is opened): store it to resume later."""
        return self._session.id if self._session is not None else self._session_id

    @property
    def session(self) -> Optional[Session]:
        return self._session

    @property
    def client(self) -> Client:
        return self._client

    def spoken_tracker(self) -> "StreamdSpokenTracker":
        """The processor that reports what was spoken: put it after transport.output()."""
        if self._tracker is None:
            self._tracker = StreamdSpokenTracker(self)
        return self._tracker

    async def ensure_session(self) -> Session:
        """Opens the session, or resumes it by id (also after its stream ended for good)."""
        s = self._session
        if s is not None and s._fatal is None:
            return s
        if self._session_id is not None:
            s = await self._client.resume(self._session_id)
            log.info("streamd session %s resumed (tokens_seen %d)", s.id,
                     s.cache.tokens_seen)
        else:
            s = await self._client.open(**self._open_options)
            if self._system_prompt:
                await s.append(self._system_prompt, role="system")
        self._session, self._session_id = s, s.id
        await self._call_event_handler("on_session_ready", s.id)
        return s

    # ---- frames ----------------------------------------------------------------------------
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            # Either copy of a broadcast interruption: the base class has cancelled this
            # processor's task (the generation loop) already.
            await self._interrupt()
            await self.push_frame(frame, direction)
        elif direction != FrameDirection.DOWNSTREAM:
            await self.push_frame(frame, direction)
        elif isinstance(frame, InterimTranscriptionFrame):
            await self._user_text(frame.text, final=False)
        elif isinstance(frame, TranscriptionFrame):
            await self._user_text(frame.text, final=True)
        elif isinstance(frame, LLMRunFrame):
            await self._respond()
        else:
            await self.push_frame(frame, direction)

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._finish(close=self._close_on_end)

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._finish(close=False)

    async def _finish(self, close: bool) -> None:
        s, self._session = self._session, None
        if s is not None and s._fatal is None:
            try:
                if s.generating:
                    await s.cancel()
                await (s.close() if close else s.detach())
            except StreamdError as e:
                log.warning("streamd session %s: %s", s.id, e)
        if self._own_client:
            await self._client.close()

    # ---- user input ------------------------------------------------------------------------
    async def _user_text(self, text: str, final: bool) -> None:
        if not text:
            return
        turn = self._turn
        if turn is not None and not turn.settled.is_set():
            if not final:
                self._held_interim = text  # appended when the bot's turn settles
                return
            # The user takes the turn: what was spoken so far is what the bot said (unless an
            # interruption came first: then the tracker says when its report is complete).
            if not turn.interrupted:
                turn.output_final.set()
            await self._interrupt()
            try:
                await asyncio.wait_for(turn.settled.wait(), self._settle_timeout + 30)
            except asyncio.TimeoutError:
                log.warning("streamd: the bot's turn did not settle; appending anyway")
        self._held_interim = None
        async with self._lock:
            await self._append(text, partial=not final)
        if final:
            await self._respond()

    async def _append(self, text: str, partial: bool) -> None:
        """Append(role=user); once more after the daemon went away and the session came back
        without it (its tokens_seen did not move)."""
        s = await self.ensure_session()
        before = s.cache.tokens_seen
        try:
            await s.append(text, role="user", partial=partial)
        except GenerationInterrupted:
            await s.wait_connected(self._client.resume_timeout)
            if s.cache.tokens_seen == before:
                await s.append(text, role="user", partial=partial)

    # ---- the bot's turn --------------------------------------------------------------------
    async def _respond(self) -> None:
        async with self._lock:
            s = await self.ensure_session()
            if not s.connected:
                await s.wait_connected(self._client.resume_timeout)
            gen = s.generate(**self._generate_args())
            turn = _Turn(gen.request_id)
            turn.generation = gen
            self._turn = turn
        await self.start_ttfb_metrics()
        await self.push_frame(LLMFullResponseStartFrame())
        first = True
        try:
            async for d in gen:
                if first:
                    await self.stop_ttfb_metrics()
                    first = False
                turn.ledger.add_delta(len(d.tokens), d.text)
                if d.text:
                    await self._push_text(turn, d.text)
            r = gen.result
            await self.start_llm_usage_metrics(LLMTokenUsage(
                prompt_tokens=r.usage.input_tokens, completion_tokens=r.usage.output_tokens,
                total_tokens=r.usage.input_tokens + r.usage.output_tokens))
            if r.tail_text:
                turn.ledger.add_delta(0, r.tail_text)
                await self._push_text(turn, r.tail_text)
            if r.error is not None and not turn.interrupted:
                await self.push_error(error_msg=f"streamd generation: {r.error}")
        except GenerationInterrupted as e:
            # The daemon went away mid-turn: the session comes back (auto-resume) as its last
            # snapshot holds it, without this generation.
            log.warning("streamd: %s", e)
            turn.interrupted = True
            turn.output_final.set()
            turn.settled.set()
        except asyncio.CancelledError:
            # An InterruptionFrame cancels this task (FrameProcessor._start_interruption);
            # _interrupt() cancels the generation on the daemon. Cancel here too for other
            # reasons (CancelFrame), then let the cancellation go on.
            if not gen.done:
                try:
                    await s.cancel(gen.request_id)
                except StreamdError:
                    pass
            raise
        finally:
            if first:
                await self.stop_ttfb_metrics()
        turn.ended = True
        await self.push_frame(LLMFullResponseEndFrame())
        if self._tracker is None:
            turn.output_final.set()
            await self._settle(turn)

    def _generate_args(self) -> Dict[str, Any]:
        st = self._settings
        args: Dict[str, Any] = {"stop": self._stop_strings}
        for name in ("max_tokens", "temperature", "top_p", "top_k", "seed"):
            v = getattr(st, name, None)
            args[name] = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        return args

    async def _push_text(self, turn: _Turn, text: str) -> None:
        if self._tracker is None:
            turn.ledger.add_spoken(text)  # without a tracker, pushed counts as spoken
        await self.push_frame(LLMTextFrame(text))

    async def _interrupt(self) -> None:
        turn = self._turn
        if turn is None or turn.settled.is_set() or turn.interrupted:
            return
        turn.interrupted = True
        s = self._session
        if turn.generation is not None and not turn.generation.done and s is not None:
            try:
                await s.cancel(turn.ledger.request_id)
            except StreamdError as e:
                log.warning("streamd cancel: %s", e)
        if self._tracker is None:
            turn.output_final.set()
        self.create_task(self._settle(turn), name="streamd-settle")

    async def _settle(self, turn: _Turn) -> None:
        """Truncates the turn to what was spoken, once the spoken text is final; then appends
        a held interim transcript."""
        if turn.settled.is_set():
            return
        try:
            await asyncio.wait_for(turn.output_final.wait(), self._settle_timeout)
        except asyncio.TimeoutError:
            log.warning("streamd: the output did not report the end of the bot's turn within "
                        "%g s; truncating to what it reported", self._settle_timeout)
        if turn.settled.is_set():
            return
        try:
            async with self._lock:
                if turn.settled.is_set():
                    return
                await self._truncate(turn)
                turn.settled.set()
                held, self._held_interim = self._held_interim, None
                if held:
                    await self._append(held, partial=True)
        except StreamdError as e:
            log.warning("streamd: settling the bot's turn: %s", e)
        finally:
            turn.settled.set()

    async def _truncate(self, turn: _Turn) -> None:
        s = self._session
        gen = turn.generation
        if s is None or gen is None:
            return
        keep, kept_text = turn.ledger.cut()
        generated = turn.ledger.generated_tokens
        try:
            # Its end (CANCELLED after the Cancel), and every token it produced.
            produced = len((await asyncio.wait_for(gen.wait(), 30)).tokens)
        except asyncio.TimeoutError:
            log.warning("streamd: generation %s did not end after its cancel", gen.request_id)
            produced = generated
        except StreamdError:
            return  # the daemon lost it (a restart): nothing of it is in the session
        if keep >= produced:
            return  # everything was spoken: nothing to drop
        generated = max(generated, produced)
        state = await s.truncate(turn.ledger.request_id, keep)
        t = Truncation(turn.ledger.request_id, generated, keep, turn.ledger.spoken_text,
                       kept_text, state.tokens_seen)
        self.truncations.append(t)
        log.info("streamd: turn %s cut to %d of %d tokens (%r)", t.request_id, keep,
                 generated, kept_text)

    # ---- from the tracker ------------------------------------------------------------------
    def _on_spoken(self, text: str) -> None:
        turn = self._turn
        if turn is not None and not turn.output_final.is_set():
            turn.ledger.add_spoken(text)

    def _on_output_interrupted(self) -> None:
        turn = self._turn
        if turn is not None and not turn.settled.is_set():
            turn.output_final.set()

    def _on_output_end(self) -> None:
        turn = self._turn
        if turn is not None and turn.ended and not turn.settled.is_set():
            turn.output_final.set()
            self.create_task(self._settle(turn), name="streamd-settle")


class StreamdSpokenTracker(FrameProcessor):
    """Put after transport.output(): reports the bot's text that passed it (TTSTextFrames as
    their audio plays; LLMTextFrames without TTS) to its StreamdLLMService, which truncates an
    interrupted turn to it. Passes every frame on."""

    def __init__(self, service: StreamdLLMService, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._service = service

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, InterruptionFrame):
                self._service._on_output_interrupted()
            elif isinstance(frame, LLMFullResponseEndFrame):
                self._service._on_output_end()
            elif (isinstance(frame, TextFrame) and not isinstance(frame, _USER_TEXT)
                  and frame.append_to_context and frame.text):
                self._service._on_spoken(frame.text)
        await self.push_frame(frame, direction)
