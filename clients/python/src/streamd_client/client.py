"""The asyncio client: Client (channel, unary calls) and Session (one bidirectional stream)."""
from __future__ import annotations

import asyncio
import collections
import enum
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import (Any, AsyncIterator, Deque, Dict, Generator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import grpc

from . import errors
from ._proto.streamd.v1 import streamd_pb2 as pb
from ._proto.streamd.v1 import streamd_pb2_grpc as pb_grpc


def session_id_text(raw: bytes) -> str:
    """A session id as text. The wire declares every session_id `bytes` (streamd.proto, "Session
    ids"); the server's are 32 lowercase hex digits, so this never loses anything."""
    return raw.decode("ascii", errors="replace")


class SessionInfo:
    """pb.SessionInfo with its session_id as text (str); every other field as in the message."""

    def __init__(self, message: pb.SessionInfo) -> None:
        self.message = message
        self.session_id: str = session_id_text(message.session_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)

    def __repr__(self) -> str:
        return f"SessionInfo({self.message!r})"


class ImportedSession:
    """pb.ImportSessionResponse with its session as a SessionInfo (id as text)."""

    def __init__(self, message: pb.ImportSessionResponse) -> None:
        self.message = message
        self.resident: bool = message.resident
        self.session = SessionInfo(message.session)

log = logging.getLogger("streamd_client")

#: The session-affinity header (proto/streamd/v1/session_affinity.h), sent on every call that
#: names a session, as streamctl does, so a proxy in front of replicas can route by it.
SESSION_HEADER = "x-streamd-session"

# Stream ends after which the session is resumed: the connection broke or the daemon went away.
_RESUMABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
# Resume answers after which trying again cannot help.
_FINAL_RESUME = {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                 grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}


class FinishReason(enum.IntEnum):
    UNSPECIFIED = 0
    LENGTH = 1
    STOP = 2
    END_OF_GENERATION = 3
    CANCELLED = 4
    ERROR = 5


_ROLES = {None: pb.CHAT_ROLE_UNSPECIFIED, "system": pb.CHAT_ROLE_SYSTEM,
          "user": pb.CHAT_ROLE_USER, "assistant": pb.CHAT_ROLE_ASSISTANT}
_MODES = {None: pb.CACHE_MODE_UNSPECIFIED, "dense": pb.CACHE_MODE_DENSE,
          "window": pb.CACHE_MODE_WINDOW, "sink": pb.CACHE_MODE_SINK}
SamplingLike = Union[None, pb.SamplingParams, Mapping[str, Any]]


def _sampling(s: SamplingLike, **extra: Any) -> pb.SamplingParams:
    out = pb.SamplingParams()
    if isinstance(s, pb.SamplingParams):
        out.CopyFrom(s)
    elif s:
        for k, v in s.items():
            setattr(out, k, v)
    for k, v in extra.items():
        if v is not None:
            setattr(out, k, v)
    return out


@dataclass
class Delta:
    """Tokens of a generation as they arrive (TokenDelta)."""
    tokens: List[int]
    text: str
    index: int
    received_at: float  # time.monotonic() when it was read


@dataclass
class GenerationResult:
    """The GenerationDone of a generation, with everything it streamed."""
    request_id: str
    reason: FinishReason
    usage: pb.Usage
    tail_text: str
    error: Optional[errors.StreamdError]
    text: str  # every delta's text plus the tail
    tokens: List[int]
    cache: Optional[pb.CacheState]  # the CacheState that follows the end


_END = object()

# Truncate, Fork and Append.partial come with the engine branch's proto; stubs generated from an
# older streamd.proto lack them, and these calls then say so instead of sending.
HAS_TRUNCATE_FORK = hasattr(pb, "Truncate") and hasattr(pb, "Fork")
HAS_PARTIAL_APPEND = "partial" in pb.Append.DESCRIPTOR.fields_by_name


def _unimplemented(what: str) -> errors.UnimplementedError:
    return errors.UnimplementedError(
        grpc.StatusCode.UNIMPLEMENTED,
        f"{what}: the streamd.proto this client was built from has no {what} (it comes with the "
        "engine's Truncate/Fork; reinstall the client from a tree that has it)", what)


class Generation:
    """One running generation: `async for delta in generation`, then `generation.result`;
    or `result = await generation` (consumes what is left)."""

    def __init__(self, session: "Session", request_id: str) -> None:
        self.session = session
        self.request_id = request_id
        self._events: asyncio.Queue = asyncio.Queue()
        self._done: Optional[pb.GenerationDone] = None
        self._result: Optional[GenerationResult] = None
        self._failure: Optional[BaseException] = None
        self._finished = asyncio.Event()
        self._text: List[str] = []
        self._tokens: List[int] = []
        self.started_at = time.monotonic()
        self.cancel_requested = False

    # -- reader side ----------------------------------------------------------------------
    def _on_delta(self, d: pb.TokenDelta) -> None:
        self._tokens.extend(d.token_ids)
        self._text.append(d.text)
        self._events.put_nowait(Delta(list(d.token_ids), d.text, d.index, time.monotonic()))

    def _on_done(self, d: pb.GenerationDone) -> None:
        self._done = d

    def _finish(self, cache: Optional[pb.CacheState]) -> None:
        d = self._done
        assert d is not None
        self._result = GenerationResult(
            request_id=d.request_id, reason=FinishReason(d.reason), usage=d.usage,
            tail_text=d.tail_text,
            error=errors.from_proto(d.error) if d.HasField("error") else None,
            text="".join(self._text) + d.tail_text, tokens=list(self._tokens), cache=cache)
        self._events.put_nowait(_END)
        self._finished.set()

    def _fail(self, e: BaseException) -> None:
        if self._finished.is_set():
            return
        if self._done is not None:  # the end arrived; only its CacheState is missing
            self._finish(None)
            return
        self._failure = e
        self._events.put_nowait(e)
        self._finished.set()

    @property
    def awaiting_cache(self) -> bool:
        return self._done is not None and not self._finished.is_set()

    # -- caller side ----------------------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[Delta]:
        return self

    async def __anext__(self) -> Delta:
        if self._events.empty() and self._finished.is_set():
            if self._failure is not None:
                raise self._failure
            raise StopAsyncIteration
        ev = await self._events.get()
        if ev is _END:
            self._events.put_nowait(_END)
            raise StopAsyncIteration
        if isinstance(ev, BaseException):
            self._events.put_nowait(ev)
            raise ev
        return ev

    async def wait(self) -> GenerationResult:
        async for _ in self:
            pass
        assert self._result is not None
        return self._result

    def __await__(self) -> Generator[Any, None, GenerationResult]:
        return self.wait().__await__()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    @property
    def result(self) -> GenerationResult:
        if self._failure is not None:
            raise self._failure
        if self._result is None:
            raise RuntimeError("the generation has not ended yet")
        return self._result

    async def cancel(self) -> None:
        await self.session.cancel(self.request_id)


@dataclass
class _Pending:
    kind: str  # "append", "truncate", "fork"
    future: asyncio.Future
    request_id: str = ""


class Session:
    """A session driven over one Session stream, resumed automatically after a disconnect."""

    def __init__(self, client: "Client", opened: pb.Opened, call: Any) -> None:
        self.client = client
        self.id: str = session_id_text(opened.session_id)
        self.opened: pb.Opened = opened
        self.cache: pb.CacheState = opened.cache
        self.resumes = 0  # automatic resumes so far
        self.unsolicited_errors: List[errors.StreamdError] = []
        self._call = call
        self._epoch = 0
        self._pending: Deque[_Pending] = collections.deque()
        self._gen: Optional[Generation] = None
        self._outq: asyncio.Queue = asyncio.Queue()
        self._connected = asyncio.Event()
        self._connected.set()
        self._fatal: Optional[errors.StreamdError] = None
        self._closing = False
        self._ended = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read_loop(call, 0))
        self._writer = asyncio.ensure_future(self._write_loop())
        self._reconnecting: Optional[asyncio.Task] = None

    # ---- requests ------------------------------------------------------------------------
    async def append(self, text: Union[str, bytes, None] = None, *,
                     tokens: Optional[Sequence[int]] = None, role: Optional[str] = None,
                     partial: bool = False, parse_special: bool = False) -> pb.CacheState:
        """Adds input (text, or token ids); answers with the CacheState ack. During a
        generation this is a barge-in: the server cancels it first. `partial=True`: the next
        Append replaces this one (needs a daemon with partial Append)."""
        a = pb.Append(parse_special=parse_special)
        if partial:
            if not HAS_PARTIAL_APPEND:
                raise _unimplemented("append.partial")
            a.partial = True
        if role not in _ROLES:
            raise ValueError(f"role must be one of system, user, assistant (got {role!r})")
        a.role = _ROLES[role]
        if text is not None:
            a.text = text.encode() if isinstance(text, str) else text
        if tokens is not None:
            a.tokens.extend(tokens)
        if self._gen is not None and not self._gen.done:
            self._gen.cancel_requested = True
        return await self._request("append", pb.ClientMessage(append=a))

    def generate(self, max_tokens: Optional[int] = None, *, stop: Sequence[Union[str, bytes]] = (),
                 sampling: SamplingLike = None, temperature: Optional[float] = None,
                 seed: Optional[int] = None, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, request_id: Optional[str] = None) -> Generation:
        """Starts a generation (sent at once) and returns it: iterate it for its deltas."""
        self._check_usable()
        if self._gen is not None and not self._gen.done and not self._gen.cancel_requested:
            raise errors.FailedPreconditionError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"session {self.id} is already generating (request_id {self._gen.request_id!r});"
                " cancel it or wait for its end", "generate")
        rid = request_id or "g-" + secrets.token_hex(6)
        g = pb.Generate(request_id=rid.encode(), sampling=_sampling(
            sampling, temperature=temperature, seed=seed, top_k=top_k, top_p=top_p))
        if max_tokens is not None:
            g.max_tokens = max_tokens
        g.stop.extend(s.encode() if isinstance(s, str) else s for s in stop)
        gen = Generation(self, rid)
        previous = self._gen
        if previous is not None and not previous.done:
            # A cancelled generation still owes its end: the new one waits in line behind it
            # (the server answers in order), so route the new one's messages only after it.
            async def chain() -> None:
                await previous._finished.wait()
                self._gen = gen
            self._gen = previous
            self._enqueue(pb.ClientMessage(generate=g), None, before_write=chain)
        else:
            self._gen = gen
            self._enqueue(pb.ClientMessage(generate=g), None)
        gen._registered_epoch = self._epoch  # type: ignore[attr-defined]
        return gen

    async def cancel(self, request_id: Optional[str] = None) -> None:
        """Cancels the running generation (no-op when none runs); its end says CANCELLED."""
        self._check_usable()
        if self._gen is not None and not self._gen.done:
            self._gen.cancel_requested = True
        self._enqueue(pb.ClientMessage(cancel=pb.Cancel(
            request_id=(request_id or "").encode())), None)

    async def truncate(self, request_id: str, keep_tokens: int) -> pb.CacheState:
        """Keeps only the first `keep_tokens` output tokens of generation `request_id` (the
        session's last) in the context. Needs a daemon with Truncate."""
        if not HAS_TRUNCATE_FORK:
            raise _unimplemented("truncate")
        if keep_tokens < 0:
            # Refused here, as the server would: its Error would name the request_id of a
            # generation that may be running, and could not be told from that generation's own.
            raise errors.InvalidArgumentError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"truncate.keep_tokens = {keep_tokens} must be >= 0 (output tokens of the "
                "generation that stay)", "truncate.keep_tokens", request_id)
        return await self._request("truncate", pb.ClientMessage(truncate=pb.Truncate(
            request_id=request_id.encode(), keep_tokens=keep_tokens)), request_id)

    async def fork(self, request_id: Optional[str] = None) -> str:
        """A new detached session with this one's context; returns its id (resume it with
        Client.resume). Needs a daemon with Fork."""
        if not HAS_TRUNCATE_FORK:
            raise _unimplemented("fork")
        rid = request_id or "f-" + secrets.token_hex(6)
        forked = await self._request("fork", pb.ClientMessage(fork=pb.Fork(
            request_id=rid.encode())), rid)
        return session_id_text(forked.session_id)

    async def close(self) -> None:
        """Closes the session for good (frees its KV blocks) and ends the stream."""
        if self._ended.is_set():
            return
        self._closing = True
        if self._connected.is_set():
            self._enqueue(pb.ClientMessage(close=pb.Close()), None, force=True)
            await self._ended.wait()
        else:
            await self.client.close_session(self.id)
            self._end(errors.SessionClosedError(grpc.StatusCode.CANCELLED, "closed"))

    async def detach(self) -> None:
        """Ends the stream but keeps the session (Client.resume(id) attaches it again)."""
        if self._ended.is_set():
            return
        self._closing = True
        if self._call is not None and self._connected.is_set():
            try:
                await self._call.done_writing()
                await asyncio.wait_for(self._ended.wait(), 30)
            except (grpc.aio.AioRpcError, asyncio.TimeoutError):
                pass
        self._end(errors.SessionClosedError(grpc.StatusCode.CANCELLED, "detached"))

    @property
    def generating(self) -> bool:
        return self._gen is not None and not self._gen.done

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self, timeout: Optional[float] = None) -> None:
        await asyncio.wait_for(self._wait_connected(), timeout)

    # ---- machinery -----------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing:
            raise errors.SessionClosedError(grpc.StatusCode.CANCELLED,
                                            f"session {self.id} was closed or detached here")

    async def _request(self, kind: str, msg: pb.ClientMessage, request_id: str = "") -> Any:
        self._check_usable()
        fut = asyncio.get_running_loop().create_future()
        self._enqueue(msg, _Pending(kind, fut, request_id))
        return await fut

    def _enqueue(self, msg: pb.ClientMessage, pending: Optional[_Pending], *,
                 before_write: Any = None, force: bool = False) -> None:
        if not force:
            self._check_usable()
        if pending is not None:
            self._pending.append(pending)
        self._outq.put_nowait((self._epoch, msg, pending, before_write))

    async def _wait_connected(self) -> None:
        while not self._connected.is_set():
            if self._fatal is not None:
                raise self._fatal
            waiter = asyncio.ensure_future(self._connected.wait())
            ended = asyncio.ensure_future(self._ended.wait())
            await asyncio.wait({waiter, ended}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            ended.cancel()
        if self._fatal is not None:
            raise self._fatal

    async def _write_loop(self) -> None:
        while True:
            epoch, msg, pending, before_write = await self._outq.get()
            try:
                await self._wait_connected()
            except errors.StreamdError:
                continue  # the session is over; _end failed every pending request
            if before_write is not None:
                await before_write()
            if epoch != self._epoch and not msg.HasField("close"):
                # Queued before a disconnect: its request was already failed as interrupted,
                # except what was queued while reconnecting (its epoch is the new one).
                if pending is None and msg.HasField("generate"):
                    continue
                if pending is not None and pending.future.done():
                    continue
            try:
                await self._call.write(msg)
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as e:
                log.debug("write failed: %s", e)
                # The reader sees the stream end and fails what is in flight.

    async def _read_loop(self, call: Any, epoch: int) -> None:
        code, details = grpc.StatusCode.OK, ""
        try:
            while True:
                m = await call.read()
                if m is grpc.aio.EOF:
                    break
                self._dispatch(m)
            code, details = await call.code(), await call.details()
        except grpc.aio.AioRpcError as e:
            code, details = e.code(), e.details() or ""
        except asyncio.CancelledError:
            return
        self._on_stream_end(epoch, code, details)

    def _dispatch(self, m: pb.ServerMessage) -> None:
        kind = m.WhichOneof("kind")
        gen = self._gen
        if kind == "token_delta":
            if gen is not None and m.token_delta.request_id == gen.request_id:
                gen._on_delta(m.token_delta)
        elif kind == "generation_done":
            if gen is not None and m.generation_done.request_id == gen.request_id:
                gen._on_done(m.generation_done)
        elif kind == "cache_state":
            self.cache = m.cache_state
            if gen is not None and gen.awaiting_cache:
                gen._finish(m.cache_state)
                return
            p = self._pop(("append", "truncate"))
            if p is not None:
                p.future.set_result(m.cache_state)
        elif kind == "forked":
            p = self._pop(("fork",), m.forked.request_id)
            if p is not None:
                p.future.set_result(m.forked)
        elif kind == "error":
            e = errors.from_proto(m.error)
            rid = m.error.request_id
            # An Error naming the running generation is its own (a refused Generate), unless a
            # Truncate of it is pending and the generation already streamed: the server answers
            # in order, so a refused Generate comes before any of its tokens.
            truncating = gen is not None and gen._tokens and any(
                p.kind == "truncate" and p.request_id == rid for p in self._pending)
            if gen is not None and not gen.done and rid and rid == gen.request_id \
                    and gen._done is None and not truncating:
                gen._fail(e)
                return
            p = self._pop(("append", "truncate", "fork"), rid, error=True)
            if p is not None:
                p.future.set_exception(e)
                return
            log.warning("session %s: %s", self.id, e)
            self.unsolicited_errors.append(e)

    def _pop(self, kinds: Tuple[str, ...], request_id: str = "",
             error: bool = False) -> Optional[_Pending]:
        for p in self._pending:
            if p.kind not in kinds:
                continue
            if error and request_id and p.request_id != request_id:
                continue
            if p.kind == "fork" and request_id and p.request_id != request_id:
                continue
            self._pending.remove(p)
            return p if not p.future.done() else None
        return None

    def _fail_in_flight(self, e: errors.StreamdError) -> None:
        pend, self._pending = self._pending, collections.deque()
        for p in pend:
            if not p.future.done():
                p.future.set_exception(e)
        if self._gen is not None and not self._gen.done:
            self._gen._fail(e)

    def _on_stream_end(self, epoch: int, code: grpc.StatusCode, details: str) -> None:
        if epoch != self._epoch:
            return
        if self._closing:
            self._end(errors.SessionClosedError(code, details or "the stream ended"))
            return
        if code in _RESUMABLE and self.client.auto_resume:
            self._epoch += 1
            self._connected.clear()
            self._fail_in_flight(errors.GenerationInterrupted(
                code, f"the stream of session {self.id} broke ({code.name}: {details}); "
                "it is being resumed: retry the request"))
            self._reconnecting = asyncio.ensure_future(self._reconnect())
            return
        self._end(errors.SessionClosedError(
            code, f"the stream of session {self.id} ended: {code.name}: {details}"))

    def _end(self, e: errors.StreamdError) -> None:
        if self._fatal is None:
            self._fatal = e
        self._fail_in_flight(e)
        self._ended.set()
        self._connected.set()  # wake waiters; they see _fatal
        self._writer.cancel()

    async def _reconnect(self) -> None:
        c = self.client
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.resume_timeout
        delay = c.backoff_initial
        last: Optional[errors.StreamdError] = None
        while not self._closing:
            try:
                opened, call = await c._attach(
                    pb.ClientMessage(resume=pb.Resume(session_id=self.id.encode())), self.id)
            except errors.StreamdError as e:
                last = e
                if e.code in _FINAL_RESUME:
                    self._end(errors.SessionClosedError(
                        e.code, f"session {self.id} could not be resumed: {e.message}", e.field))
                    return
            else:
                if self._closing:  # closed or detached here while the Resume was on its way
                    call.cancel()
                    return
                self._call = call
                self.opened = opened
                self.cache = opened.cache
                self.resumes += 1
                log.info("session %s resumed (tokens_seen %d)", self.id, opened.cache.tokens_seen)
                self._reader = asyncio.ensure_future(self._read_loop(call, self._epoch))
                self._connected.set()
                return
            if loop.time() + delay > deadline:
                self._end(errors.UnavailableError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"session {self.id}: no Resume succeeded within {c.resume_timeout:g} s "
                    f"(last: {last})"))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, c.backoff_max)


class Client:
    """A connection to streamd. TLS when `ca`, `cert`/`key` or `tls=True` is given; the API key
    (argument, else $STREAMD_API_KEY) goes as `authorization: Bearer KEY` on every call."""

    def __init__(self, address: str = "127.0.0.1:50051", *, ca: Optional[str] = None,
                 cert: Optional[str] = None, key: Optional[str] = None, tls: bool = False,
                 server_name: Optional[str] = None, api_key: Optional[str] = None,
                 auto_resume: bool = True, resume_timeout: float = 60.0,
                 backoff_initial: float = 0.05, backoff_max: float = 1.0,
                 call_timeout: float = 60.0) -> None:
        self.address = address
        self.auto_resume = auto_resume
        self.resume_timeout = resume_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.call_timeout = call_timeout
        key_text = api_key if api_key is not None else os.environ.get("STREAMD_API_KEY", "")
        if any(not (0x21 <= ord(ch) <= 0x7E) for ch in key_text):
            raise ValueError("api_key / $STREAMD_API_KEY holds a character that is not printable "
                             "ASCII (a trailing newline?)")
        self._auth: List[Tuple[str, str]] = [("authorization", "Bearer " + key_text)] \
            if key_text else []
        if (cert is None) != (key is None):
            raise ValueError("cert and key go together (the client certificate and its key)")
        options: List[Tuple[str, Any]] = [
            ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.max_receive_message_length", 1 << 30)]
        self._creds: Optional[grpc.ChannelCredentials] = None
        if tls or ca or cert:
            self._creds = grpc.ssl_channel_credentials(
                root_certificates=_read(ca, "ca") if ca else None,
                private_key=_read(key, "key") if key else None,
                certificate_chain=_read(cert, "cert") if cert else None)
            if server_name:
                options.append(("grpc.ssl_target_name_override", server_name))
        self._options = options
        self._channel: Optional[grpc.aio.Channel] = None
        self._sessions: List[Session] = []

    @property
    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = (grpc.aio.secure_channel(self.address, self._creds, self._options)
                             if self._creds else
                             grpc.aio.insecure_channel(self.address, self._options))
        return self._channel

    @property
    def stub(self) -> pb_grpc.StreamdStub:
        return pb_grpc.StreamdStub(self.channel)

    def _md(self, session_id: Optional[str] = None) -> List[Tuple[str, str]]:
        md = list(self._auth)
        if session_id:
            md.append((SESSION_HEADER, session_id))
        return md

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _attach(self, first: pb.ClientMessage,
                      session_id: Optional[str]) -> Tuple[pb.Opened, Any]:
        call = self.stub.Session(metadata=self._md(session_id))
        try:
            try:
                await call.write(first)
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                # The server may end the stream before reading anything (a refused API key):
                # a write then fails with a generic error; the call's own status says why.
                pass
            reply = await call.read()
            if reply is grpc.aio.EOF:
                code = await call.code()
                raise errors.make_error(code, await call.details() or "the stream ended")
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.INTERNAL:
                # grpcio reports a stream the server refused before reading (an API key it does
                # not know) as "Internal error from Core" when the write raced the refusal: a
                # unary call with the same metadata tells the real reason.
                try:
                    await self.stub.GetModelInfo(pb.GetModelInfoRequest(), metadata=self._md(),
                                                 timeout=10)
                except grpc.aio.AioRpcError as probe:
                    if probe.code() in (grpc.StatusCode.UNAUTHENTICATED,
                                        grpc.StatusCode.PERMISSION_DENIED,
                                        grpc.StatusCode.UNAVAILABLE):
                        raise errors.from_unary(probe) from None
            raise errors.from_rpc(e) from None
        except grpc.aio.UsageError as e:
            raise errors.UnavailableError(grpc.StatusCode.UNAVAILABLE, str(e)) from None
        if reply.HasField("error"):
            call.cancel()
            raise errors.from_proto(reply.error)
        if not reply.HasField("opened"):
            call.cancel()
            raise errors.StreamdError(grpc.StatusCode.INTERNAL,
                                      f"expected Opened, got {reply.WhichOneof('kind')}")
        return reply.opened, call

    async def open(self, *, cache_mode: Optional[str] = None, sinks: Optional[int] = None,
                   window: Optional[int] = None, sampling: SamplingLike = None) -> Session:
        """Opens a new session."""
        if cache_mode not in _MODES:
            raise ValueError(f"cache_mode must be sink, window or dense (got {cache_mode!r})")
        o = pb.Open(cache_mode=_MODES[cache_mode], sampling=_sampling(sampling))
        if sinks is not None:
            o.sinks = sinks
        if window is not None:
            o.window = window
        opened, call = await self._attach(pb.ClientMessage(open=o), None)
        s = Session(self, opened, call)
        self._sessions.append(s)
        return s

    async def resume(self, session_id: str) -> Session:
        """Attaches a new stream to an existing session."""
        opened, call = await self._attach(
            pb.ClientMessage(resume=pb.Resume(session_id=session_id.encode())), session_id)
        s = Session(self, opened, call)
        self._sessions.append(s)
        return s

    async def _unary(self, method: Any, request: Any, session_id: Optional[str] = None) -> Any:
        try:
            return await method(request, metadata=self._md(session_id),
                                timeout=self.call_timeout)
        except grpc.aio.AioRpcError as e:
            raise errors.from_unary(e) from None

    async def model_info(self) -> pb.ModelInfo:
        return await self._unary(self.stub.GetModelInfo, pb.GetModelInfoRequest())

    async def list_sessions(self) -> List[SessionInfo]:
        r = await self._unary(self.stub.ListSessions, pb.ListSessionsRequest())
        return [SessionInfo(s) for s in r.sessions]

    async def get_session(self, session_id: str) -> SessionInfo:
        return SessionInfo(await self._unary(
            self.stub.GetSession, pb.GetSessionRequest(session_id=session_id.encode()),
            session_id))

    async def close_session(self, session_id: str) -> None:
        await self._unary(self.stub.CloseSession,
                          pb.CloseSessionRequest(session_id=session_id.encode()), session_id)

    async def export_session(self, session_id: str) -> bytes:
        """The session's snapshot (it stays here)."""
        call = self.stub.ExportSession(pb.ExportSessionRequest(session_id=session_id.encode()),
                                       metadata=self._md(session_id), timeout=self.call_timeout)
        parts: List[bytes] = []
        try:
            async for chunk in call:
                parts.append(chunk.data)
        except grpc.aio.AioRpcError as e:
            raise errors.from_unary(e) from None
        return b"".join(parts)

    async def import_session(self, snapshot: bytes,
                             chunk_bytes: int = 1 << 20) -> ImportedSession:
        """Creates the session of a snapshot (same id and context) on this daemon."""
        chunks = [pb.SnapshotChunk(data=snapshot[i:i + chunk_bytes])
                  for i in range(0, max(len(snapshot), 1), chunk_bytes)]
        try:
            return ImportedSession(await self.stub.ImportSession(
                iter(chunks), metadata=self._md(), timeout=self.call_timeout))
        except grpc.aio.AioRpcError as e:
            raise errors.from_unary(e) from None

    async def close(self) -> None:
        """Detaches every session of this client (they stay on the daemon) and closes the
        channel."""
        for s in self._sessions:
            if not s._ended.is_set():
                s._closing = True
                if s._reconnecting is not None:
                    s._reconnecting.cancel()
                s._end(errors.SessionClosedError(grpc.StatusCode.CANCELLED, "client closed"))
                if s._reader is not None:
                    s._reader.cancel()
        self._sessions.clear()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"{what} {path}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what} {path} holds no PEM block")
    return data
