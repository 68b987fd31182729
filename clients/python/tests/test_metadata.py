"""The headers the client sends, seen by a stand-in server (no daemon): the session-affinity
header on every call that names a session (none on Open), and the API key."""
import grpc
import pytest

import streamd_client as sc
from streamd_client import Client
from streamd_client._proto.streamd.v1 import streamd_pb2 as pb
from streamd_client._proto.streamd.v1 import streamd_pb2_grpc as pb_grpc

SID = "3f9c0e5ab2d14c7f8e61a0d9b4c2f713"


class Recorder(pb_grpc.StreamdServicer):
    def __init__(self):
        self.calls = []

    def _record(self, name, context):
        self.calls.append((name, dict(context.invocation_metadata())))

    async def Session(self, request_iterator, context):
        self._record("Session", context)
        async for m in request_iterator:
            if m.HasField("open"):
                yield pb.ServerMessage(opened=pb.Opened(session_id=SID.encode()))
            elif m.HasField("resume"):
                yield pb.ServerMessage(opened=pb.Opened(session_id=m.resume.session_id,
                                                        resumed=True))
            elif m.HasField("append"):
                yield pb.ServerMessage(error=pb.Error(code=3, message="append.text: bad",
                                                      field="append.text"))
            elif m.HasField("close"):
                return

    async def GetSession(self, request, context):
        self._record("GetSession", context)
        await context.abort(grpc.StatusCode.NOT_FOUND, "session_id: no such session")

    async def CloseSession(self, request, context):
        self._record("CloseSession", context)
        return pb.CloseSessionResponse()

    async def ExportSession(self, request, context):
        self._record("ExportSession", context)
        yield pb.SnapshotChunk(data=b"abc")
        yield pb.SnapshotChunk(data=b"def")


@pytest.fixture
async def fake():
    server = grpc.aio.server()
    rec = Recorder()
    pb_grpc.add_StreamdServicer_to_server(rec, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", rec
    await server.stop(0)


async def test_affinity_header_and_api_key(fake):
    address, rec = fake
    async with Client(address, api_key="k-123") as c:
        s = await c.open()
        with pytest.raises(sc.InvalidArgumentError) as e:
            await s.append("x")
        assert e.value.field == "append.text"
        await s.close()
        r = await c.resume(SID)
        assert r.opened.resumed
        await r.close()
        with pytest.raises(sc.NotFoundError):
            await c.get_session(SID)
        await c.close_session(SID)
        assert await c.export_session(SID) == b"abcdef"
    names = [n for n, _ in rec.calls]
    assert names == ["Session", "Session", "GetSession", "CloseSession", "ExportSession"]
    for name, md in rec.calls:
        assert md.get("authorization") == "Bearer k-123", (name, md)
    assert sc.SESSION_HEADER not in rec.calls[0][1]  # Open: any replica will do
    for name, md in rec.calls[1:]:
        assert md.get(sc.SESSION_HEADER) == SID, (name, md)
