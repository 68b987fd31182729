#!/usr/bin/env python3
"""Checks deploy/ without a cluster, a container engine or systemd running: every file parses,
and the numbers that must agree across files do (ports, the drain grace against the stop
timeouts, the user id, the config path, the model path, the run-time packages against the
binaries' shared libraries); every deployment serves TLS with API keys and probes health over
TLS, and HAProxy verifies the replicas (tls_checks.py). Run by ctest (deploy_check) and by
hand:

    deploy/check.py [--streamd build/tools/streamd] [--streamctl build/tools/streamctl/streamctl]

With the binaries, the systemd unit is also run through `systemd-analyze verify` (ExecStart
pointed at the built binary) and the image's package list is checked against `ldd`. Checks whose
tool is missing (systemd-analyze, apt-cache, dpkg, haproxy, openssl) are reported as skipped.
Exit 0 when all checks that ran passed, 1 on any failure, 77 (ctest's skip) when PyYAML is
missing.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import tls_checks

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML is missing (apt-get install python3-yaml)")
    sys.exit(77)

DEPLOY = pathlib.Path(__file__).resolve().parent
ROOT = DEPLOY.parent
# What the drain takes beyond server.shutdown_grace: the cancelled generations get 5 s to
# report (kCancelGrace), the changed sessions 10 s to be written to the snapshot directory
# (PersistenceOptions::flush_timeout) and the server 1 s to stop (server/grpc_server.cc).
SHUTDOWN_SLACK_S = 16
# Where the deployed daemon keeps session snapshots (deploy/streamd.yaml, the systemd unit's
# StateDirectory, the image's volume, the pod's mount).
SNAPSHOT_DIR = "/var/lib/streamd-sessions"

failures = []
skips = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


def duration_s(text):
    """A streamd or systemd duration ("30s", "1m30s", "250ms", "45") in seconds."""
    text = str(text).strip()
    if re.fullmatch(r"\d+", text):
        return float(text)  # systemd: bare seconds (streamd rejects these; only "0")
    total, pos = 0.0, 0
    units = {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400, "min": 60}
    for m in re.finditer(r"(\d+(?:\.\d+)?)\s*(ms|min|s|m|h|d)", text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * units[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ValueError(f"not a duration: {text!r}")
    return total


def size_bytes(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|TiB|Ki|Mi|Gi|Ti|KB|MB|GB|TB)?", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r}")
    scale = {None: 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "Ki": 2**10,
             "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
    return float(m.group(1)) * scale[m.group(2)]


def port_of(address):
    return int(str(address).rsplit(":", 1)[1])


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    check(len(docs) == 1, f"{path}: expected one YAML document, found {len(docs)}")
    check(isinstance(docs[0], dict), f"{path}: not a mapping")
    return docs[0]


def subset(labels, of):
    return all(of.get(k) == v for k, v in labels.items())


def effective(config, args, key):
    """The value of a dotted config key: the last --key=value of `args`, else the file's."""
    flag = f"--{key}="
    given = [a[len(flag):] for a in args if str(a).startswith(flag)]
    if given:
        return given[-1]
    node = config
    for part in key.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node if node != {} else None


def check_listen_guard(name, config, args):
    """streamd refuses a non-loopback listen address unless clients are authenticated (mTLS)
    or auth.allow_insecure is true (server/listen_security.h): a deployment that would not
    start is caught here."""
    listen = str(effective(config, args, "server.listen_address") or "127.0.0.1:50051")
    host = listen.rsplit(":", 1)[0].strip("[]")
    loopback = listen.startswith("unix:") or host in ("localhost", "::1") or \
        host.startswith("127.")
    mtls = bool(effective(config, args, "server.tls.client_ca_file")) and \
        bool(effective(config, args, "server.tls.cert_file"))
    keys = bool(effective(config, args, "auth.keys_file"))
    insecure = str(effective(config, args, "auth.allow_insecure")).lower() == "true"
    check(loopback or mtls or keys or insecure,
          f"{name}: listens on {listen} with neither API keys (auth.keys_file), mTLS "
          "(server.tls.client_ca_file) nor auth.allow_insecure: true; streamd would refuse to "
          "start")


def check_systemd(streamd_binary):
    unit = DEPLOY / "systemd" / "streamd.service"
    text = unit.read_text(encoding="utf-8")
    values = tls_checks.unit_values(text)
    config = load_yaml(DEPLOY / "streamd.yaml")
    grace = duration_s(config["server"]["shutdown_grace"])
    stop = duration_s(values["TimeoutStopSec"][0])
    check(stop > grace + SHUTDOWN_SLACK_S,
          f"{unit.name}: TimeoutStopSec={stop:g}s does not exceed server.shutdown_grace "
          f"({grace:g}s in deploy/streamd.yaml) + {SHUTDOWN_SLACK_S}s")
    exec_start = tls_checks.exec_start_argv(values)
    check(exec_start[1:4] == ["serve", "--config", "/etc/streamd/streamd.yaml"],
          f"{unit.name}: ExecStart is {exec_start}, not streamd serve --config "
          "/etc/streamd/streamd.yaml ...")
    for f in tls_checks.systemd_failures(values, exec_start,
                                         lambda key: effective(config, exec_start[2:], key)):
        check(False, f)
    check(config.get("sessions", {}).get("snapshot_dir") == SNAPSHOT_DIR,
          f"deploy/streamd.yaml: sessions.snapshot_dir is not {SNAPSHOT_DIR}")
    check_listen_guard(unit.name, config, exec_start[2:])
    for key, want in [("KillSignal", "SIGTERM"), ("Restart", "on-failure"),
                      ("ProtectSystem", "strict"), ("NoNewPrivileges", "yes"),
                      ("DynamicUser", "yes"),
                      ("StateDirectory", SNAPSHOT_DIR.removeprefix("/var/lib/"))]:
        check(values.get(key) == [want], f"{unit.name}: {key} is {values.get(key)}, not {want}")
    if streamd_binary is None or shutil.which("systemd-analyze") is None:
        skips.append("systemd-analyze verify (needs systemd-analyze and --streamd)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp) / "streamd.service"
        built = str(pathlib.Path(streamd_binary).resolve())
        copy.write_text(text.replace("ExecStart=" + exec_start[0], "ExecStart=" + built),
                        encoding="utf-8")
        r = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                           text=True, check=False)
        # verify exits 0 on unknown keys and bad values; they only show as warnings.
        out = (r.stdout + r.stderr).strip()
        check(r.returncode == 0 and not out, f"systemd-analyze verify {unit.name}: {out}")


def containerfile():
    path = DEPLOY / "container" / "Containerfile"
    lines, current = [], ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    return path, lines


def runtime_packages(lines):
    """The packages the final stage installs (the apt-get install after the last FROM)."""
    last_from = max(i for i, l in enumerate(lines) if l.startswith("FROM "))
    packages = []
    for l in lines[last_from:]:
        if l.startswith("RUN ") and "apt-get install" in l:
            words = l.split("apt-get install", 1)[1].split("&&")[0].split()
            packages += [w for w in words if not w.startswith("-")]
    return packages


def check_container(streamd_binary, streamctl_binary):
    path, lines = containerfile()
    name = "Containerfile"
    cmd = next(l for l in lines if l.startswith("CMD "))
    import json
    cmd_args = json.loads(cmd[4:])
    listen = [a.split("=", 1)[1] for a in cmd_args if a.startswith("--server.listen_address=")]
    metrics = [a.split("=", 1)[1] for a in cmd_args if a.startswith("--server.metrics_address=")]
    expose = sorted(int(p) for l in lines if l.startswith("EXPOSE ") for p in l.split()[1:])
    if check(len(listen) == 1 and len(metrics) == 1, f"{name}: CMD sets no addresses"):
        check(expose == sorted([port_of(listen[0]), port_of(metrics[0])]),
              f"{name}: EXPOSE {expose} is not the CMD's ports {listen + metrics}")
    check("/etc/streamd/streamd.yaml" in cmd_args, f"{name}: CMD does not read "
          "/etc/streamd/streamd.yaml")
    check_listen_guard(name + " CMD", load_yaml(DEPLOY / "streamd.yaml"), cmd_args)
    user = [l.split()[1] for l in lines if l.startswith("USER ")]
    check(len(user) == 1 and re.fullmatch(r"[1-9]\d*:\d+", user[0]),
          f"{name}: USER {user} is not one numeric, non-root uid:gid")
    health = next((l for l in lines if l.startswith("HEALTHCHECK ")), "")
    config = load_yaml(DEPLOY / "streamd.yaml")
    failures, _ = tls_checks.containerfile_failures(
        health, lambda key: effective(config, cmd_args, key),
        port_of(listen[0]) if listen else None, duration_s)
    for f in failures:
        check(False, f)
    # The image reads its TLS files and keys where the pod mounts its Secrets, so that one
    # description of the files (deploy/README.md) serves both.
    pod = load_yaml(DEPLOY / "kubernetes" / "streamd.yaml")
    for key in ("server.tls.cert_file", "server.tls.key_file", "auth.keys_file"):
        check(effective(config, cmd_args, key) == effective(pod, [], key),
              f"{name}: CMD's {key} is not kubernetes/streamd.yaml's")
    check(any(l.startswith("STOPSIGNAL SIGTERM") for l in lines), f"{name}: no STOPSIGNAL SIGTERM")
    # The model path of the config the image runs with lies where the image puts the models.
    model = pathlib.PurePosixPath(config["model"]["path"])
    copies = [l.split()[-1] for l in lines if l.startswith("COPY --from=build /models/")]
    check(copies == [str(model.parent) + "/"],
          f"{name}: models are copied to {copies}, deploy/streamd.yaml reads {model}")
    check(model.name in (ROOT / "scripts" / "fetch-model.sh").read_text(encoding="utf-8"),
          f"deploy/streamd.yaml: {model.name} is not the file scripts/fetch-model.sh fetches")
    # Every COPY source exists and is let through by the ignore file.
    ignore = (DEPLOY / "container" / "Containerfile.dockerignore").read_text(encoding="utf-8")
    allowed = [l[1:].rstrip("/") for l in ignore.splitlines() if l.startswith("!")]
    for l in lines:
        if l.startswith("COPY ") and "--from=" not in l:
            for src in l.split()[1:-1]:
                src = src.rstrip("/")
                check((ROOT / src).exists(), f"{name}: COPY {src}: no such file")
                check(any(src == a or src.startswith(a + "/") for a in allowed),
                      f"{name}: COPY {src} is excluded by Containerfile.dockerignore")
    # The run-time packages provide every shared library of the two binaries.
    packages = runtime_packages(lines)
    check(packages, f"{name}: the final stage installs no packages")
    if not (streamd_binary and streamctl_binary and shutil.which("ldd") and
            shutil.which("dpkg") and shutil.which("apt-cache")):
        skips.append("run-time packages vs ldd (needs ldd, dpkg, apt-cache and the binaries)")
        return
    # One apt-cache for all of them (each call loads the whole package cache: 0.7 s).
    r = subprocess.run(["apt-cache", "show", "--no-all-versions"] + packages, capture_output=True,
                       text=True, check=False)
    known = {l[len("Package: "):].strip() for l in r.stdout.splitlines()
             if l.startswith("Package: ")}
    for p in packages:
        check(p in known, f"{name}: package {p} is unknown to apt-cache")
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                        "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] +
                       packages, capture_output=True, text=True, check=False)
    closure = set(packages) | {l.strip() for l in r.stdout.splitlines()
                               if l and not l.startswith(" ")}
    closure |= {l.split(":", 1)[1].strip().strip("<>") for l in r.stdout.splitlines()
                if "Depends:" in l}
    needs = {}  # binary -> the paths of its libraries
    for binary in (streamd_binary, streamctl_binary):
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        check("not found" not in out, f"ldd {binary}: a library is not found:\n{out}")
        needs[binary] = re.findall(r"=> (/\S+)", out)

    def candidates(lib):
        """The names dpkg may know a library by (the merged /usr moves /lib under /usr)."""
        real = str(pathlib.Path(lib).resolve())
        return (real, lib, real.replace("/usr/lib/", "/lib/"), real.replace("/lib/", "/usr/lib/", 1))

    # One dpkg -S for every name at once: each call reads dpkg's whole file list (one call per
    # name took 18 s). It prints "package[:arch][, ...]: path" for each name it knows.
    names = sorted({c for libs in needs.values() for lib in libs for c in candidates(lib)})
    r = subprocess.run(["dpkg", "-S"] + names, capture_output=True, text=True, check=False)
    owners = {}
    for line in r.stdout.splitlines():
        owned_by, sep, path = line.rpartition(": ")
        if sep and path.startswith("/"):
            owners.setdefault(path, owned_by.split(",")[0].split(":")[0].strip())
    for binary, libs in needs.items():
        for lib in libs:
            owner = next((owners[c] for c in candidates(lib) if c in owners), None)
            if check(owner is not None, f"{binary}: {lib} belongs to no Debian package"):
                check(owner in closure,
                      f"{name}: {pathlib.Path(binary).name} needs {lib} from {owner}, which the "
                      f"run-time stage does not install ({' '.join(packages)})")


# The header streamd and its clients route sessions by (proto/streamd/v1/session_affinity.h).
AFFINITY_HEADER = re.search(
    r'kSessionAffinityHeader\[\] = "([^"]+)"',
    (DEPLOY.parent / "proto/streamd/v1/session_affinity.h").read_text()).group(1)


def check_haproxy_config(name, text):
    """The routing every proxy config must have: h2, the stick table learnt from the answer,
    consistent hashing on the affinity header."""
    for line in (f"balance hdr({AFFINITY_HEADER})", "hash-type consistent",
                 f"stick on req.hdr({AFFINITY_HEADER})",
                 f"stick store-response res.hdr({AFFINITY_HEADER})", "proto h2"):
        check(line in text, f"{name}: no `{line}` (sessions would not follow their key)")


def check_haproxy_http_config(name, text):
    """The HTTP API's routing (haproxy-http.cfg): HTTP/1.1 to the replicas (never h2: the
    daemon's HTTP port speaks HTTP/1.1), the session from the affinity header or from
    previous_response_id, learnt from the answer, hashed consistently, and balanced on a header
    of the proxy's own so that requests without a session are spread round-robin."""
    for line in (f"req.hdr({AFFINITY_HEADER}) -m reg ^[0-9a-f]{{32}}$",
                 "req.body,json_query('$.previous_response_id'),field(2,_)",
                 "http-request wait-for-body", "http-request del-header x-streamd-route",
                 "balance hdr(x-streamd-route)", "hash-type consistent",
                 "stick on var(txn.session)", f"stick store-response res.hdr({AFFINITY_HEADER})"):
        check(line in text, f"{name}: no `{line}` (HTTP sessions would not follow their key)")
    check("proto h2" not in text, f"{name}: `proto h2` to the daemon's HTTP/1.1 port")


# The keywords that open a section of an HAProxy config, and the lines that name the servers
# (which differ between the host's and the cluster's config while the routing may not).
HAPROXY_SECTIONS = ("global", "defaults", "frontend", "backend", "listen", "resolvers", "peers",
                    "userlist", "cache", "program", "http-errors", "ring", "mailers")
SERVER_LINES = ("server", "server-template", "default-server")


def haproxy_sections(name, text):
    """An HAProxy config's sections: {'frontend grpc': [its lines], ...}, each line without its
    comment, its words joined by one blank; blank lines left out."""
    sections, current = {}, None
    for raw in text.splitlines():
        words = tls_checks.strip_comment(raw).split()
        if not words:
            continue
        if words[0] in HAPROXY_SECTIONS:
            current = " ".join(words[:2])
            check(current not in sections, f"{name}: `{current}` appears twice")
            sections[current] = []
        elif current is not None:
            sections[current].append(" ".join(words))
    return sections


def section_text(sections, names):
    return "\n".join(f"{n}\n" + "\n".join(f"    {l}" for l in sections.get(n, [])) for n in names)


def routing_rules(lines):
    """A section's lines but where it listens and which servers it reaches."""
    return [l for l in lines if l.split()[0] not in ("bind",) + SERVER_LINES]


def bind_port(lines):
    binds = [l.split() for l in lines if l.startswith("bind ")]
    return port_of(binds[0][1].strip('"')) if len(binds) == 1 else None


def server_template(lines):
    """(host, port) of a backend's one `server-template NAME COUNT HOST:PORT`, else None."""
    found = [re.fullmatch(r"server-template \S+ \d+ ([\w.-]+):(\d+)(?: .*)?", l) for l in lines]
    found = [m for m in found if m]
    return (found[0].group(1), int(found[0].group(2))) if len(found) == 1 else None


def service_port_failures(name, service, port_name, port=None):
    """The Service `service` has a port `port_name` to the container port of that name (and,
    given `port`, with that number)."""
    ports = {p.get("name"): p for p in service["spec"].get("ports", [])}
    p = ports.get(port_name, {})
    if p.get("targetPort") != port_name or (port is not None and p.get("port") != port):
        return [f"{name}: no port {port_name}" + (f" {port}" if port is not None else "") +
                f" to the container port {port_name}"]
    return []


def check_proxy(k8s, docs, kust, generated, pod_labels, replicas_name, pod_ports):
    local_cfg = (DEPLOY / "haproxy/haproxy.cfg").read_text()
    http_cfg = (DEPLOY / "haproxy/haproxy-http.cfg").read_text()
    check_haproxy_http_config("haproxy/haproxy-http.cfg", http_cfg)
    # The id the body is searched for is the daemon's ("resp_" + session + "_" + n).
    responses = (ROOT / "server/http/responses.cc").read_text()
    check('return "resp_" + session_id + "_" + std::to_string(index);' in responses,
          "haproxy-http.cfg, kubernetes/haproxy.cfg: server/http/responses.cc no longer makes "
          "ids resp_<session>_<n>, which field(2,_) takes the session from")
    http_failures, _ = tls_checks.haproxy_failures("haproxy/haproxy-http.cfg", http_cfg,
                                                   alpn="http/1.1")
    for f in http_failures:
        check(False, f)
    k8s_cfg = (k8s / "haproxy.cfg").read_text()
    check_haproxy_config("haproxy/haproxy.cfg", local_cfg)
    # The cluster's config holds both: the HTTP API's frontend and backend under the names
    # haproxy-http.cfg gives them, with the same rules (only bind and server lines differ, so
    # that the two cannot drift apart), and gRPC's in the other frontend and backend.
    k8s_sections = haproxy_sections("kubernetes/haproxy.cfg", k8s_cfg)
    http_sections = haproxy_sections("haproxy/haproxy-http.cfg", http_cfg)
    http_names = [n for n in http_sections if n.split()[0] in ("frontend", "backend")]
    check([n.split()[0] for n in http_names] == ["frontend", "backend"],
          f"haproxy/haproxy-http.cfg: not one frontend and one backend: {http_names}")
    for n in http_names:
        if not check(n in k8s_sections, f"kubernetes/haproxy.cfg: no `{n}` of haproxy-http.cfg "
                     "(the in-cluster proxy would not route the HTTP API)"):
            continue
        ours, theirs = routing_rules(k8s_sections[n]), routing_rules(http_sections[n])
        check(ours == theirs,
              f"kubernetes/haproxy.cfg: the rules of `{n}` differ from haproxy/haproxy-http.cfg's "
              f"(only bind and server lines may): only here {[l for l in ours if l not in theirs]}"
              f", only there {[l for l in theirs if l not in ours]}")
    grpc_names = [n for n in k8s_sections
                  if n.split()[0] in ("frontend", "backend") and n not in http_names]
    k8s_grpc = section_text(k8s_sections, grpc_names)
    k8s_http = section_text(k8s_sections, http_names)
    check_haproxy_config("kubernetes/haproxy.cfg", k8s_grpc)
    check_haproxy_http_config("kubernetes/haproxy.cfg (HTTP API)", k8s_http)
    # TLS to clients and to the replicas, verified (tls_checks.py): gRPC with ALPN h2, the
    # HTTP API with http/1.1, from the same mounted files.
    local_failures, _ = tls_checks.haproxy_failures("haproxy/haproxy.cfg", local_cfg)
    k8s_failures, found = tls_checks.haproxy_failures("kubernetes/haproxy.cfg", k8s_grpc)
    k8s_http_failures, found_http = tls_checks.haproxy_failures(
        "kubernetes/haproxy.cfg (HTTP API)", k8s_http, alpn="http/1.1")
    for f in local_failures + k8s_failures + k8s_http_failures + \
            tls_checks.proxy_pod_failures(docs["proxy.yaml"], found, replicas_name) + \
            tls_checks.proxy_pod_failures(docs["proxy.yaml"], found_http, replicas_name):
        check(False, f)
    if shutil.which("haproxy") is None or shutil.which("openssl") is None:
        skips.append("haproxy -c (needs haproxy and openssl)")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            # Files as the configs name them: the pod's mounts become directories of test
            # certificates; the host config takes its files from the environment.
            tls = tls_checks.make_test_tls(tmp)
            shutil.copy(tls["tls.key"], tls["tls.crt"] + ".key")
            env = dict(os.environ, STREAMD_PROXY_BIND="127.0.0.1:50051",
                       STREAMD_PROXY_CERT=tls["tls.crt"], STREAMD_REPLICA_CA=tls["ca.crt"],
                       STREAMD_REPLICA_NAME="streamd",
                       STREAMD_REPLICA_0="127.0.0.1:50052", STREAMD_REPLICA_1="127.0.0.1:50053",
                       STREAMD_PROXY_HTTP_BIND="127.0.0.1:8443",
                       STREAMD_REPLICA_0_HTTP="127.0.0.1:8081",
                       STREAMD_REPLICA_1_HTTP="127.0.0.1:8082")
            rendered = render_k8s_haproxy(k8s_cfg, (found, found_http), tls)
            for cfg, text in (("haproxy/haproxy.cfg", local_cfg),
                              ("kubernetes/haproxy.cfg", rendered),
                              # As it is run: after haproxy.cfg, whose defaults it uses.
                              ("haproxy/haproxy.cfg + haproxy-http.cfg",
                               local_cfg + "\n" + http_cfg)):
                error = tls_checks.haproxy_check(text, env, tmp)
                check(error is None, f"{cfg}: haproxy -c: {error}")
    for r in ("proxy.yaml", "proxy-service.yaml", "headless-service.yaml"):
        check(r in kust["resources"], f"kustomization.yaml: {r} is not a resource")
    proxy = docs["proxy.yaml"]
    (haproxy,) = proxy["spec"]["template"]["spec"]["containers"]
    cfg_volume = proxy["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    check(generated.get(cfg_volume, {}).get("files") == ["haproxy.cfg"],
          f"proxy.yaml: ConfigMap {cfg_volume} is not generated from haproxy.cfg")
    check(proxy["spec"].get("replicas", 1) == 1 or "peers" in (k8s / "haproxy.cfg").read_text(),
          "proxy.yaml: several proxies without a peers section do not share the stick table")
    headless = docs["headless-service.yaml"]
    check(headless["spec"].get("clusterIP") == "None" and
          headless["spec"].get("publishNotReadyAddresses") is True and
          subset(headless["spec"]["selector"], pod_labels),
          "headless-service.yaml: not a headless Service of every streamd pod, ready or not")
    front = docs["proxy-service.yaml"]
    check(subset(front["spec"]["selector"],
                 proxy["spec"]["template"]["metadata"]["labels"]),
          "proxy-service.yaml: the selector does not match the proxy pods")
    # Each API end to end, by port name: the Service streamd-proxy -> the proxy's container
    # port -> the frontend's bind; the backend's server-template -> the headless Service's pods
    # -> the daemon's container port (which check_kubernetes ties to streamd.yaml).
    proxy_ports = {p["name"]: p["containerPort"] for p in haproxy.get("ports", [])}
    for api, names in (("grpc", grpc_names), ("http", http_names)):
        frontend = next((n for n in names if n.startswith("frontend ")), None)
        backend = next((n for n in names if n.startswith("backend ")), None)
        if not check(frontend and backend,
                     f"kubernetes/haproxy.cfg: no frontend and backend for {api}"):
            continue
        bound = bind_port(k8s_sections[frontend])
        check(bound is not None and proxy_ports.get(api) == bound,
              f"proxy.yaml: containerPort {api} is {proxy_ports.get(api)}, not the port "
              f"kubernetes/haproxy.cfg's `{frontend}` binds ({bound})")
        for f in service_port_failures("proxy-service.yaml", front, api):
            check(False, f)
        server = server_template(k8s_sections[backend])
        if check(server is not None and server[0] == headless["metadata"]["name"],
                 f"kubernetes/haproxy.cfg: the servers of `{backend}` are not the headless "
                 "Service's pods (one server-template HOST:PORT)"):
            check(server[1] == pod_ports.get(api),
                  f"kubernetes/haproxy.cfg: the servers of `{backend}` are on port {server[1]}, "
                  f"not deployment.yaml's containerPort {api} ({pod_ports.get(api)})")
            for f in service_port_failures("headless-service.yaml", headless, api, server[1]):
                check(False, f)


def render_k8s_haproxy(text, founds, tls):
    """kubernetes/haproxy.cfg with the mounted files it names (`founds`: what
    tls_checks.haproxy_failures found) replaced by the test ones (`tls`)."""
    for found in founds:
        for path, file in ((found.get("crt"), tls["tls.crt"]),
                           (found.get("ca-file"), tls["ca.crt"])):
            if path:
                text = text.replace(path, file)
    return text


def check_kubernetes():
    k8s = DEPLOY / "kubernetes"
    docs = {}
    for path in sorted(k8s.glob("*.yaml")):
        doc = load_yaml(path)
        if path.name not in ("streamd.yaml", "kustomization.yaml", "keys.example.yaml"):
            check("apiVersion" in doc and "kind" in doc and "name" in doc.get("metadata", {}),
                  f"{path.name}: no apiVersion, kind or metadata.name")
        docs[path.name] = doc
    kust, config = docs["kustomization.yaml"], docs["streamd.yaml"]
    for r in kust["resources"]:
        check((k8s / r).exists(), f"kustomization.yaml: resource {r} does not exist")
    generated = {g["name"]: g for g in kust.get("configMapGenerator", [])}
    dep = docs["deployment.yaml"]
    svc = docs["service.yaml"]
    check(dep["kind"] == "Deployment" and svc["kind"] == "Service", "unexpected kinds")
    pod = dep["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    check(subset(dep["spec"]["selector"]["matchLabels"], pod_labels),
          "deployment.yaml: the selector does not match the pod labels")
    check(subset(svc["spec"]["selector"], pod_labels),
          "service.yaml: the selector does not match the pod labels")
    check(subset(docs["pdb.yaml"]["spec"]["selector"]["matchLabels"], pod_labels),
          "pdb.yaml: the selector does not match the pod labels")
    mon = docs["servicemonitor.yaml"]
    check(subset(mon["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"]),
          "servicemonitor.yaml: the selector does not match the Service's labels")
    check("servicemonitor.yaml" not in kust["resources"],
          "kustomization.yaml: servicemonitor.yaml needs the Prometheus Operator's CRD; keep it "
          "out of the default resources")
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check(ports.get("grpc") == port_of(config["server"]["listen_address"]),
          "deployment.yaml: containerPort grpc is not streamd.yaml's server.listen_address port")
    check(ports.get("metrics") == port_of(config["server"]["metrics_address"]),
          "deployment.yaml: containerPort metrics is not streamd.yaml's metrics_address port")
    check(config["server"]["listen_address"].startswith(("0.0.0.0:", "[::]:")),
          "kubernetes/streamd.yaml: a pod must listen on every interface, not loopback")
    # The HTTP API: on, on every interface, on a port of its own (streamd refuses a shared
    # one), which the pod declares; service.yaml exposes it below.
    http_address = str(config["server"].get("http_address") or "")
    if check(bool(http_address), "kubernetes/streamd.yaml: server.http_address is not set "
             "(the HTTP API would be off)"):
        check(ports.get("http") == port_of(http_address),
              "deployment.yaml: containerPort http is not streamd.yaml's server.http_address port")
        check(http_address.startswith(("0.0.0.0:", "[::]:")),
              "kubernetes/streamd.yaml: server.http_address must be on every interface, not "
              "loopback")
        check(port_of(http_address) not in (ports.get("grpc"), ports.get("metrics")),
              "kubernetes/streamd.yaml: server.http_address shares a port with gRPC or metrics")
    check_listen_guard("kubernetes/streamd.yaml", config, container.get("args", []))
    # TLS files, the keys file and the probes' CA from their Secrets; exec probes over TLS
    # (tls_checks.py).
    check(bool(effective(config, container.get("args", []), "auth.keys_file")),
          "kubernetes/streamd.yaml: a pod on every interface needs API keys (auth.keys_file)")
    failures, replicas_name = tls_checks.pod_failures(
        pod["spec"], container, lambda key: effective(config, container.get("args", []), key),
        port_of(config["server"]["listen_address"]))
    for f in failures:
        check(False, f)
    check((k8s / "keys.example.yaml").exists() and
          "keys.example.yaml" not in kust["resources"],
          "kustomization.yaml: keys.example.yaml documents the Secret's format; it is no resource")
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    for p in svc_ports.values():
        check(p["targetPort"] in ports, f"service.yaml: targetPort {p['targetPort']} is no "
              "container port")
    for name in ("grpc", "http"):
        check(svc_ports.get(name, {}).get("targetPort") == name,
              f"service.yaml: no port {name} to the container port {name}")
    for e in mon["spec"]["endpoints"]:
        check(e["port"] in svc_ports, f"servicemonitor.yaml: port {e['port']} is no Service port")
    ann = pod["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true" and
          int(ann.get("prometheus.io/port", 0)) == ports.get("metrics"),
          "deployment.yaml: prometheus.io annotations do not point at the metrics port")
    # The ServiceMonitor scrapes what the pod serves: plain HTTP unless server.metrics_tls.
    metrics_tls = bool(effective(config, container.get("args", []),
                                 "server.metrics_tls.cert_file"))
    for e in mon["spec"]["endpoints"]:
        check(e.get("scheme", "http") == ("https" if metrics_tls else "http"),
              f"servicemonitor.yaml: scheme {e.get('scheme', 'http')} on a metrics port that "
              f"serves {'HTTPS' if metrics_tls else 'plain HTTP'}")
    check(ann.get("prometheus.io/scheme", "http") == ("https" if metrics_tls else "http"),
          "deployment.yaml: prometheus.io/scheme does not match the metrics port")
    # The drain fits in the termination grace period.
    grace = duration_s(config["server"]["shutdown_grace"])
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    sleep = pre_stop.get("exec", {}).get("command", [])
    pre_stop_s = float(sleep[1]) if sleep[:1] == ["sleep"] else \
        float(pre_stop.get("sleep", {}).get("seconds", 0))
    tgps = pod["spec"]["terminationGracePeriodSeconds"]
    check(tgps > pre_stop_s + grace + SHUTDOWN_SLACK_S,
          f"deployment.yaml: terminationGracePeriodSeconds {tgps} does not exceed preStop "
          f"{pre_stop_s:g}s + shutdown_grace {grace:g}s + {SHUTDOWN_SLACK_S}s")
    # Config: mounted where --config reads it, from the generated ConfigMap.
    args = container.get("args", [])
    check(args[:2] == ["--config", "/etc/streamd/streamd.yaml"],
          f"deployment.yaml: args {args} do not read /etc/streamd/streamd.yaml")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    # Session snapshots: a writable volume where the config puts them (the root filesystem is
    # read-only).
    snapshot_dir = config.get("sessions", {}).get("snapshot_dir")
    check(snapshot_dir == SNAPSHOT_DIR,
          f"kubernetes/streamd.yaml: sessions.snapshot_dir is not {SNAPSHOT_DIR}")
    check(snapshot_dir in mounts.values(),
          f"deployment.yaml: nothing is mounted at sessions.snapshot_dir ({snapshot_dir})")
    # Replicas share it: a ReadWriteMany claim, and at least two of them (a drain moves
    # sessions to another), one at a time disrupted.
    sessions_volume = next((n for n, m in mounts.items() if m == snapshot_dir), None)
    claim = volumes.get(sessions_volume, {}).get("persistentVolumeClaim", {}).get("claimName")
    pvc = docs.get("sessions-pvc.yaml", {})
    check(claim is not None and pvc.get("metadata", {}).get("name") == claim and
          "sessions-pvc.yaml" in kust["resources"],
          "deployment.yaml: sessions.snapshot_dir is not the shared claim of sessions-pvc.yaml")
    check("ReadWriteMany" in pvc.get("spec", {}).get("accessModes", []),
          "sessions-pvc.yaml: the snapshot volume is not ReadWriteMany (replicas share it)")
    check(dep["spec"].get("replicas", 1) >= 2, "deployment.yaml: fewer than 2 replicas")
    check(docs["pdb.yaml"]["spec"].get("maxUnavailable") == 1,
          "pdb.yaml: more than one replica may be disrupted at a time")
    check_proxy(k8s, docs, kust, generated, pod_labels, replicas_name, ports)
    config_volumes = [n for n, m in mounts.items() if m == "/etc/streamd"]
    if check(len(config_volumes) == 1, "deployment.yaml: nothing is mounted at /etc/streamd"):
        cm = volumes[config_volumes[0]].get("configMap", {}).get("name")
        if check(cm in generated, f"deployment.yaml: ConfigMap {cm} is not generated by "
                 "kustomization.yaml"):
            check(generated[cm]["files"] == ["streamd.yaml"],
                  "kustomization.yaml: the ConfigMap must hold exactly streamd.yaml")
    # Identity and resources.
    _, lines = containerfile()
    uid, gid = next(l.split()[1] for l in lines if l.startswith("USER ")).split(":")
    sc = pod["spec"].get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and str(sc.get("runAsUser")) == uid and
          str(sc.get("runAsGroup")) == gid,
          f"deployment.yaml: securityContext does not run as the image's user {uid}:{gid}")
    csc = container.get("securityContext", {})
    check(csc.get("allowPrivilegeEscalation") is False and csc.get("readOnlyRootFilesystem") is True,
          "deployment.yaml: the container may escalate privileges or write its root filesystem")
    res = container["resources"]
    threads = config["engine"]["threads"]
    check(threads > 0 and str(res["limits"]["cpu"]) == str(threads),
          f"deployment.yaml: cpu limit {res['limits']['cpu']} is not engine.threads {threads}")
    check(size_bytes(config["engine"]["kv_pool"]) < size_bytes(res["limits"]["memory"]),
          "deployment.yaml: the memory limit does not hold engine.kv_pool")
    # The model path is the image's.
    check(config["model"]["path"] == load_yaml(DEPLOY / "streamd.yaml")["model"]["path"],
          "kubernetes/streamd.yaml: model.path is not the image's (deploy/streamd.yaml)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streamd", help="the built streamd binary")
    parser.add_argument("--streamctl", help="the built streamctl binary")
    a = parser.parse_args()
    for f in (check_systemd, check_container, check_kubernetes):
        try:
            if f is check_systemd:
                f(a.streamd)
            elif f is check_container:
                f(a.streamd, a.streamctl)
            else:
                f()
        except (KeyError, IndexError, StopIteration, ValueError, TypeError) as e:
            failures.append(f"{f.__name__}: missing or malformed field: {e!r}")
    for f in tls_checks.insecure_failures(DEPLOY):
        failures.append(f)
    for s in skips:
        print(f"skipped: {s}")
    for m in dict.fromkeys(failures):  # once each: a file two checks share may fail both
        print(f"FAIL: {m}")
    if not failures:
        print("deploy/ checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
