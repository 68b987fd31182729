"""The daemon the HTTP tests drive (openai_e2e_test.py, openai_agents_test.py): `streamd serve`
with the HTTP API on, every port 0 (read back from its stdout), a snapshot directory of the
test's, and a unittest base class that starts one per test class and fails on an unclean exit.

Environment: STREAMD_BINARY (the streamd executable) and STREAMD_MODEL (the GGUF file).
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

import openai

BINARY = os.environ["STREAMD_BINARY"]
MODEL = os.environ["STREAMD_MODEL"]


class Daemon:
    """`streamd serve` with the HTTP API on, its ports read from its stdout."""

    def __init__(self, directory, extra=()):
        self.dir = directory
        self.out = open(os.path.join(directory, "stdout"), "w+")
        self.err = open(os.path.join(directory, "stderr"), "w+")
        args = [BINARY, "serve", "--model.path=" + MODEL,
                "--server.listen_address=127.0.0.1:0",
                "--server.metrics_address=127.0.0.1:0",
                "--server.http_address=127.0.0.1:0",
                "--engine.kv_pool=96MiB", "--engine.threads=2",
                "--sessions.snapshot_dir=" + os.path.join(directory, "sessions"),
                "--logging.level=warn", *extra]
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=self.err)
        deadline = time.time() + 120
        while time.time() < deadline:
            text = self._stdout()
            m = re.search(r"HTTP API on (http://127\.0\.0\.1:(\d+))/v1", text)
            metrics = re.search(r"metrics http://127\.0\.0\.1:(\d+)/metrics", text)
            if m and metrics:
                self.url = m.group(1) + "/v1"
                self.port = int(m.group(2))
                self.metrics_port = int(metrics.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("streamd did not start: " + self._stderr())

    def _stdout(self):
        self.out.flush()
        with open(self.out.name) as f:
            return f.read()

    def _stderr(self):
        self.err.flush()
        with open(self.err.name) as f:
            return f.read()

    def client(self, api_key="none", **kw):
        return openai.OpenAI(base_url=self.url, api_key=api_key, **kw)

    def metric(self, series):
        body = urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=10).read().decode()
        for line in body.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()
        self.err.close()
        return self.proc.returncode


class DaemonTest(unittest.TestCase):
    extra = ()  # more `streamd serve` flags
    tmp_prefix = "streamd-http-"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=cls.tmp_prefix)
        cls.daemon = Daemon(cls.tmp, cls.extra)

    @classmethod
    def tearDownClass(cls):
        code = cls.daemon.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert code == 0, "streamd exited %s after SIGTERM" % code
