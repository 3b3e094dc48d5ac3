"""`vllm-spec-lab`, the lab's console script.

- `vllm-spec-lab demo`: the whole pipeline on this machine (`demo.py`); `bash scripts/run.sh` runs it.
- `vllm-spec-lab versions`: one line per real server the demo and the tests use (name, version,
  path); exit 0 even when some are missing (the line says `not installed`): it reports, never gates.

Bad input gets the exporter's treatment: one line naming the problem, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vllm_spec_exporter.cli import Parser, run_cli

from . import demo_command


def versions(_: argparse.Namespace) -> int:
    from .versions import server_versions

    for server in server_versions():
        print(server.line())
    return 0


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = Parser(prog="vllm-spec-lab", description="The vllm-spec-exporter test bench and demo.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_parser = commands.add_parser("demo", help=demo_command.HELP)
    if "demo" in argv:
        demo_command.configure(demo_parser)
    commands.add_parser("versions", help="print the name and version of every real server the demo and "
                                         "tests use").set_defaults(run=versions)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("vllm-spec-lab", build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
