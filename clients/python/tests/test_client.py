"""The client against a real `streamd serve` (fixtures in conftest.py)."""
import asyncio
import time

import grpc
import pytest

import streamd_client as sc
from streamd_client import Client, FinishReason
from streamd_client.testing import Daemon

PROMPT = "Name three rivers of Europe."


async def greedy(session, n=12):
    gen = session.generate(n, temperature=0.0)
    deltas = [d async for d in gen]
    return deltas, gen.result


async def test_open_append_generate_streams(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        assert len(s.id) == 32
        ack = await s.append(PROMPT, role="user")
        assert ack.tokens_seen > 0
        deltas, r = await greedy(s, 16)
        assert len(deltas) >= 2, "tokens should stream as several deltas"
        assert [i for d in deltas for i in d.tokens] == r.tokens
        assert deltas[0].index == 0
        assert r.reason in (FinishReason.LENGTH, FinishReason.END_OF_GENERATION)
        # The end-of-generation token is counted in usage but never sent as a delta.
        eog = 1 if r.reason == FinishReason.END_OF_GENERATION else 0
        assert r.usage.output_tokens == len(r.tokens) + eog and r.tokens
        assert r.text == "".join(d.text for d in deltas) + r.tail_text and r.text.strip()
        assert r.cache is not None and r.cache.tokens_seen >= ack.tokens_seen + len(r.tokens)
        infos = {i.session_id: i for i in await c.list_sessions()}
        assert infos[s.id].attached
        await s.close()
        with pytest.raises(sc.NotFoundError):
            await c.get_session(s.id)


async def test_greedy_is_deterministic_across_sessions(daemon):
    async with Client(daemon.address) as c:
        a, b = await c.open(), await c.open()
        await a.append(PROMPT, role="user")
        await b.append(PROMPT, role="user")
        _, ra = await greedy(a, 12)
        _, rb = await greedy(b, 12)
        assert ra.tokens == rb.tokens and ra.text == rb.text
        # and not a constant: another prompt gives other tokens
        d = await c.open()
        await d.append("Write a haiku about snow.", role="user")
        _, rd = await greedy(d, 12)
        assert rd.tokens != ra.tokens
        for s in (a, b, d):
            await s.close()


async def test_cancel(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        await s.append("Tell me a very long story about a dragon.", role="user")
        gen = s.generate(400, temperature=0.0)
        seen = 0
        async for d in gen:
            seen += len(d.tokens)
            if seen >= 2:
                await gen.cancel()
        r = gen.result
        assert r.reason == FinishReason.CANCELLED
        assert 2 <= r.usage.output_tokens < 400
        # the session goes on
        _, r2 = await greedy(s, 4)
        assert r2.usage.output_tokens == 4
        await s.close()


async def test_barge_in_append_during_generate(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        await s.append("Count from one to one hundred in words.", role="user")
        gen = s.generate(400, temperature=0.0)
        first = await gen.__anext__()
        assert first.tokens
        ack = await s.append("Stop. Just say hello.", role="user")   # barge-in
        r = await gen
        assert r.reason == FinishReason.CANCELLED and r.usage.output_tokens < 400
        assert ack.tokens_seen > r.cache.tokens_seen - 1
        t0 = time.monotonic()
        gen2 = s.generate(8, temperature=0.0)
        d = await gen2.__anext__()
        assert d.received_at - t0 < 30
        r2 = await gen2
        assert r2.usage.output_tokens >= 1
        await s.close()


async def test_bad_input_is_a_typed_error_with_the_field(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        with pytest.raises(sc.InvalidArgumentError) as e:
            await s.generate(0).wait()
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.field == "generate.max_tokens", e.value
        with pytest.raises(sc.InvalidArgumentError) as e:
            await s.append(tokens=[1, 2, 10 ** 7])
        assert e.value.field == "append.tokens[2]", e.value
        with pytest.raises(sc.InvalidArgumentError) as e:
            await s.append(b"\xff\xfe not utf-8")
        assert e.value.field.startswith("append.text"), e.value
        # the stream stayed open and the session kept its state
        await s.append("Hello", role="user")
        _, r = await greedy(s, 3)
        assert r.usage.output_tokens == 3
        with pytest.raises(sc.InvalidArgumentError) as e:
            await c.resume("not-a-session-id")
        assert e.value.field == "resume.session_id"
        with pytest.raises(sc.NotFoundError):
            await c.resume("0123456789abcdef0123456789abcdef")
        with pytest.raises(sc.FailedPreconditionError):  # one stream drives a session
            await c.resume(s.id)
        await s.close()


async def test_export_import_round_trip(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        await s.append(PROMPT, role="user")
        # An Append is acknowledged before its prefill; a generation first makes the export's
        # pending input one token on both sides, so both continue with the same chunks (a
        # different split of the prompt may round differently and flip a near-tie).
        await greedy(s, 2)
        sid = s.id
        snap = await c.export_session(sid)
        assert len(snap) > 1000
        _, after_export = await greedy(s, 10)
        await s.close()
        imported = await c.import_session(snap)
        assert imported.session.session_id == sid
        s2 = await c.resume(sid)
        assert s2.opened.resumed
        _, again = await greedy(s2, 10)
        assert again.tokens == after_export.tokens  # the same context came back
        with pytest.raises(sc.AlreadyExistsError):
            await c.import_session(snap)
        with pytest.raises(sc.StreamdError) as e:
            await c.import_session(snap[:len(snap) // 2])
        assert e.value.code in (grpc.StatusCode.DATA_LOSS, grpc.StatusCode.INVALID_ARGUMENT,
                                grpc.StatusCode.ALREADY_EXISTS)
        await s2.close()


async def test_tls_api_keys_and_tenants(secure_daemon):
    d = secure_daemon
    async with Client(d.address, ca=d.ca, api_key=d.keys["acme"]) as acme, \
            Client(d.address, ca=d.ca, api_key=d.keys["globex"]) as globex:
        s = await acme.open()
        await s.append("Hi", role="user")
        _, r = await greedy(s, 3)
        assert r.usage.output_tokens == 3
        assert [i.session_id for i in await acme.list_sessions()] == [s.id]
        assert await globex.list_sessions() == []
        with pytest.raises(sc.NotFoundError):  # another tenant's session does not exist
            await globex.get_session(s.id)
        with pytest.raises(sc.NotFoundError):
            await globex.export_session(s.id)
        await s.detach()
        with pytest.raises(sc.NotFoundError) as e:
            await globex.resume(s.id)
        assert e.value.field == "resume.session_id"
        s = await acme.resume(s.id)  # its own tenant can
        await s.close()
    async with Client(d.address, ca=d.ca, api_key="wrong") as bad:
        with pytest.raises(sc.UnauthenticatedError):
            await bad.list_sessions()
        with pytest.raises(sc.UnauthenticatedError):
            await bad.open()
    async with Client(d.address, ca=d.ca, api_key="", call_timeout=5) as nokey:
        with pytest.raises(sc.UnauthenticatedError):
            await nokey.list_sessions()
    async with Client(d.address, ca=d.other_ca, api_key=d.keys["acme"], call_timeout=5) as c:
        with pytest.raises(sc.UnavailableError):  # the server's certificate is not trusted
            await c.list_sessions()
    async with Client(d.address, api_key=d.keys["acme"], call_timeout=5) as plain:
        with pytest.raises(sc.StreamdError):  # plaintext against the TLS port
            await plain.list_sessions()


async def test_env_api_key(secure_daemon, monkeypatch):
    monkeypatch.setenv("STREAMD_API_KEY", secure_daemon.keys["globex"])
    async with Client(secure_daemon.address, ca=secure_daemon.ca) as c:
        s = await c.open()
        assert s.id in [i.session_id for i in await c.list_sessions()]
        await s.close()
    with pytest.raises(ValueError):
        Client(secure_daemon.address, api_key="key\n")


async def test_auto_resume_across_kill9_and_restart():
    d = Daemon()
    try:
        async with Client(d.address, resume_timeout=60) as c:
            s = await c.open()
            await asyncio.sleep(0.2)
            before = d.snapshot_mtime(s.id)
            ack = await s.append("Tell me a long story about the sea.", role="user")
            for _ in range(200):  # snapshot_interval 0: written (asynchronously) after the ack
                if d.snapshot_mtime(s.id) > before:
                    break
                await asyncio.sleep(0.05)
            assert d.snapshot_mtime(s.id) > before, "no snapshot was written after the Append"
            gen = s.generate(300, temperature=0.0)
            await gen.__anext__()
            d.kill9()  # a generation in flight at the disconnect
            with pytest.raises(sc.GenerationInterrupted) as e:
                async for _ in gen:
                    pass
            assert e.value.retryable
            d.start()
            await s.wait_connected(60)
            assert s.resumes == 1
            assert s.cache.tokens_seen == ack.tokens_seen  # what the snapshot held
            _, r = await greedy(s, 6)  # the retry works on the same session id
            assert r.usage.output_tokens == 6
            # the same generation on a session with the same input, opened after the restart
            ctl = await c.open()
            await ctl.append("Tell me a long story about the sea.", role="user")
            _, rc = await greedy(ctl, 6)
            assert rc.tokens == r.tokens
            await ctl.close()
            await s.close()
    finally:
        d.stop()


async def test_truncate_keeps_what_was_played(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        await s.append(PROMPT, role="user")
        _, r = await greedy(s, 10)
        st = await s.truncate(r.request_id, 4)
        assert st.tokens_seen == r.cache.tokens_seen - 6
        with pytest.raises(sc.InvalidArgumentError) as e:
            await s.truncate(r.request_id, 100)
        assert e.value.field.startswith("truncate")
        await s.close()


async def test_truncate_during_its_generation(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        await s.append(PROMPT, role="user")
        _, first = await greedy(s, 8)
        back = await s.truncate(first.request_id, 0)
        assert back.tokens_seen == first.cache.tokens_seen - 8
        gen = s.generate(400, temperature=0.0)
        await gen.__anext__()
        # A refused Truncate naming the running generation is the Truncate's error: the
        # generation goes on.
        with pytest.raises(sc.InvalidArgumentError) as e:
            await asyncio.wait_for(s.truncate(gen.request_id, -1), 30)
        assert e.value.field == "truncate.keep_tokens", e.value
        # The server's own refusal (sent past the client's check) reaches the Truncate too.
        raw = sc.pb.ClientMessage(truncate=sc.pb.Truncate(
            request_id=gen.request_id.encode(), keep_tokens=-2))
        with pytest.raises(sc.InvalidArgumentError) as e:
            await asyncio.wait_for(s._request("truncate", raw, gen.request_id), 30)
        assert e.value.field == "truncate.keep_tokens" and "-2" in e.value.message, e.value
        assert not gen.done
        st = await asyncio.wait_for(s.truncate(gen.request_id, 0), 30)  # cancels it first
        r = await gen
        assert r.reason == FinishReason.CANCELLED and r.error is None
        assert st.tokens_seen == back.tokens_seen
        _, again = await greedy(s, 8)
        assert again.tokens == first.tokens  # the same context again
        await s.close()


async def test_fork_gives_a_resumable_copy(daemon):
    async with Client(daemon.address) as c:
        s = await c.open()
        await s.append(PROMPT, role="user")
        fid = await s.fork()
        assert fid != s.id and len(fid) == 32
        f = await c.resume(fid)
        assert f.cache.tokens_seen == s.cache.tokens_seen
        _, ra = await greedy(s, 8)
        _, rb = await greedy(f, 8)
        assert ra.tokens == rb.tokens
        await f.close()
        await s.close()


async def test_partial_append_is_replaced(daemon):
    async with Client(daemon.address) as c:
        a, b = await c.open(), await c.open()
        await a.append("Name three rivers of As", partial=True)
        await a.append(PROMPT, role="user")
        await b.append(PROMPT, role="user")
        assert a.cache.tokens_seen == b.cache.tokens_seen
        _, ra = await greedy(a, 8)
        _, rb = await greedy(b, 8)
        assert ra.tokens == rb.tokens
        await a.close()
        await b.close()


async def test_closed_elsewhere_is_final_not_resumed(daemon):
    async with Client(daemon.address) as c, Client(daemon.address) as other:
        s = await c.open()
        await s.append("Hello", role="user")
        await other.close_session(s.id)  # its stream ends with ABORTED: nothing to resume
        for _ in range(100):
            if not s.connected or s._fatal is not None:
                break
            await asyncio.sleep(0.02)
        with pytest.raises(sc.SessionClosedError) as e:
            await s.generate(4).wait()
        assert e.value.code == grpc.StatusCode.ABORTED
        assert s.resumes == 0
