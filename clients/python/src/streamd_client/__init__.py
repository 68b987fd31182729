"""streamd_client: an asyncio client for streamd (proto/streamd/v1/streamd.proto)."""
from .client import (SESSION_HEADER, Client, Delta, FinishReason, Generation, GenerationResult,
                     ImportedSession, Session, SessionInfo, session_id_text)
from .errors import (AlreadyExistsError, FailedPreconditionError, GenerationInterrupted,
                     InvalidArgumentError, NotFoundError, PermissionDeniedError,
                     ResourceExhaustedError, SessionClosedError, StreamdError,
                     UnauthenticatedError, UnavailableError, UnimplementedError)
from ._proto.streamd.v1 import streamd_pb2 as pb

__all__ = ["Client", "Session", "SessionInfo", "ImportedSession", "session_id_text",
           "Generation", "GenerationResult", "Delta", "FinishReason",
           "SESSION_HEADER", "StreamdError", "InvalidArgumentError", "NotFoundError",
           "AlreadyExistsError", "FailedPreconditionError", "ResourceExhaustedError",
           "UnauthenticatedError", "PermissionDeniedError", "UnavailableError",
           "UnimplementedError", "SessionClosedError", "GenerationInterrupted", "pb"]
