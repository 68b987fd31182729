"""Typed exceptions: every server Error and gRPC status becomes a StreamdError subclass."""
from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class StreamdError(Exception):
    """An error from streamd: the gRPC code, the request field at fault and the message."""

    def __init__(self, code: grpc.StatusCode, message: str, field: str = "",
                 request_id: str = "") -> None:
        super().__init__(f"{code.name}: {message}" + (f" (field {field})" if field else ""))
        self.code = code
        self.message = message
        self.field = field
        self.request_id = request_id


class InvalidArgumentError(StreamdError):
    pass


class NotFoundError(StreamdError):
    pass


class AlreadyExistsError(StreamdError):
    pass


class FailedPreconditionError(StreamdError):
    pass


class ResourceExhaustedError(StreamdError):
    pass


class UnauthenticatedError(StreamdError):
    pass


class PermissionDeniedError(StreamdError):
    pass


class UnavailableError(StreamdError):
    pass


class UnimplementedError(StreamdError):
    pass


class SessionClosedError(StreamdError):
    """The session ended for good (closed elsewhere, or gone when a Resume was tried)."""


class GenerationInterrupted(StreamdError):
    """The stream broke while this request was in flight. The client resumes the session by
    itself; the request may be retried once the session is back (its effect on the context is
    unknown for an Append: compare Session.cache.tokens_seen)."""

    retryable = True


_BY_CODE: Dict[grpc.StatusCode, Type[StreamdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}

_CODE_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def code_of(number: int) -> grpc.StatusCode:
    return _CODE_BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def make_error(code: grpc.StatusCode, message: str, field: str = "",
               request_id: str = "") -> StreamdError:
    return _BY_CODE.get(code, StreamdError)(code, message, field, request_id)


def from_proto(err) -> StreamdError:
    """From a streamd.v1.Error message."""
    return make_error(code_of(err.code), err.message, err.field, err.request_id)


def from_rpc(e: grpc.aio.AioRpcError) -> StreamdError:
    return make_error(e.code(), e.details() or "")


def field_of_message(message: str) -> str:
    """Unary calls carry no Error message: their status text starts with the field."""
    head = message.split(" ", 1)[0].rstrip(":")
    return head if "." in head and head[0].isalpha() else ""


def from_unary(e: grpc.aio.AioRpcError, request_id: str = "") -> StreamdError:
    details = e.details() or ""
    return make_error(e.code(), details, field_of_message(details), request_id)


def optional_field(err: Optional[StreamdError]) -> str:
    return err.field if err is not None else ""
