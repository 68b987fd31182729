"""Build hook: generates the gRPC stubs from streamd.proto with grpc_tools.protoc.

The proto is read from the repository (../../proto/streamd/v1/streamd.proto) when building from
a checkout; an sdist carries a copy (proto/streamd/v1/streamd.proto beside this file, put there
by the sdist build). Generated modules go to the build directory only, never the source tree.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
REL = os.path.join("streamd", "v1", "streamd.proto")
CANDIDATES = [
    os.path.join(HERE, "proto", REL),  # inside an sdist
    os.path.join(HERE, "..", "..", "proto", REL),  # in the repository
]


def find_proto() -> str:
    for c in CANDIDATES:
        if os.path.isfile(c):
            return os.path.abspath(c)
    raise SystemExit("streamd-client: streamd.proto not found in " + " or ".join(CANDIDATES))


class BuildPyWithProto(build_py):
    def run(self):
        super().run()
        from grpc_tools import protoc  # build requirement (pyproject.toml)
        import grpc_tools

        proto = find_proto()
        include = os.path.dirname(os.path.dirname(os.path.dirname(proto)))
        out = os.path.join(self.build_lib, "streamd_client", "_proto")
        os.makedirs(os.path.join(out, "streamd", "v1"), exist_ok=True)
        for d in ("", "streamd", os.path.join("streamd", "v1")):
            init = os.path.join(out, d, "__init__.py")
            if not os.path.exists(init):
                open(init, "w").close()
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        args = ["grpc_tools.protoc", "-I" + include, "-I" + well_known,
                "--python_out=" + out, "--pyi_out=" + out, "--grpc_python_out=" + out, proto]
        if protoc.main(args) != 0:
            raise SystemExit("streamd-client: grpc_tools.protoc failed on " + proto)
        # protoc writes `from streamd.v1 import streamd_pb2`: make it relative to the package.
        gen = os.path.join(out, "streamd", "v1", "streamd_pb2_grpc.py")
        with open(gen) as f:
            text = f.read()
        with open(gen, "w") as f:
            f.write(text.replace("from streamd.v1 import streamd_pb2", "from . import streamd_pb2"))
        shutil.copy(proto, os.path.join(out, REL))


class SdistWithProto(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        dest = os.path.join(base_dir, "proto", REL)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy(find_proto(), dest)


setup(cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto})
