"""Command line: `vllm-spec-exporter serve | check | generate`, plus commands other distributions add.

`serve` and `check` are the sidecar's and need only its own modules. `generate` (the `[generate]`
extra, with the Grafana SDK) is imported only when chosen, so the sidecar image never carries it
and `serve` never loads it.

Other distributions may add commands through the entry-point group `vllm_spec_exporter.commands`
(the lab adds `demo` that way). The contract of the object an entry point names: `HELP` (one
line for the command list) and `configure(parser)`, which adds the command's arguments and sets
`run(args) -> exit code` as the parser's default. Entry points are read only when no built-in
command is chosen, so `serve` never imports another distribution.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from . import __version__, check, settings, specconfig_reader, webconfig
from .collector import SpecDecodeCollector
from .engines import SERVED_HISTOGRAMS
from .poller import Poller

GENERATE_HELP = "write alerts/, dashboards/, deploy/kubernetes/ and docs/ from one config"
PLUGIN_GROUP = "vllm_spec_exporter.commands"
BUILT_IN = ("serve", "check", "generate")


def load_generate() -> ModuleType:
    """The generators, or a one-line error naming the extra that holds them."""
    try:
        from .mixin import generate
    except ImportError as error:
        if (error.name or "").startswith("grafana_foundation_sdk"):
            raise ValueError("generate needs the [generate] extra: "
                             "pip install 'vllm-spec-exporter[generate]'") from None
        raise
    return generate


def plugin_commands() -> dict[str, EntryPoint]:
    """Commands other installed distributions add, by name (built-in names cannot be taken)."""
    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP) if ep.name not in BUILT_IN}


def load_plugin(entry: EntryPoint) -> ModuleType:
    """The object behind a plugin command, or a one-line error naming the distribution that adds it."""
    try:
        return entry.load()
    except ImportError as error:
        owner = entry.dist.name if entry.dist is not None else entry.value
        raise ValueError(f"{entry.name} (added by {owner}) cannot be loaded: {error}") from None


class Parser(argparse.ArgumentParser):
    """Bad flags get one line naming the problem (no usage block), exit 2. Sub-commands inherit it."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The full parser for `serve` and `check`; `generate` and plugin commands get their options (and
    their imports) only when `argv` chooses them."""
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = Parser(
        prog="vllm-spec-exporter",
        description="Is speculative decoding on this vLLM server paying off? A Prometheus sidecar, "
                    "alert rules and Grafana dashboards.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_parser = sub.add_parser("serve", help="run the sidecar exporter next to one vLLM server",
                                  description="Poll one vLLM server's /metrics, normalise and derive "
                                              "the spec-decode figures, serve them on /metrics.")
    settings.add_arguments(serve_parser)
    serve_parser.set_defaults(run=serve)

    chk = sub.add_parser("check", help="sample a live vLLM server and print a verdict with a k advisor",
                         description="Sample a vLLM server's /metrics over --duration and report "
                                     "acceptance, per-position acceptance, efficiency, token flow, "
                                     "load and the best k.", epilog=check.EPILOG)
    check.add_arguments(chk)
    chk.set_defaults(run=check.run)

    if chosen not in BUILT_IN:
        for name, entry in sorted(plugin_commands().items()):
            if chosen == name:  # the chosen one must load: its error is the answer
                command = load_plugin(entry)
                command.configure(sub.add_parser(name, help=command.HELP))
            elif chosen is None:  # the command list (--help) lists a broken plugin instead of failing
                try:
                    sub.add_parser(name, help=load_plugin(entry).HELP)
                except ValueError as error:
                    sub.add_parser(name, help=f"(unavailable: {error})")

    gen = sub.add_parser("generate", help=GENERATE_HELP,
                         description="Render every monitoring artifact from one MixinConfig.")
    if chosen == "generate":
        generate = load_generate()
        generate.add_arguments(gen)
        gen.set_defaults(run=generate.run)
    return parser


def run_cli(prog: str, build: Callable[[Sequence[str]], argparse.ArgumentParser],
            argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: the process's) with `build(argv)` and run the chosen command's `run`;
    bad input (ValueError, OverflowError) is one line `prog: error: ...` and exit 2, no traceback.
    Shared by this CLI and the lab's."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build(argv).parse_args(argv)
        return args.run(args)
    except (ValueError, OverflowError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("vllm-spec-exporter", build_parser, argv)


def serve(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from .endpoint import ExporterServer, parse_listen, serve_in_thread

    conf = settings.resolve(args)
    logging.basicConfig(level=conf.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("vllm_spec_exporter")
    fetcher = settings.make_fetcher(conf, conf.poll_timeout, conf.max_bytes)
    spec_config = specconfig_reader.reader_for(conf)
    poller = Poller(fetcher, conf.interval, conf.window, conf.min_draft_tokens, conf.max_series,
                    conf.draft_cost_ratio, spec_config=spec_config, histograms=SERVED_HISTOGRAMS)
    registry = CollectorRegistry()
    registry.register(SpecDecodeCollector(poller))
    web_config = webconfig.load(conf.web_config_file) if conf.web_config_file else None
    try:
        server = ExporterServer(parse_listen(conf.listen), registry, poller, web_config)
    except OSError as error:
        raise ValueError(f"cannot listen on {conf.listen}: {error.strerror}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    spec_config.start()
    poller.start()
    serve_in_thread(server)
    host, port = server.server_address[:2]
    scheme = "https" if web_config and web_config.ssl_context else "http"
    log.info("vllm-spec-exporter %s watching %s, serving %s://%s:%s/metrics (interval %gs, window %gs%s)",
             __version__, fetcher.url, scheme, host, port, conf.interval, conf.window,
             ", basic auth on" if web_config and web_config.auth_required else "")
    stop.wait()
    stopping = time.monotonic()
    server.shutdown()
    server.server_close()
    # A poll blocked on a hung target is not waited for: the poller is a daemon thread and holds
    # nothing that needs flushing.
    poller.stop(timeout=0.1)
    spec_config.stop(timeout=0.1)
    log.info("stopped in %.2f s", time.monotonic() - stopping)
    return 0


if __name__ == "__main__":
    sys.exit(main())
