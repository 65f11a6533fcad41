"""Generated Open Inference Protocol gRPC code.

Source: proto/inferd.proto. Regenerate with `python scripts/gen_proto.py`; never
edit the inferd_pb2* files by hand. The messages live in a private descriptor
pool (`pb.DESCRIPTOR.pool`) so they coexist with tritonclient's and MLServer's
identically named `inference.*` messages in one process.
"""

from . import inferd_pb2 as pb
from . import inferd_pb2_grpc as pb_grpc

__all__ = ["pb", "pb_grpc"]
