#!/usr/bin/env python3
"""Proves that deploy/check.py's security checks can fail: each mutation below breaks one
thing in a copy of deploy/ (the rest of the repository linked in), and check.py must then fail
with a message naming it, while the unbroken copy passes. Run by ctest
(deploy_check_mutations) and by hand: deploy/check_mutations.py [--streamd B --streamctl C]
(with the binaries, the image's run-time packages are broken too). Exit 0 when every mutation
was caught, 1 otherwise, 77 without PyYAML.
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

STARTUP = '''          startupProbe:
            exec:'''
# (file under deploy/, text to replace (first occurrence), replacement, what check.py says)
MUTATIONS = [
    # Kubernetes: the pod's TLS, keys and Secrets.
    ("kubernetes/streamd.yaml", "    cert_file: /etc/streamd-tls/tls.crt\n", "",
     "server.tls.cert_file is not set"),
    ("kubernetes/streamd.yaml", "  keys_file: /etc/streamd-keys/keys.yaml\n", "",
     "needs API keys"),
    ("kubernetes/deployment.yaml", "mountPath: /etc/streamd-tls\n              readOnly: true",
     "mountPath: /etc/streamd-tls\n              readOnly: false",
     "is not the key tls.crt of the Secret streamd-tls mounted read-only"),
    ("kubernetes/deployment.yaml", "secretName: streamd-tls", "secretName: streamd-certs",
     "is not the key tls.crt of the Secret streamd-tls"),
    ("kubernetes/deployment.yaml", "mountPath: /etc/streamd-keys\n              readOnly: true",
     "mountPath: /etc/streamd-keys\n              readOnly: false",
     "is not the key keys.yaml of the Secret streamd-keys mounted read-only"),
    ("kubernetes/deployment.yaml", "        fsGroup: 10001\n", "", "no fsGroup"),
    ("kubernetes/deployment.yaml", "secretName: streamd-tls\n            defaultMode: 0440",
     "secretName: streamd-tls\n            defaultMode: 0444", "readable by every user"),
    ("kubernetes/streamd.yaml", "health_requires_key: false", "health_requires_key: true",
     "the probes hold no key"),
    ("kubernetes/streamd.yaml", "auth:\n", "auth:\n  allow_insecure: true\n",
     "sets auth.allow_insecure"),
    # Kubernetes: the probes.
    ("kubernetes/deployment.yaml", STARTUP,
     "          startupProbe:\n            grpc:\n              port: 50051\n            x:",
     "startupProbe is not an exec probe"),
    ("kubernetes/deployment.yaml", '"--service", "readiness"', '"--service", "liveness"',
     "readinessProbe: asks service \"liveness\""),
    ("kubernetes/deployment.yaml", '"--service", "liveness", ', "",
     "livenessProbe: asks service \"\""),
    ("kubernetes/deployment.yaml", '"--timeout", "4"', '"--timeout", "5"',
     "livenessProbe: --timeout 5 s is not below"),
    ("kubernetes/deployment.yaml", '"--tls-ca", "/etc/streamd-tls/ca.crt"',
     '"--tls-ca", "/etc/ssl/certs/ca-certificates.crt"', "startupProbe: --tls-ca"),
    ("kubernetes/deployment.yaml", '"--tls-server-name", "streamd",\n', "",
     "no --tls-server-name"),
    ("kubernetes/deployment.yaml", '"127.0.0.1:50051"', '"127.0.0.1:50052"',
     "is not 127.0.0.1:50051, the gRPC port"),
    # Kubernetes: the HTTP API's port.
    ("kubernetes/streamd.yaml", "  http_address: 0.0.0.0:8080\n", "",
     "server.http_address is not set"),
    ("kubernetes/streamd.yaml", "http_address: 0.0.0.0:8080", "http_address: 127.0.0.1:8080",
     "server.http_address must be on every interface"),
    ("kubernetes/deployment.yaml", "containerPort: 8080", "containerPort: 8081",
     "containerPort http is not streamd.yaml's server.http_address port"),
    ("kubernetes/service.yaml", "targetPort: http", "targetPort: grpc",
     "service.yaml: no port http"),
    ("kubernetes/servicemonitor.yaml", "      path: /metrics\n",
     "      path: /metrics\n      scheme: https\n", "servicemonitor.yaml: scheme https"),
    # HAProxy, in the cluster and on hosts.
    ("kubernetes/haproxy.cfg", "verify required", "verify none",
     "does not reach the replica over verified TLS"),
    ("kubernetes/haproxy.cfg", " check-alpn h2", "",
     "does not reach the replica over verified TLS"),
    ("kubernetes/haproxy.cfg", "verifyhost streamd", "verifyhost streamd.example",
     "verifyhost streamd.example is not streamd"),
    ("kubernetes/haproxy.cfg", "ssl crt /usr/local/etc/haproxy-tls/proxy.pem alpn h2",
     "proto h2", "offers clients no TLS"),
    ("kubernetes/haproxy.cfg", "verify required", "verify required no-such-keyword",
     "haproxy -c"),
    ("kubernetes/proxy.yaml", "              - {key: ca.crt, path: ca.crt}",
     "              - {key: ca.crt, path: ca.crt}\n              - {key: tls.key, path: k}",
     "the replicas' private key would reach the proxy"),
    ("kubernetes/proxy.yaml", "secretName: streamd-proxy-tls", "secretName: other",
     "is not the key tls.crt of the Secret streamd-proxy-tls"),
    # The in-cluster proxy's HTTP API: the same rules as haproxy-http.cfg, HTTP/1.1 over
    # verified TLS to the pods' HTTP port, exposed by the proxy's pod and Service.
    ("kubernetes/haproxy.cfg", "streamd-headless:8080", "streamd-headless:8081",
     "the servers of `backend streamd_http` are on port 8081, not deployment.yaml's "
     "containerPort http"),
    ("kubernetes/haproxy.cfg", "streamd-headless:8080", "streamd:8080",
     "the servers of `backend streamd_http` are not the headless Service's pods"),
    ("kubernetes/haproxy.cfg",
     "    http-request set-var(txn.session) req.body,json_query('$.previous_response_id'),"
     "field(2,_) if !{ var(txn.session) -m found } { path /v1/responses }\n", "",
     "kubernetes/haproxy.cfg (HTTP API): no `req.body,json_query"),
    ("kubernetes/haproxy.cfg", "alpn http/1.1 check-alpn http/1.1", "alpn h2 check-alpn h2",
     "kubernetes/haproxy.cfg (HTTP API): `server-template replica 8 streamd-headless:8080` "
     "does not reach the replica over verified TLS"),
    ("kubernetes/haproxy.cfg", "ssl crt /usr/local/etc/haproxy-tls/proxy.pem alpn http/1.1",
     "ssl crt /usr/local/etc/haproxy-tls/proxy.pem alpn h2",
     "kubernetes/haproxy.cfg (HTTP API): `bind"),
    ("kubernetes/haproxy.cfg", "stick on var(txn.session)", "stick on var(txn.session) if TRUE",
     "the rules of `backend streamd_http` differ from haproxy/haproxy-http.cfg's"),
    ("kubernetes/haproxy.cfg", "default_backend streamd_http", "default_backend streamd",
     "the rules of `frontend openai` differ from haproxy/haproxy-http.cfg's"),
    ("kubernetes/haproxy.cfg", "\nfrontend openai\n", "\nfrontend http\n",
     "no `frontend openai` of haproxy-http.cfg"),
    ("kubernetes/proxy-service.yaml", "      targetPort: http\n", "      targetPort: grpc\n",
     "proxy-service.yaml: no port http"),
    ("kubernetes/proxy.yaml", "containerPort: 8443", "containerPort: 8080",
     "proxy.yaml: containerPort http is 8080, not the port kubernetes/haproxy.cfg's "
     "`frontend openai` binds (8443)"),
    ("kubernetes/headless-service.yaml", "      port: 8080\n", "      port: 8081\n",
     "headless-service.yaml: no port http 8080"),
    ("haproxy/haproxy.cfg", ' ca-file "${STREAMD_REPLICA_CA}"', "",
     "haproxy/haproxy.cfg: `server replica0"),
    ("haproxy/haproxy.cfg", 'ssl crt "${STREAMD_PROXY_CERT}" alpn h2', "proto h2",
     "haproxy/haproxy.cfg: `bind"),
    # The HTTP API's proxy: verified TLS, HTTP/1.1, routing by the session.
    ("haproxy/haproxy-http.cfg", "verify required", "verify none",
     "haproxy/haproxy-http.cfg: `server replica0"),
    ("haproxy/haproxy-http.cfg", "alpn http/1.1 check-alpn", "alpn h2 proto h2 check-alpn",
     "`proto h2` to the daemon's HTTP/1.1 port"),
    ("haproxy/haproxy-http.cfg", "field(2,_)", "field(3,_)", "previous_response_id"),
    ("haproxy/haproxy-http.cfg", "balance hdr(x-streamd-route)", "balance hdr(x-streamd-session)",
     "balance hdr(x-streamd-route)"),
    # The container image.
    ("container/Containerfile", '     "--server.tls.cert_file=/etc/streamd-tls/tls.crt", \\\n',
     "", "Containerfile CMD: server.tls.cert_file is not set"),
    ("container/Containerfile", '"--tls-ca", "/etc/streamd-tls/ca.crt", ', "",
     "Containerfile HEALTHCHECK: --tls-ca None"),
    ("container/Containerfile", '"--timeout", "4"', '"--timeout", "5"',
     "Containerfile HEALTHCHECK: --timeout 5 s is not below"),
    ("container/Containerfile", '"--auth.keys_file=/etc/streamd-keys/keys.yaml"]',
     '"--auth.keys_file=/etc/streamd-keys/keys.yaml", "--auth.allow_insecure=true"]',
     "sets auth.allow_insecure"),
    ("container/Containerfile", "/etc/streamd-keys/keys.yaml\"]", "/etc/keys.yaml\"]",
     "CMD's auth.keys_file is not kubernetes/streamd.yaml's"),
    # The systemd unit.
    ("systemd/streamd.service", "LoadCredential=tls.key:/etc/streamd/tls/tls.key\n", "",
     "server.tls.key_file=%d/tls.key is not a credential"),
    ("systemd/streamd.service", "--auth.keys_file=%d/keys.yaml",
     "--auth.keys_file=/etc/streamd/keys/keys.yaml", "auth.keys_file=/etc/streamd/keys/keys.yaml"),
    ("systemd/streamd.service", "tls.crt:/etc/streamd/tls/tls.crt", "tls.crt:/tmp/tls.crt",
     "LoadCredential=tls.crt:/tmp/tls.crt is not under /etc/streamd"),
    ("systemd/streamd.service", "    --auth.keys_file=%d/keys.yaml\n",
     "    --auth.keys_file=%d/keys.yaml --auth.allow_insecure=true\n",
     "sets auth.allow_insecure"),
]

# Caught only with the binaries (--streamd, --streamctl): the image's run-time packages against
# the libraries ldd lists.
BINARY_MUTATIONS = [
    ("container/Containerfile", "libpcre2-8-0 libxxhash0 \\", "libpcre2-8-0 \\",
     "libxxhash.so.0 from libxxhash0, which the run-time stage does not install"),
    ("container/Containerfile", "libpcre2-8-0 libxxhash0", "libpcre2-8-0 libxxhash0 libnosuch0",
     "package libnosuch0 is unknown to apt-cache"),
]


def copy_of_repository(tmp):
    """tmp/root: deploy/ copied, everything else linked (check.py reads proto/ and scripts/)."""
    root = pathlib.Path(tmp) / "root"
    root.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in ("deploy", "build", ".git"):
            continue
        (root / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "deploy", root / "deploy")
    return root


def run_check(root, args=()):
    r = subprocess.run([sys.executable, str(root / "deploy" / "check.py"), *args],
                       capture_output=True, text=True, check=False)
    return r.returncode, r.stdout + r.stderr


def main():
    try:
        import yaml  # noqa: F401  (check.py needs it)
    except ImportError:
        print("SKIP: PyYAML is missing (apt-get install python3-yaml)")
        return 77
    # --streamd B --streamctl C: passed on to check.py for BINARY_MUTATIONS.
    binaries = sys.argv[1:]
    mutations = [(m, ()) for m in MUTATIONS]
    if binaries:
        mutations += [(m, binaries) for m in BINARY_MUTATIONS]
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_of_repository(tmp)
        rc, out = run_check(root, binaries)
        if rc != 0:
            print(f"FAIL: the unbroken copy does not pass:\n{out}")
            return 1
        for (file, old, new, expected), args in mutations:
            path = root / "deploy" / file
            original = path.read_text(encoding="utf-8")
            if old not in original:
                missed.append(f"{file}: the text to break is gone: {old!r}")
                continue
            path.write_text(original.replace(old, new, 1), encoding="utf-8")
            rc, out = run_check(root, args)
            path.write_text(original, encoding="utf-8")
            needs_haproxy = expected == "haproxy -c" and "skipped: haproxy -c" in out
            if needs_haproxy:
                print(f"skipped: {file}: {expected} (haproxy or openssl missing)")
            elif rc != 1 or expected not in out:
                missed.append(f"{file}: {old!r} -> {new!r}: expected a failure with "
                              f"{expected!r}, got exit {rc}:\n{out}")
            else:
                print(f"caught: {file}: {expected}")
    for m in missed:
        print(f"FAIL: {m}")
    if not missed:
        print(f"all {len(mutations)} mutations caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
