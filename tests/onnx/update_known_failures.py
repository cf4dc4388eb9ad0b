#!/usr/bin/env python3
"""Rewrites tests/onnx/known_failures.txt from what `kiln conformance` reports now.

Usage: tests/onnx/update_known_failures.py KILN_BINARY [SUITE_DIR]
SUITE_DIR defaults to ../shared/onnx-node-tests beside the source tree. The list's header
comment (every line before the first entry) is kept; review the diff before committing it.
"""
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
LIST = HERE / "known_failures.txt"


def entries(kiln, suite, group):
    output = subprocess.run([kiln, "conformance", "-v", str(suite / group)], check=True,
                            capture_output=True, text=True).stdout
    for line in output.splitlines():
        match = re.match(r"(failed|unsupported)\s+(\S+): (.*)", line)
        if not match:
            continue
        outcome, name, detail = match.groups()
        detail = re.sub(r"^\S*model\.onnx: ", "", detail)  # the model's path
        detail = re.sub(r"^node [^:]*: ", "", detail)  # the node, named by the case already
        detail = detail.replace(str(suite) + "/", "")
        if len(detail) > 110:
            detail = detail[:107] + "..."
        yield f"{group}/{name} {outcome}  # {detail}"


def main():
    kiln = sys.argv[1]
    suite = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else
                         HERE.parent.parent.parent / "shared" / "onnx-node-tests").resolve()
    header = []
    for line in LIST.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    lines = header + [e for group in ("node", "simple") for e in entries(kiln, suite, group)]
    LIST.write_text("\n".join(lines) + "\n")
    print(f"{LIST}: {len(lines) - len(header)} entries")


if __name__ == "__main__":
    main()
