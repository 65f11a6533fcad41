"""Generated Open Inference Protocol gRPC code.

Source: proto/inferd.proto. Regenerate with `python scripts/gen_proto.py`; never
edit the inferd_pb2* files by hand. The messages live in a private descriptor
pool (`pb.DESCRIPTOR.pool`) so they coexist with tritonclient's and MLServer's
identically named `inference.*` messages in one process.

The code is generated with grpcio-tools 1.62.3, whose output runs on protobuf
4.25 and every later runtime; an older runtime (installed with --no-deps, or
forced by another package) is refused here with a message saying what to do,
rather than failing later in a descriptor call.
"""

from google.protobuf import __version__ as _protobuf_version

LOWEST_PROTOBUF = (4, 25, 1)


def check_protobuf_runtime(version: str) -> None:
    """Raise ImportError when the protobuf runtime `version` is older than LOWEST_PROTOBUF."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) or "0"
        parts.append(int(digits))
    if tuple(parts) < LOWEST_PROTOBUF:
        lowest = ".".join(map(str, LOWEST_PROTOBUF))
        raise ImportError(
            f"inferd needs protobuf>={lowest}, but protobuf {version} is installed; "
            f"run `pip install 'protobuf>={lowest}'`."
        )


check_protobuf_runtime(_protobuf_version)

from . import inferd_pb2 as pb  # noqa: E402  (after the runtime check)
from . import inferd_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["LOWEST_PROTOBUF", "check_protobuf_runtime", "pb", "pb_grpc"]
