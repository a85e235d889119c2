"""Regenerate the protobuf modules from the `.proto` files in this package.

Run after editing a `.proto` file, from anywhere::

    python -m transforms.records.generate

It writes `<name>_pb2.py` and `<name>_pb2.pyi` next to each `.proto` with the
protoc bundled in grpcio-tools (pinned in setup.py's `test` extra). The
`.proto` files are compiled relative to the directory that holds the
`transforms` package, as if from the repository root::

    python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \\
        transforms/records/zeitgeist.proto transforms/records/photon.proto \\
        transforms/records/dead_letter.proto

That matters: protoc names the message classes' module after the path
(`transforms.records.zeitgeist_pb2`), and pickling a message or a function
that uses one (as Beam does) needs that module to be importable. Compiling
from inside this directory gives a bare `zeitgeist_pb2` that is not.

The generated files are committed; `tests/records/test_records_generated.py`
fails when they drift from the schemas or from the pinned generator.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
IMPORT_ROOT = PROTO_DIR.parent.parent  # the directory holding `transforms/`
PROTO_FILES = ("zeitgeist.proto", "photon.proto", "dead_letter.proto")


def generate(out_dir: str | Path = PROTO_DIR) -> list[Path]:
    """Compile `PROTO_FILES` and put the modules in `out_dir`; return them.

    Raises RuntimeError if protoc reports an error.
    """
    # Imported here: grpcio-tools is a development dependency only.
    from grpc_tools import protoc

    # As `python -m grpc_tools.protoc` does: the well-known types' directory.
    well_known = resources.files("grpc_tools") / "_proto"
    package_path = PROTO_DIR.relative_to(IMPORT_ROOT)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        args = [
            "protoc",
            f"-I{IMPORT_ROOT}",
            f"-I{well_known}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            *(str(PROTO_DIR / name) for name in PROTO_FILES),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")
        written = []
        for name in PROTO_FILES:
            for ext in (".py", ".pyi"):
                module = name.removesuffix(".proto") + "_pb2" + ext
                shutil.copyfile(Path(scratch, package_path, module), out / module)
                written.append(out / module)
    return written


if __name__ == "__main__":
    for path in generate():
        print(path, file=sys.stderr)
