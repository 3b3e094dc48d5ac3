"""`demo` as a command: `vllm-spec-lab demo`, and `vllm-spec-exporter demo` through the exporter's
`vllm_spec_exporter.commands` entry-point group (lab/pyproject.toml), so the sidecar never names
the lab. Cheap to import: the demo's own modules load only when `demo` is the chosen command.
"""

from __future__ import annotations

import argparse

HELP = "the whole pipeline on this machine with a live view (real vLLM on the CPU)"


def configure(parser: argparse.ArgumentParser) -> None:
    """Give `parser` the demo's arguments, description and `run`."""
    from . import demo

    if demo.__doc__:
        parser.description = demo.__doc__.split("\n\n", 1)[1].strip()
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    demo.add_arguments(parser)
    parser.set_defaults(run=demo.run)
