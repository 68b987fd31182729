"""The security side of deploy/, for deploy/check.py: every deployment serves TLS with API keys
from files its supervisor provides read-only (Kubernetes Secrets, mounted directories,
systemd credentials), probes health over TLS with the right service per probe, HAProxy
verifies the replicas' certificate, and nothing sets auth.allow_insecure (docs/SECURITY.md).

Pure functions over parsed files, except make_test_tls and haproxy_check (openssl, haproxy).
Each returns the failures it found as messages; check.py reports them.
"""
import json
import os
import pathlib
import re
import shlex
import subprocess

# The Secrets a streamd pod and the proxy read (deploy/kubernetes).
TLS_SECRET = "streamd-tls"          # type kubernetes.io/tls: tls.crt, tls.key, ca.crt
PROXY_TLS_SECRET = "streamd-proxy-tls"
# The keys of a kubernetes.io/tls Secret (and cert-manager's ca.crt).
TLS_CERT_KEY, TLS_KEY_KEY, TLS_CA_KEY = "tls.crt", "tls.key", "ca.crt"
# The health service each probe must ask (server/health_monitor.h): startup the whole server
# (or its liveness), readiness "readiness" (room for a new session), liveness "liveness".
PROBE_SERVICES = {"startupProbe": ("", "streamd.v1.Streamd", "liveness"),
                  "readinessProbe": ("readiness",), "livenessProbe": ("liveness",)}


def strip_comment(line):
    """The part of a config line before its comment: '#' at the start or after a blank, or
    ';' at the start (systemd)."""
    m = re.search(r"^\s*[#;]|\s#", line)
    return line[:m.start()] if m else line


def insecure_failures(deploy_dir):
    """No shipped deploy file sets auth.allow_insecure (prose and this checker excepted)."""
    out = []
    for path in sorted(pathlib.Path(deploy_dir).rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".py", ".json"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "allow_insecure" in strip_comment(line):
                out.append(f"{path.relative_to(deploy_dir)}:{n}: sets auth.allow_insecure "
                           "(every deployment authenticates its clients: API keys over TLS)")
    return out


def serving_failures(name, value):
    """TLS and API keys, given `value(dotted_key)`: the effective config of a deployment."""
    out = []
    for key, what in (("server.tls.cert_file", "the gRPC port would be plaintext"),
                      ("server.tls.key_file", "the gRPC port would be plaintext"),
                      ("auth.keys_file", "every caller would be the anonymous admin")):
        if not value(key):
            out.append(f"{name}: {key} is not set: {what}")
    if str(value("auth.allow_insecure")).lower() == "true":
        out.append(f"{name}: auth.allow_insecure is true")
    return out


def parse_flags(argv):
    """--name value / --name=value pairs of a command line (a flag without a value: "")."""
    flags, i = {}, 0
    while i < len(argv):
        a = str(argv[i])
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
            elif i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
                k, v = a[2:], str(argv[i + 1])
                i += 1
            else:
                k, v = a[2:], ""
            flags[k] = v
        i += 1
    return flags


def health_command_failures(name, argv, port, ca_file, services, timeout_s):
    """`streamctl health` against 127.0.0.1:`port` over TLS, trusting `ca_file`, checking a
    name, asking one of `services`, and giving up (--timeout) before its caller's `timeout_s`.
    Returns (failures, the --tls-server-name)."""
    out = []
    argv = [str(a) for a in argv]
    if len(argv) < 2 or os.path.basename(argv[0]) != "streamctl" or argv[1] != "health":
        return [f"{name}: runs {argv[:2]}, not streamctl health"], None
    f = parse_flags(argv[2:])
    if f.get("address") != f"127.0.0.1:{port}":
        out.append(f"{name}: --address {f.get('address')} is not 127.0.0.1:{port}, the gRPC port")
    if f.get("tls-ca") != ca_file:
        out.append(f"{name}: --tls-ca {f.get('tls-ca')} is not {ca_file} (the CA of the "
                   "server's certificate): health would not be asked over verified TLS")
    if not f.get("tls-server-name"):
        out.append(f"{name}: no --tls-server-name: the certificate's name for 127.0.0.1 is not "
                   "checked against a name it carries")
    if f.get("service", "") not in services:
        out.append(f"{name}: asks service \"{f.get('service', '')}\"; it should ask one of "
                   f"{services}")
    try:
        timeout = float(f.get("timeout", "10"))
    except ValueError:
        timeout = float("inf")
    if not timeout < timeout_s:
        out.append(f"{name}: --timeout {f.get('timeout', '10 (the default)')} s is not below "
                   f"the probe's own {timeout_s:g} s: a slow answer would be killed unreported")
    return out, f.get("tls-server-name")


def secret_mount(pod_spec, container, path):
    """(secret name, file key, volume) of the read-only Secret volume `path` lies in, else
    (None, None, volume or None)."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        mount = m["mountPath"].rstrip("/")
        if not str(path).startswith(mount + "/"):
            continue
        volume = volumes.get(m["name"], {})
        secret = volume.get("secret")
        if secret is None or m.get("readOnly") is not True:
            return None, None, volume
        file = str(path)[len(mount) + 1:]
        items = secret.get("items")
        key = file if items is None else next(
            (i["key"] for i in items if i["path"] == file), None)
        return secret.get("secretName"), key, volume
    return None, None, None


def secret_file_failures(name, pod_spec, container, path, secret, key):
    """`path` is the file `key` of Secret `secret`, mounted read-only, readable by the pod's
    group only (fsGroup = runAsGroup; no permission for others)."""
    got_secret, got_key, volume = secret_mount(pod_spec, container, path)
    if got_secret != secret or got_key != key:
        return [f"{name}: {path} is not the key {key} of the Secret {secret} mounted read-only "
                f"(found: Secret {got_secret}, key {got_key})"]
    sc = pod_spec.get("securityContext", {})
    mode = volume["secret"].get("defaultMode", 0o644)
    out = []
    if sc.get("fsGroup") is None or sc.get("fsGroup") != sc.get("runAsGroup"):
        out.append(f"{name}: no fsGroup equal to runAsGroup: {path} (root's) is unreadable by "
                   "the pod's user")
    if mode & 0o007:
        out.append(f"{name}: the Secret {secret} is mounted with mode {oct(mode)}: readable by "
                   "every user of the container")
    return out


def pod_failures(pod_spec, container, value, grpc_port):
    """A streamd pod: TLS files and the keys file from their Secrets, exec probes over TLS.
    Returns (failures, the name the probes check)."""
    out = serving_failures("kubernetes/streamd.yaml", value)
    cert, key = value("server.tls.cert_file"), value("server.tls.key_file")
    if cert and key:
        out += secret_file_failures("deployment.yaml", pod_spec, container, cert, TLS_SECRET,
                                    TLS_CERT_KEY)
        out += secret_file_failures("deployment.yaml", pod_spec, container, key, TLS_SECRET,
                                    TLS_KEY_KEY)
    if value("auth.keys_file"):
        out += secret_file_failures("deployment.yaml", pod_spec, container,
                                    value("auth.keys_file"), "streamd-keys", "keys.yaml")
    ca_file = str(pathlib.PurePosixPath(str(cert)).parent / TLS_CA_KEY) if cert else None
    if ca_file:
        out += secret_file_failures("deployment.yaml (probes)", pod_spec, container, ca_file,
                                    TLS_SECRET, TLS_CA_KEY)
    names = set()
    for probe, services in PROBE_SERVICES.items():
        p = container.get(probe)
        if p is None or "exec" not in p:
            out.append(f"deployment.yaml: {probe} is not an exec probe (the kubelet's gRPC "
                       "probe cannot speak TLS)")
            continue
        failures, name = health_command_failures(
            f"deployment.yaml {probe}", p["exec"].get("command", []), grpc_port, ca_file,
            services, float(p.get("timeoutSeconds", 1)))
        out += failures
        names.add(name)
    if len(names) > 1:
        out.append(f"deployment.yaml: the probes check different names {sorted(map(str, names))}")
    if str(value("auth.health_requires_key")).lower() == "true":
        out.append("kubernetes/streamd.yaml: auth.health_requires_key is true, but the probes "
                   "hold no key")
    return out, next(iter(names)) if len(names) == 1 else None


def haproxy_tls(text):
    """The TLS settings of an HAProxy config: {'bind': [words of each bind line], 'server':
    [words of each server, server-template and default-server line]}."""
    lines = [strip_comment(l).split() for l in text.splitlines()]
    return {"bind": [l for l in lines if l[:1] == ["bind"]],
            "server": [l for l in lines
                       if l[:1] in (["server"], ["server-template"], ["default-server"])]}


def word_after(words, keyword):
    return words[words.index(keyword) + 1].strip('"') if keyword in words[:-1] else None


def haproxy_failures(name, text, alpn="h2"):
    """Clients get TLS with ALPN `alpn` (h2: gRPC; http/1.1: the HTTP API, haproxy-http.cfg);
    every replica is reached over TLS, its certificate verified against a CA file and a name,
    with ALPN `alpn` for traffic and checks. Returns (failures, {'crt': path, 'ca-file': path,
    'verifyhost': name})."""
    out, found = [], {}
    tls = haproxy_tls(text)
    for b in tls["bind"]:
        if "ssl" not in b or word_after(b, "crt") is None or word_after(b, "alpn") != alpn:
            out.append(f"{name}: `{' '.join(b)}` offers clients no TLS (ssl crt FILE alpn {alpn})")
        else:
            found["crt"] = word_after(b, "crt")
    if not tls["bind"]:
        out.append(f"{name}: no bind line")
    defaults = next((s for s in tls["server"] if s[0] == "default-server"), [])
    for s in tls["server"]:
        if s[0] == "default-server":
            continue
        words = defaults + s  # a server line inherits default-server's settings
        missing = [k for k in ("ssl", "verify", "ca-file", "verifyhost", "alpn")
                   if k not in words]
        if missing or word_after(words, "verify") != "required" or \
                word_after(words, "alpn") != alpn or \
                ("check" in words and word_after(words, "check-alpn") != alpn):
            out.append(f"{name}: `{' '.join(s)}` does not reach the replica over verified TLS "
                       f"(ssl verify required ca-file FILE verifyhost NAME alpn {alpn}, and "
                       f"check-alpn {alpn} for its checks)")
            continue
        found["ca-file"] = word_after(words, "ca-file")
        found["verifyhost"] = word_after(words, "verifyhost")
    if not [s for s in tls["server"] if s[0] != "default-server"]:
        out.append(f"{name}: no server lines")
    return out, found


def proxy_pod_failures(proxy, found, replicas_name):
    """The Kubernetes proxy: its certificate from streamd-proxy-tls (key beside it, as HAProxy
    looks for it), only the replicas' ca.crt from streamd-tls, and the name the probes check."""
    out = []
    spec = proxy["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    crt, ca = found.get("crt"), found.get("ca-file")
    if crt:
        out += secret_file_failures("proxy.yaml", spec, container, crt, PROXY_TLS_SECRET,
                                    TLS_CERT_KEY)
        out += secret_file_failures("proxy.yaml", spec, container, crt + ".key",
                                    PROXY_TLS_SECRET, TLS_KEY_KEY)
    if ca:
        out += secret_file_failures("proxy.yaml", spec, container, ca, TLS_SECRET, TLS_CA_KEY)
        _, _, volume = secret_mount(spec, container, ca)
        items = ((volume or {}).get("secret") or {}).get("items")
        if items is None or [i["key"] for i in items] != [TLS_CA_KEY]:
            out.append(f"proxy.yaml: the Secret {TLS_SECRET} is mounted with more than its "
                       f"{TLS_CA_KEY}: the replicas' private key would reach the proxy")
    if found.get("verifyhost") != replicas_name:
        out.append(f"kubernetes/haproxy.cfg: verifyhost {found.get('verifyhost')} is not "
                   f"{replicas_name}, the name the pods' probes check")
    return out


def containerfile_failures(health_line, value, port, duration_s):
    """The image serves TLS with keys (its CMD: `value`) and its HEALTHCHECK asks streamctl
    health over TLS, trusting the ca.crt beside the certificate, within the check's --timeout
    (Docker's default: 30 s). Returns (failures, the HEALTHCHECK's command)."""
    out = serving_failures("Containerfile CMD", value)
    m = re.match(r"HEALTHCHECK\s+(.*?)\s*CMD\s+(\[.*\])\s*$", health_line or "")
    if not m:
        return out + ["Containerfile: no HEALTHCHECK ... CMD [\"streamctl\", \"health\", ...]"], []
    argv = json.loads(m.group(2))
    cert = value("server.tls.cert_file")
    ca_file = str(pathlib.PurePosixPath(str(cert)).parent / TLS_CA_KEY) if cert else None
    failures, _ = health_command_failures(
        "Containerfile HEALTHCHECK", argv, port, ca_file, PROBE_SERVICES["startupProbe"],
        duration_s(parse_flags(m.group(1).split()).get("timeout", "30s")))
    return out + failures, argv


def systemd_failures(values, exec_start, value):
    """The unit reads the certificate, its key and the keys file as credentials (root's files,
    copied for the service alone), and ExecStart points the daemon at them (%d/NAME)."""
    out = serving_failures("systemd/streamd.service ExecStart", value)
    credentials = {}
    for c in values.get("LoadCredential", []):
        cred, _, source = c.partition(":")
        credentials[cred] = source
    for key in ("server.tls.cert_file", "server.tls.key_file", "auth.keys_file"):
        v = str(value(key) or "")
        if not v.startswith("%d/") or v[3:] not in credentials:
            out.append(f"systemd/streamd.service: {key}={v} is not a credential (%d/NAME with "
                       "LoadCredential=NAME:PATH): the transient user could not read a "
                       "root-only file")
    for cred, source in credentials.items():
        if not source.startswith("/etc/streamd/"):
            out.append(f"systemd/streamd.service: LoadCredential={cred}:{source} is not under "
                       "/etc/streamd")
    return out


def make_test_tls(directory):
    """A CA (ca.crt) and a certificate for "streamd" (tls.crt, tls.key) made by openssl in
    `directory`, for `haproxy -c`, which loads every file its config names."""
    d = pathlib.Path(directory)

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    key_args = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key_args, "-keyout", str(d / "ca.key"), "-out",
            str(d / TLS_CA_KEY), "-subj", "/CN=check.py CA", "-days", "1")
    openssl("req", *key_args, "-keyout", str(d / TLS_KEY_KEY), "-out", str(d / "tls.csr"),
            "-subj", "/CN=streamd")
    openssl("x509", "-req", "-in", str(d / "tls.csr"), "-CA", str(d / TLS_CA_KEY), "-CAkey",
            str(d / "ca.key"), "-set_serial", "1", "-days", "1", "-out", str(d / TLS_CERT_KEY))
    return {k: str(d / k) for k in (TLS_CERT_KEY, TLS_KEY_KEY, TLS_CA_KEY)}


def haproxy_check(config_text, env, tmp):
    """`haproxy -c` of `config_text` (written to `tmp`) with `env`; its error, or None."""
    path = pathlib.Path(tmp) / "haproxy.cfg"
    path.write_text(config_text, encoding="utf-8")
    r = subprocess.run(["haproxy", "-c", "-q", "-f", str(path)], env=env, capture_output=True,
                       text=True, check=False)
    return None if r.returncode == 0 else (r.stderr.strip() or r.stdout.strip())


def unit_values(text):
    """A systemd unit's settings, continuation lines joined: {key: [values in order]}."""
    values, current = {}, ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith(("#", ";", "["))):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        line, current = current + stripped, ""
        if "=" in line:
            key, v = line.split("=", 1)
            values.setdefault(key.strip(), []).append(" ".join(v.split()))
    return values


def exec_start_argv(values):
    return shlex.split(values["ExecStart"][0])
