"""A real `streamd serve` on a free loopback port, for tests and examples (not the API)."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """Starts `streamd serve` with the test defaults; restart() reuses its port and snapshot
    directory (what a supervisor restarting it would do)."""

    def __init__(self, binary: Optional[str] = None, model: Optional[str] = None,
                 extra: Optional[List[str]] = None, tls: bool = False) -> None:
        self.binary = binary or os.environ.get("STREAMD_BINARY", "")
        self.model = model or os.environ.get("STREAMD_MODEL", "")
        if not self.binary or not os.path.isfile(self.binary):
            raise RuntimeError(f"streamd binary {self.binary!r} missing (set STREAMD_BINARY)")
        if not self.model or not os.path.isfile(self.model):
            raise RuntimeError(f"model {self.model!r} missing (set STREAMD_MODEL; "
                               "scripts/fetch-model.sh prints it)")
        self.dir = tempfile.mkdtemp(prefix="streamd_py_")
        self.snapshot_dir = os.path.join(self.dir, "sessions")
        self.extra = list(extra or [])
        self.port = free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        port_file = os.path.join(self.dir, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        args = [self.binary, "serve", "--port-file=" + port_file,
                "--model.path=" + self.model,
                f"--server.listen_address=127.0.0.1:{self.port}",
                "--server.metrics_address=127.0.0.1:0", "--engine.kv_pool=96MiB",
                "--engine.threads=2", "--sessions.default_window=252",
                "--sessions.snapshot_dir=" + self.snapshot_dir,
                "--sessions.snapshot_interval=0", "--logging.level=warn"] + self.extra
        self.stderr = open(os.path.join(self.dir, "stderr"), "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.stderr)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamd serve exited ({self.proc.returncode}): "
                                   + self.log())
            time.sleep(0.05)
        raise RuntimeError(f"streamd serve did not listen within {timeout} s: " + self.log())

    def log(self) -> str:
        with open(os.path.join(self.dir, "stderr"), errors="replace") as f:
            return f.read()[-4000:]

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> None:
        self.kill9()
        self.start()

    def snapshot_mtime(self, session_id: str) -> int:
        """mtime_ns of the session's snapshot file, 0 while there is none (written atomically,
        by rename, so a new mtime means a complete new snapshot)."""
        # In the model's directory under snapshot_dir (<fingerprint prefix>/, docs/SESSIONS.md).
        for path in glob.glob(os.path.join(self.snapshot_dir, "*", session_id + ".snap")):
            try:
                return os.stat(path).st_mtime_ns
            except FileNotFoundError:
                pass
        return 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)
