"""`vllm-spec-lab`, the lab's console script: `vllm-spec-lab versions` prints one line per real
server the demo and the tests use (name, version, path); exit 0 even when some are missing (the
line says `not installed`), since it reports and never gates."""

from __future__ import annotations

import argparse
import sys

from .versions import server_versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-spec-lab", description="The vllm-spec-exporter test bench.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("versions", help="print the name and version of every real server the demo and tests use")
    args = parser.parse_args(argv)
    if args.command == "versions":
        for server in server_versions():
            print(server.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
