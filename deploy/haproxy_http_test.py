#!/usr/bin/env python3
"""Runs deploy/haproxy/haproxy-http.cfg (after haproxy.cfg, as deployed) in front of two stand-in
replicas and checks where requests go: HTTPS on both sides with certificates made by openssl
(tls_checks.make_test_tls), each replica answering with its name and, like streamd, an
x-streamd-session header naming a session it holds. A request naming a session by the header
or by the session inside a /v1/responses body's previous_response_id reaches the replica that
answered with that session; requests without one ("x-streamd-session: new", a stateless chat)
reach both replicas. The stand-ins are not streamd: this checks the proxy's routing, which
ReplicasE2eTest checks for gRPC with real daemons. Run by ctest (deploy_haproxy_http) and by
hand; exit 0 on success, 1 on a failure, 77 (ctest's skip) without haproxy or openssl.
"""
import http.client
import http.server
import json
import os
import pathlib
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import tls_checks

DEPLOY = pathlib.Path(__file__).resolve().parent
SESSIONS = {"replica0": "a" * 32, "replica1": "b" * 32}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_replica(name, port, tls):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = name.encode()
            self.send_response(200)
            self.send_header("x-streamd-session", SESSIONS[name])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls["tls.crt"], tls["tls.key"])
    ctx.set_alpn_protocols(["http/1.1"])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def post(port, ca, path, body, headers=None):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False  # the test certificate names "streamd", not 127.0.0.1
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def main():
    if shutil.which("haproxy") is None or shutil.which("openssl") is None:
        print("SKIP: needs haproxy and openssl")
        return 77
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tls = tls_checks.make_test_tls(tmp)
        shutil.copy(tls["tls.key"], tls["tls.crt"] + ".key")
        ports = {name: free_port() for name in SESSIONS}
        replicas = [start_replica(name, port, tls) for name, port in ports.items()]
        front = free_port()
        env = dict(os.environ, STREAMD_PROXY_BIND=f"127.0.0.1:{free_port()}",
                   STREAMD_PROXY_CERT=tls["tls.crt"], STREAMD_REPLICA_CA=tls["ca.crt"],
                   STREAMD_REPLICA_NAME="streamd", STREAMD_REPLICA_0=f"127.0.0.1:{free_port()}",
                   STREAMD_REPLICA_1=f"127.0.0.1:{free_port()}",
                   STREAMD_PROXY_HTTP_BIND=f"127.0.0.1:{front}",
                   STREAMD_REPLICA_0_HTTP=f"127.0.0.1:{ports['replica0']}",
                   STREAMD_REPLICA_1_HTTP=f"127.0.0.1:{ports['replica1']}")
        proxy = subprocess.Popen(
            ["haproxy", "-db", "-f", str(DEPLOY / "haproxy/haproxy.cfg"), "-f",
             str(DEPLOY / "haproxy/haproxy-http.cfg")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            # Up once both stand-ins pass their checks (rise 2, every 500 ms) and answer.
            seen = set()
            deadline = time.time() + 20
            while time.time() < deadline and len(seen) < 2:
                try:
                    status, who = post(front, tls["ca.crt"], "/v1/chat/completions", {})
                    if status == 200:
                        seen.add(who)
                except OSError:
                    pass
                time.sleep(0.1)
            if proxy.poll() is not None:
                failures.append("haproxy exited: " + proxy.stdout.read())
            elif seen != set(SESSIONS):
                failures.append(f"requests without a session reached only {sorted(seen)}")
            else:
                for name, session in SESSIONS.items():
                    got = {post(front, tls["ca.crt"], "/v1/chat/completions", {},
                                {"x-streamd-session": session})[1] for _ in range(6)}
                    if got != {name}:
                        failures.append(f"x-streamd-session {session[:4]}... of {name} reached "
                                        f"{sorted(got)}")
                    body = {"input": "hi", "previous_response_id": f"resp_{session}_3"}
                    got = {post(front, tls["ca.crt"], "/v1/responses", body)[1]
                           for _ in range(6)}
                    if got != {name}:
                        failures.append(f"previous_response_id resp_{session[:4]}..._3 of {name}"
                                        f" reached {sorted(got)}")
                # "new" names no session: new chat sessions are spread, not hashed to one.
                got = {post(front, tls["ca.crt"], "/v1/chat/completions", {},
                            {"x-streamd-session": "new"})[1] for _ in range(12)}
                if got != set(SESSIONS):
                    failures.append(f"x-streamd-session: new reached only {sorted(got)}")
        finally:
            proxy.terminate()
            proxy.wait(10)
            for r in replicas:
                r.shutdown()
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("haproxy-http.cfg routes by session")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
