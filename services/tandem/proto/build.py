"""Generate the gRPC stubs from worker.proto (``python -m tandem.proto.build``).

The generated modules are committed; ``--check`` (run by the tests) fails when they are
out of date with the .proto, so a proto edit can never ship with stale stubs.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = ("worker.proto",)


def generate(out_dir: Path, proto_dir: Path = HERE) -> list[Path]:
    import grpc_tools
    from grpc_tools import protoc  # dev-only dependency

    include = Path(grpc_tools.__file__).parent / "_proto"
    for proto in PROTOS:
        rc = protoc.main(
            [
                "protoc",
                f"-I{proto_dir}",
                f"-I{include}",
                f"--python_out={out_dir}",
                f"--pyi_out={out_dir}",
                f"--grpc_python_out={out_dir}",
                str(proto_dir / proto),
            ]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed on {proto}")
    outputs = sorted(out_dir.glob("*_pb2*.py*"))
    for path in outputs:
        # protoc emits absolute imports (``import worker_pb2``); make them package-relative.
        text = re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", path.read_text(), flags=re.M)
        path.write_text(text)
    return outputs


def _matches(committed: Path, fresh: Path) -> bool:
    return committed.exists() and committed.read_text() == fresh.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed stubs are stale")
    parser.add_argument("--dir", type=Path, default=HERE, help="where the .proto and stubs live")
    args = parser.parse_args(argv)
    here: Path = args.dir
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp), here)
        if args.check:
            stale = [p.name for p in fresh if not _matches(here / p.name, p)]
            if stale:
                print(
                    f"stale generated stubs: {', '.join(stale)}; run `make proto`", file=sys.stderr
                )
                return 1
            return 0
        for p in fresh:
            (here / p.name).write_text(p.read_text())
            print(f"wrote {here / p.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
