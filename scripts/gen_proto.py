"""Regenerate inferd's protobuf/gRPC Python code from proto/inferd.proto.

    python scripts/gen_proto.py          # write src/inferd/protocol/inferd_pb2*.py(i)
    python scripts/gen_proto.py --check  # fail if the committed files are stale (CI)

Needs grpcio-tools==1.62.3 exactly (GRPCIO_TOOLS_VERSION), in a virtualenv of its own:
its protoc writes code that runs on every protobuf runtime from 4.25 on, where newer
grpcio-tools write code that refuses runtimes older than themselves. It needs
protobuf<5, so it cannot share the test venv; CI runs --check in its lowest-versions venv:

    python -m venv /tmp/protoc && /tmp/protoc/bin/pip install grpcio-tools==1.62.3
    /tmp/protoc/bin/python scripts/gen_proto.py
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
PROTO_FILE = PROTO_DIR / "inferd.proto"
OUT_DIR = ROOT / "src" / "inferd" / "protocol"
GENERATED = ("inferd_pb2.py", "inferd_pb2.pyi", "inferd_pb2_grpc.py")
# Raise it only together with the lowest protobuf in pyproject.toml (its generated code
# needs a runtime at least as new as the protoc inside grpcio-tools).
GRPCIO_TOOLS_VERSION = "1.62.3"
MAX_DIFF_LINES = 40
MAX_DIFF_WIDTH = 160

# protoc writes a top-level import, which only works with OUT_DIR on sys.path.
ABSOLUTE_IMPORT = "import inferd_pb2 as inferd__pb2\n"
RELATIVE_IMPORT = "from . import inferd_pb2 as inferd__pb2\n"

# Our messages share full names (inference.ModelInferRequest, ...) with
# tritonclient's and MLServer's generated code. In the default descriptor pool
# whichever is imported second fails with "duplicate symbol", so inferd builds
# its file into a private pool (reach it as inferd_pb2.DESCRIPTOR.pool).
DEFAULT_POOL = "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile("
PRIVATE_POOL = (
    "# inferd: private pool, so tritonclient/MLServer protos can be imported too.\n"
    "_POOL = _descriptor_pool.DescriptorPool()\n"
    "DESCRIPTOR = _POOL.AddSerializedFile("
)


def generate(out_dir: Path) -> None:
    """Run protoc on PROTO_FILE, writing GENERATED into out_dir."""
    try:
        from grpc_tools import protoc
    except ImportError:
        sys.exit(f"gen_proto: grpcio-tools is not installed; {_INSTALL_HINT}")
    if _grpc_tools_version() != GRPCIO_TOOLS_VERSION:
        sys.exit(
            f"gen_proto: grpcio-tools {_grpc_tools_version()} is installed, but the committed "
            f"code is generated with grpcio-tools {GRPCIO_TOOLS_VERSION}; {_INSTALL_HINT}"
        )

    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(PROTO_FILE),
    ]
    if protoc.main(args) != 0:
        sys.exit(f"gen_proto: protoc failed on {PROTO_FILE.relative_to(ROOT)}")
    _patch(out_dir / "inferd_pb2_grpc.py", ABSOLUTE_IMPORT, RELATIVE_IMPORT)
    _patch(out_dir / "inferd_pb2.py", DEFAULT_POOL, PRIVATE_POOL)


_INSTALL_HINT = (
    f"run it from a venv of its own: `python -m venv /tmp/protoc && "
    f"/tmp/protoc/bin/pip install grpcio-tools=={GRPCIO_TOOLS_VERSION} && "
    f"/tmp/protoc/bin/python scripts/gen_proto.py`"
)


def _patch(path: Path, old: str, new: str) -> None:
    """Replace the one occurrence of old in the generated file at path."""
    text = path.read_text()
    if text.count(old) != 1:
        sys.exit(
            f"gen_proto: expected {old.strip()!r} once in {path.name}; "
            "grpcio-tools changed its output, update this script."
        )
    path.write_text(text.replace(old, new))


def check() -> int:
    """Regenerate into a temp dir and compare with the committed files."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh_dir = Path(tmp)
        generate(fresh_dir)
        stale = []
        for name in GENERATED:
            committed = OUT_DIR / name
            fresh = (fresh_dir / name).read_text()
            current = committed.read_text() if committed.exists() else ""
            if fresh != current:
                stale.append(name)
                diff = difflib.unified_diff(
                    current.splitlines(keepends=True),
                    fresh.splitlines(keepends=True),
                    fromfile=f"committed/{name}",
                    tofile=f"regenerated/{name}",
                    n=1,
                )
                # The serialized descriptor is one huge line: show only its start.
                for line in list(diff)[:MAX_DIFF_LINES]:
                    sys.stderr.write(line[:MAX_DIFF_WIDTH].rstrip("\n") + "\n")
    if stale:
        out_dir = OUT_DIR.relative_to(ROOT)
        print(
            f"gen_proto --check: out of date with {PROTO_FILE.relative_to(ROOT)}: "
            f"{', '.join(f'{out_dir}/{name}' for name in stale)} "
            f"(regenerated with grpcio-tools {_grpc_tools_version()}).\n"
            "Run `python scripts/gen_proto.py` and commit the result.",
            file=sys.stderr,
        )
        return 1
    print("gen_proto --check: generated protocol code is up to date.")
    return 0


def _grpc_tools_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("grpcio-tools")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temp dir and exit 1 if the committed files differ",
    )
    options = parser.parse_args(argv)
    if options.check:
        return check()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    generate(OUT_DIR)
    print(f"gen_proto: wrote {', '.join(GENERATED)} to {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
