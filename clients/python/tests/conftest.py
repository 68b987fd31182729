import hashlib
import os
import secrets
import subprocess

import pytest

from streamd_client.testing import Daemon


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    d.stop()


def _openssl(tmp, *args):
    r = subprocess.run(["openssl", *args], cwd=tmp, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("openssl " + " ".join(args) + ": " + r.stderr)


@pytest.fixture(scope="session")
def secure_daemon(tmp_path_factory):
    """TLS with a CA made here by openssl, and API keys of two tenants (docs/SECURITY.md)."""
    tmp = str(tmp_path_factory.mktemp("tls"))
    with open(os.path.join(tmp, "req.cnf"), "w") as f:
        f.write("[req]\ndistinguished_name = dn\n[dn]\n[ca]\nbasicConstraints = critical, CA:TRUE\n"
                "keyUsage = critical, keyCertSign\n")
    with open(os.path.join(tmp, "server.ext"), "w") as f:
        f.write("subjectAltName = DNS:localhost, IP:127.0.0.1\nextendedKeyUsage = serverAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(tmp, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
             "-subj", "/CN=pyclient test ca", "-config", "req.cnf", "-extensions", "ca")
    _openssl(tmp, "req", "-x509", *ec, "-keyout", "other.key", "-out", "other.pem", "-days", "1",
             "-subj", "/CN=pyclient other ca", "-config", "req.cnf", "-extensions", "ca")
    _openssl(tmp, "req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=server", "-config", "req.cnf")
    _openssl(tmp, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-set_serial", str(secrets.randbelow(1 << 60)), "-days", "1",
             "-extfile", "server.ext", "-out", "server.pem")
    keys = {"acme": secrets.token_hex(32), "globex": secrets.token_hex(32)}
    with open(os.path.join(tmp, "keys.yaml"), "w") as f:
        f.write("keys:\n")
        for tenant, key in keys.items():
            f.write(f"  - tenant: {tenant}\n    role: user\n"
                    f"    sha256: {hashlib.sha256(key.encode()).hexdigest()}\n")
    d = Daemon(extra=["--server.tls.cert_file=" + os.path.join(tmp, "server.pem"),
                      "--server.tls.key_file=" + os.path.join(tmp, "server.key"),
                      "--auth.keys_file=" + os.path.join(tmp, "keys.yaml")])
    d.ca = os.path.join(tmp, "ca.pem")
    d.other_ca = os.path.join(tmp, "other.pem")
    d.keys = keys
    yield d
    d.stop()
