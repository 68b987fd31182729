#!/usr/bin/env python3
"""Runs deploy/haproxy/haproxy-http.cfg (after haproxy.cfg, as deployed), then the HTTP API's
part of deploy/kubernetes/haproxy.cfg (on loopback, its DNS slots replaced by the stand-ins:
kubernetes_http_config), in front of two stand-in replicas and checks where requests go: HTTPS
on both sides with certificates made by openssl (tls_checks.make_test_tls), each replica
answering with its name and, like streamd, an x-streamd-session header naming a session it
holds. A request naming a session by the header or by the session inside a /v1/responses body's
previous_response_id reaches the replica that answered with that session; requests without one
("x-streamd-session: new", a stateless chat) reach both replicas. The stand-ins are not streamd:
this checks the proxy's routing, which ReplicasE2eTest checks for gRPC with real daemons. Run by
ctest (deploy_haproxy_http) and by hand; exit 0 on success, 1 on a failure, 77 (ctest's skip)
without haproxy or openssl.
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


def routing_failures(front, ca):
    """What goes wrong routing through the proxy listening on `front` (empty: nothing)."""
    failures = []
    # Up once both stand-ins pass their checks (rise 2) and answer.
    seen = set()
    deadline = time.time() + 20
    while time.time() < deadline and len(seen) < 2:
        try:
            status, who = post(front, ca, "/v1/chat/completions", {})
            if status == 200:
                seen.add(who)
        except OSError:
            pass
        time.sleep(0.1)
    if seen != set(SESSIONS):
        return [f"requests without a session reached only {sorted(seen)}"]
    for name, session in SESSIONS.items():
        got = {post(front, ca, "/v1/chat/completions", {}, {"x-streamd-session": session})[1]
               for _ in range(6)}
        if got != {name}:
            failures.append(f"x-streamd-session {session[:4]}... of {name} reached {sorted(got)}")
        body = {"input": "hi", "previous_response_id": f"resp_{session}_3"}
        got = {post(front, ca, "/v1/responses", body)[1] for _ in range(6)}
        if got != {name}:
            failures.append(f"previous_response_id resp_{session[:4]}..._3 of {name} reached "
                            f"{sorted(got)}")
    # "new" names no session: new chat sessions are spread, not hashed to one.
    got = {post(front, ca, "/v1/chat/completions", {}, {"x-streamd-session": "new"})[1]
           for _ in range(12)}
    if got != set(SESSIONS):
        failures.append(f"x-streamd-session: new reached only {sorted(got)}")
    return failures


def kubernetes_http_config(tls, front, ports):
    """The HTTP API of deploy/kubernetes/haproxy.cfg (global, defaults, frontend openai, backend
    streamd_http) as the proxy pod runs it, but on loopback: the bind on `front`, the two
    stand-ins (`ports`) in place of the server-template's DNS slots and without the resolvers,
    the test's certificates in place of the mounted files. The gRPC sections are left out."""
    text = (DEPLOY / "kubernetes/haproxy.cfg").read_text(encoding="utf-8")
    _, found = tls_checks.haproxy_failures("kubernetes/haproxy.cfg", text)
    out, keep = [], False
    for line in text.splitlines():
        words = tls_checks.strip_comment(line).split()
        if line[:1].isalpha():
            keep = words[0] in ("global", "defaults") or \
                words[:2] in (["frontend", "openai"], ["backend", "streamd_http"])
        if not keep or not words:
            continue
        if words[0] == "bind":
            line = f"    bind 127.0.0.1:{front} " + " ".join(words[2:])
        elif words[0] == "default-server":
            for keyword in ("resolvers", "init-addr"):
                if keyword in words:
                    i = words.index(keyword)
                    del words[i:i + 2]
            line = "    " + " ".join(words)
        elif words[0] == "server-template":
            line = "\n".join(f"    server {name} 127.0.0.1:{port}" for name, port in ports.items())
        out.append(line)
    rendered = "\n".join(out) + "\n"
    for path, file in ((found.get("crt"), tls["tls.crt"]), (found.get("ca-file"), tls["ca.crt"])):
        if path:
            rendered = rendered.replace(path, file)
    return rendered


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
        k8s_front = free_port()
        k8s_cfg = pathlib.Path(tmp) / "kubernetes-http.cfg"
        k8s_cfg.write_text(kubernetes_http_config(tls, k8s_front, ports), encoding="utf-8")
        proxies = [
            ("haproxy/haproxy.cfg + haproxy-http.cfg", front,
             ["-f", str(DEPLOY / "haproxy/haproxy.cfg"), "-f",
              str(DEPLOY / "haproxy/haproxy-http.cfg")]),
            ("kubernetes/haproxy.cfg (HTTP API)", k8s_front, ["-f", str(k8s_cfg)])]
        try:
            for name, port, args in proxies:
                proxy = subprocess.Popen(["haproxy", "-db", *args], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True)
                try:
                    found = routing_failures(port, tls["ca.crt"])
                    if proxy.poll() is not None:
                        found = ["haproxy exited: " + proxy.stdout.read()]
                finally:
                    proxy.terminate()
                    proxy.wait(10)
                failures += [f"{name}: {f}" for f in found]
        finally:
            for r in replicas:
                r.shutdown()
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("haproxy-http.cfg and kubernetes/haproxy.cfg route HTTP requests by session")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
