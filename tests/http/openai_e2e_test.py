"""The HTTP front door (docs/HTTP.md) end to end, driven by the official `openai` package.

Each test class starts its own `streamd serve` (port 0 everywhere, a temporary snapshot
directory) and talks to it as an application would: chat completions streamed and not, lasting
sessions named by the x-streamd-session header, the Responses API with previous_response_id
(across a daemon restart too), errors, API keys and tenants, a client that disconnects, and bad
input sent over raw sockets while another session keeps streaming.

Environment: STREAMD_BINARY (the streamd executable) and STREAMD_MODEL (the GGUF file).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import hashlib

import openai

from streamd_daemon import BINARY, MODEL, Daemon, DaemonTest

PROMPT = [{"role": "user", "content": "Name three colors."}]


class ChatTest(DaemonTest):
    def test_models(self):
        models = self.daemon.client().models.list()
        self.assertEqual(len(models.data), 1)
        self.assertEqual(models.data[0].object, "model")
        self.assertTrue(models.data[0].id)

    def test_streamed_equals_whole_answer(self):
        c = self.daemon.client()
        whole = c.chat.completions.create(model="m", messages=PROMPT, max_tokens=16,
                                          temperature=0)
        self.assertEqual(whole.object, "chat.completion")
        choice = whole.choices[0]
        self.assertIn(choice.finish_reason, ("stop", "length"))
        self.assertTrue(choice.message.content)
        self.assertEqual(choice.message.role, "assistant")
        self.assertGreater(whole.usage.prompt_tokens, 0)
        self.assertLessEqual(whole.usage.completion_tokens, 16)
        self.assertEqual(whole.usage.prompt_tokens_details.cached_tokens, 0)  # stateless

        chunks = list(c.chat.completions.create(
            model="m", messages=PROMPT, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
        # Greedy decoding: the same prompt gives the same answer, streamed or not.
        self.assertEqual(text, choice.message.content)
        self.assertEqual(reasons[-1], choice.finish_reason)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)
        self.assertEqual(chunks[-1].usage.prompt_tokens, whole.usage.prompt_tokens)

    def test_lasting_session_appends_only_new_messages(self):
        c = self.daemon.client()
        raw = c.chat.completions.with_raw_response.create(
            model="m", messages=PROMPT, max_tokens=8, temperature=0,
            extra_headers={"x-streamd-session": "new"})
        session = raw.headers.get("x-streamd-session")
        self.assertRegex(session, r"^[0-9a-f]{32}$")
        first = raw.parse()
        history = PROMPT + [{"role": "assistant", "content": first.choices[0].message.content},
                            {"role": "user", "content": "And two more?"}]
        second = c.chat.completions.create(model="m", messages=history, max_tokens=8,
                                           temperature=0,
                                           extra_headers={"x-streamd-session": session})
        cached = second.usage.prompt_tokens_details.cached_tokens
        # The whole first exchange was reused, and only the new message was prefilled.
        self.assertEqual(cached, first.usage.prompt_tokens + first.usage.completion_tokens)
        self.assertGreater(second.usage.prompt_tokens, cached)
        # A history the session does not have is refused, naming the field.
        with self.assertRaises(openai.ConflictError) as e:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                      extra_headers={"x-streamd-session": session})
        self.assertEqual(e.exception.body["param"], "messages")
        # Another session id: 404.
        with self.assertRaises(openai.NotFoundError):
            c.chat.completions.create(model="m", messages=PROMPT,
                                      extra_headers={"x-streamd-session": "ab" * 16})

    def test_validation_errors_name_the_field(self):
        c = self.daemon.client(max_retries=0)
        cases = [
            (dict(max_tokens=0), "max_tokens"),
            (dict(max_tokens=10 ** 6), "max_tokens"),
            (dict(temperature=-1), "temperature"),
            (dict(n=2), "n"),
            (dict(logprobs=True), "logprobs"),
            (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]),
             "tools"),
            (dict(stop=["a"] * 40), "stop"),
            (dict(extra_body={"max_tokens": "many"}), "max_tokens"),
        ]
        for kwargs, param in cases:
            with self.subTest(param=param, kwargs=kwargs):
                with self.assertRaises(openai.BadRequestError) as e:
                    c.chat.completions.create(model="m", messages=PROMPT, **kwargs)
                self.assertEqual(e.exception.status_code, 400)
                self.assertEqual(e.exception.body["param"], param)
                self.assertEqual(e.exception.body["type"], "invalid_request_error")
        with self.assertRaises(openai.BadRequestError) as e:
            c.chat.completions.create(model="m", messages=[{"role": "tool", "content": "x",
                                                            "tool_call_id": "1"}])
        self.assertEqual(e.exception.body["param"], "messages[0].role")
        # Unknown fields are ignored, as OpenAI's SDKs send new ones all the time.
        ok = c.chat.completions.create(model="m", messages=PROMPT, max_tokens=2,
                                       extra_body={"some_new_field": {"x": 1}})
        self.assertTrue(ok.choices)

    def test_disconnect_cancels_the_generation(self):
        c = self.daemon.client()
        aborted = 'streamd_request_success_total{finished_reason="abort"}'
        before = self.daemon.metric(aborted)
        stream = c.chat.completions.create(
            model="m", max_tokens=3000, temperature=0.7, seed=7, stream=True,
            messages=[{"role": "user", "content": "Write a very long story about a dragon."}])
        received = 0
        for chunk in stream:
            received += 1
            if received == 4:
                break
        stream.close()  # the connection goes
        deadline = time.time() + 15
        while time.time() < deadline and self.daemon.metric(aborted) <= before:
            time.sleep(0.2)
        self.assertGreater(self.daemon.metric(aborted), before,
                           "the generation of a client that left was not cancelled")


    def test_disconnect_before_a_whole_answer_cancels_the_generation(self):
        # Not streamed: nothing is written until the end, so the server must look at the
        # connection to see that the client left (its timeout closes the connection).
        c = self.daemon.client(timeout=1.5, max_retries=0)
        aborted = 'streamd_request_success_total{finished_reason="abort"}'
        before = self.daemon.metric(aborted)
        with self.assertRaises(openai.APITimeoutError):
            c.chat.completions.create(
                model="m", max_tokens=3000, temperature=0.7, seed=7,
                messages=[{"role": "user", "content": "Write a very long story about a dragon."}])
        deadline = time.time() + 15
        while time.time() < deadline and self.daemon.metric(aborted) <= before:
            time.sleep(0.2)
        self.assertGreater(self.daemon.metric(aborted), before,
                           "the generation of a client that left was not cancelled")

    def test_answers_are_counted_by_route_and_status(self):
        ok = 'streamd_http_requests_total{route="/v1/models",status="200"}'
        missing = 'streamd_http_requests_total{route="/v1/models/{model}",status="404"}'
        before_ok, before_missing = self.daemon.metric(ok), self.daemon.metric(missing)
        self.daemon.client().models.list()
        with self.assertRaises(openai.NotFoundError):
            self.daemon.client().models.retrieve("no-such-model")
        # Counted once the answer was written: maybe just after the client read it.
        deadline = time.time() + 10
        while time.time() < deadline and (self.daemon.metric(ok) < before_ok + 1 or
                                          self.daemon.metric(missing) < before_missing + 1):
            time.sleep(0.1)
        self.assertEqual(self.daemon.metric(ok), before_ok + 1)
        self.assertEqual(self.daemon.metric(missing), before_missing + 1)


class ResponsesTest(DaemonTest):
    def test_previous_response_id_continues_the_session(self):
        c = self.daemon.client()
        first = c.responses.create(model="m", input="My name is Ann.", instructions="Be brief.",
                                   max_output_tokens=8, temperature=0)
        self.assertRegex(first.id, r"^resp_[0-9a-f]{32}_1$")
        self.assertTrue(first.output_text)
        self.assertEqual(first.usage.input_tokens_details.cached_tokens, 0)
        second = c.responses.create(model="m", input="What is my name?",
                                    previous_response_id=first.id, max_output_tokens=8,
                                    temperature=0)
        self.assertEqual(second.previous_response_id, first.id)
        self.assertRegex(second.id, r"_2$")
        self.assertEqual(second.usage.input_tokens_details.cached_tokens,
                         first.usage.input_tokens + first.usage.output_tokens)
        # Only the latest response of a session can be continued.
        with self.assertRaises(openai.ConflictError):
            c.responses.create(model="m", input="x", previous_response_id=first.id)
        with self.assertRaises(openai.NotFoundError):
            c.responses.create(model="m", input="x",
                               previous_response_id="resp_" + "cd" * 16 + "_1")
        with self.assertRaises(openai.BadRequestError) as e:
            c.responses.create(model="m", input="x", previous_response_id="resp_nope")
        self.assertEqual(e.exception.body["param"], "previous_response_id")

    def test_streamed_response(self):
        c = self.daemon.client()
        events = list(c.responses.create(model="m", input="Say hi.", max_output_tokens=8,
                                         temperature=0, stream=True))
        types = [e.type for e in events]
        self.assertEqual(types[0], "response.created")
        self.assertEqual(types[-1], "response.completed")
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        self.assertEqual(deltas, events[-1].response.output_text)
        # The SDK's stream helper builds the response from the events.
        with c.responses.stream(model="m", input="Say hi.", max_output_tokens=8,
                                temperature=0) as s:
            helper_text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
            final = s.get_final_response()
        self.assertEqual(helper_text, final.output_text)
        self.assertEqual(final.output_text, events[-1].response.output_text)  # greedy: the same
        # The streamed response can be continued like any other.
        follow = c.responses.create(model="m", input="Again.", max_output_tokens=4,
                                    previous_response_id=events[-1].response.id)
        self.assertGreater(follow.usage.input_tokens_details.cached_tokens, 0)


class ListenPolicyTest(unittest.TestCase):
    def test_http_off_loopback_needs_client_authentication(self):
        out = subprocess.run([BINARY, "serve", "--model.path=" + MODEL,
                              "--server.listen_address=127.0.0.1:0",
                              "--server.metrics_address=127.0.0.1:0",
                              "--server.http_address=0.0.0.0:0"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("server.http_address", out.stderr)
        self.assertIn("auth.allow_insecure", out.stderr)


class RestartTest(unittest.TestCase):
    def test_previous_response_id_survives_a_restart(self):
        tmp = tempfile.mkdtemp(prefix="streamd-http-restart-")
        try:
            a = Daemon(tmp)
            first = a.client().responses.create(model="m", input="Remember: the code is 42.",
                                                max_output_tokens=8, temperature=0)
            self.assertEqual(a.stop(), 0)
            b = Daemon(tmp)
            try:
                second = b.client().responses.create(
                    model="m", input="What is the code?", previous_response_id=first.id,
                    max_output_tokens=8, temperature=0)
                self.assertEqual(second.usage.input_tokens_details.cached_tokens,
                                 first.usage.input_tokens + first.usage.output_tokens)
                self.assertRegex(second.id, r"_2$")
            finally:
                self.assertEqual(b.stop(), 0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class ReplicasTest(unittest.TestCase):
    def test_previous_response_id_moves_to_another_replica(self):
        # Two daemons sharing one snapshot directory, as replicas behind HAProxy do: a response
        # made on one is continued on the other, which reads the session from its snapshot.
        tmp = tempfile.mkdtemp(prefix="streamd-http-replicas-")
        shared = "--sessions.snapshot_dir=" + os.path.join(tmp, "shared")
        a_dir, b_dir = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        os.makedirs(a_dir)
        os.makedirs(b_dir)
        a = Daemon(a_dir, (shared,))
        b = Daemon(b_dir, (shared,))
        try:
            first = a.client().responses.create(model="m", input="Remember: the code is 42.",
                                                max_output_tokens=8, temperature=0)
            second = b.client().responses.create(
                model="m", input="What is the code?", previous_response_id=first.id,
                max_output_tokens=8, temperature=0)
            self.assertEqual(second.usage.input_tokens_details.cached_tokens,
                             first.usage.input_tokens + first.usage.output_tokens)
            self.assertRegex(second.id, r"_2$")
        finally:
            self.assertEqual(b.stop(), 0)
            self.assertEqual(a.stop(), 0)
            shutil.rmtree(tmp, ignore_errors=True)


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


class AuthTest(DaemonTest):
    keys_dir = tempfile.mkdtemp(prefix="streamd-http-keys-")
    keys_file = os.path.join(keys_dir, "keys.yaml")
    with open(keys_file, "w") as f:
        f.write("tenants:\n  slow:\n    tokens_per_second: 1\nkeys:\n"
                "  - {tenant: alice, role: user, sha256: %s}\n"
                "  - {tenant: bob, role: user, sha256: %s}\n"
                "  - {tenant: slow, role: user, sha256: %s}\n"
                % (_sha("alice-key"), _sha("bob-key"), _sha("slow-key")))
    extra = ("--auth.keys_file=" + keys_file,)

    def test_keys_and_tenants(self):
        with self.assertRaises(openai.AuthenticationError):
            self.daemon.client(api_key="wrong").chat.completions.create(model="m",
                                                                        messages=PROMPT)
        with self.assertRaises(openai.AuthenticationError):
            self.daemon.client(api_key="wrong").models.list()
        alice = self.daemon.client(api_key="alice-key")
        bob = self.daemon.client(api_key="bob-key")
        r = alice.responses.create(model="m", input="Hi", max_output_tokens=4)
        # Another tenant's response does not exist for bob, word for word as a missing one.
        with self.assertRaises(openai.NotFoundError):
            bob.responses.create(model="m", input="x", previous_response_id=r.id)
        session = r.id[len("resp_"):len("resp_") + 32]
        with self.assertRaises(openai.NotFoundError):
            bob.chat.completions.create(model="m", messages=PROMPT,
                                        extra_headers={"x-streamd-session": session})
        ok = alice.responses.create(model="m", input="Again", previous_response_id=r.id,
                                    max_output_tokens=4)
        self.assertGreater(ok.usage.input_tokens_details.cached_tokens, 0)

    def test_token_quota_is_429_with_retry_after(self):
        slow = self.daemon.client(api_key="slow-key", max_retries=0)
        # 1 token/s holds 10 tokens: the prompt overdraws it, and the generation is refused.
        with self.assertRaises(openai.RateLimitError) as e:
            slow.chat.completions.create(model="m", messages=PROMPT, max_tokens=16)
        message = e.exception.body["message"]
        self.assertIn("tokens_per_second", message)
        seconds = float(re.search(r"retry in ([0-9.]+) s", message).group(1))
        retry_after = int(e.exception.response.headers["retry-after"])
        self.assertEqual(retry_after, max(1, int(-(-seconds // 1))))


def _raw(port, data, timeout=10):
    """Sends bytes, returns (status line, headers and body) of the answer, or '' when closed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                piece = s.recv(65536)
            except socket.timeout:
                break
            if not piece:
                break
            out += piece
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                m = re.search(rb"Content-Length: (\d+)", head, re.I)
                if m and len(body) >= int(m.group(1)):
                    break
        return out.decode("utf-8", "replace")
    finally:
        s.close()


def _post(path, body, content_length=None):
    length = len(body) if content_length is None else content_length
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(length).encode() + b"\r\n\r\n" + body)


class BadInputTest(DaemonTest):
    # A small body limit, so that "huge" is cheap to send.
    extra = ("--server.max_receive_message_bytes=64KiB", "--sessions.max_append_bytes=32KiB")

    def test_bad_input_is_answered_while_another_session_streams(self):
        c = self.daemon.client()
        result = {}
        streaming = threading.Event()

        def stream():
            chunks, reason = [], None
            # Greedy, this prompt runs to the token limit (1000 tokens, about 5 s on 2 cores):
            # long enough to outlast the bad requests below, and the test waits the slow
            # upload's 10 s read timeout anyway.
            for ch in c.chat.completions.create(
                    model="m", stream=True, max_tokens=1000, temperature=0,
                    messages=[{"role": "user",
                               "content": "Write a very long essay about the history of Rome."}]):
                if ch.choices:
                    chunks.append((time.time(), ch.choices[0].delta.content or ""))
                    reason = ch.choices[0].finish_reason or reason
                    streaming.set()
            result["chunks"], result["reason"] = chunks, reason
            streaming.set()

        t = threading.Thread(target=stream)
        t.start()
        self.assertTrue(streaming.wait(60))
        started = time.time()
        port = self.daemon.port
        answers = {
            "malformed": _raw(port, _post(b"/v1/chat/completions", b'{"messages": [')),
            "wrong_type": _raw(port, _post(b"/v1/chat/completions", b'{"messages": 5}')),
            "not_object": _raw(port, _post(b"/v1/chat/completions", b'[]')),
            "invalid_utf8": _raw(port, _post(b"/v1/chat/completions",
                                             b'{"messages": [{"role": "user", "content": "\xff"}]}')),
            "huge": _raw(port, _post(b"/v1/chat/completions", b"x" * (200 * 1024))),
            "huge_declared": _raw(port, _post(b"/v1/chat/completions", b"{", 10 ** 9)),
            "no_route": _raw(port, b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n"),
            "garbage": _raw(port, b"\x00\x01 not http at all\r\n\r\n"),
        }
        # A slow-loris upload: declares a body and never sends it. The server drops it after its
        # read timeout; nobody else waits for it meanwhile.
        loris = socket.create_connection(("127.0.0.1", port))
        loris.sendall(_post(b"/v1/chat/completions", b'{"mess', 1000))
        t.join(120)
        self.assertFalse(t.is_alive())
        for name in ("malformed", "wrong_type", "not_object", "invalid_utf8"):
            with self.subTest(name=name):
                self.assertTrue(answers[name].startswith("HTTP/1.1 400"), answers[name][:200])
                body = json.loads(answers[name].split("\r\n\r\n", 1)[1])
                self.assertEqual(body["error"]["type"], "invalid_request_error")
        self.assertIn('"param":"messages"', answers["wrong_type"])
        self.assertTrue(answers["huge"].startswith("HTTP/1.1 413"), answers["huge"][:200])
        self.assertTrue(answers["huge_declared"].startswith("HTTP/1.1 413"),
                        answers["huge_declared"][:200])
        self.assertTrue(answers["no_route"].startswith("HTTP/1.1 404"))
        self.assertTrue(answers["garbage"].startswith("HTTP/1.1 400") or answers["garbage"] == "",
                        answers["garbage"][:200])
        # The other session streamed on, during and after all of that, and ended normally.
        self.assertIn(result.get("reason"), ("stop", "length"))
        after = sum(1 for when, _ in result["chunks"] if when > started)
        print(f"[{after} of {len(result['chunks'])} chunks after the bad input began, over "
              f"{result['chunks'][-1][0] - result['chunks'][0][0]:.1f} s]")
        self.assertGreater(after, 100)
        # The slow upload is closed by the server (read timeout), not kept forever.
        loris.settimeout(30)
        try:
            left = loris.recv(65536)
        except (socket.timeout, ConnectionResetError):
            left = None
        loris.close()
        self.assertIsNotNone(left, "a stalled upload was kept open for 30 s")
        # And the daemon still answers.
        self.assertTrue(c.chat.completions.create(model="m", messages=PROMPT,
                                                  max_tokens=2).choices)


if __name__ == "__main__":
    unittest.main()
