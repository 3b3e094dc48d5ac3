"""Shared test setup: `support` (fake vLLM, Prometheus helpers) is importable from every test."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_sessionstart(session):
    """Name the real servers this run uses, once, at the start, whatever the verbosity
    (`vllm-spec-lab versions`)."""
    from vllm_spec_lab.versions import server_versions

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("real servers (vllm-spec-lab versions):")
        for server in server_versions():
            reporter.write_line(f"  {server.line()}")


def pytest_terminal_summary(terminalreporter):
    """Print the fault-injection table (tests/test_faults.py) and the vmalert-tool differences
    (tests/test_alerts_vmalert_tool.py) when those tests ran."""
    from test_faults import FAULT_TABLE

    from support.prom import FALLBACK_NOTES

    write = terminalreporter.write_line
    if FALLBACK_NOTES:
        write("")
        write(f"DEBIAN TESTING FALLBACK: {len(FALLBACK_NOTES)} version-pinned checks ran on Debian 12's "
              f"servers instead of Prometheus 3.x / Alertmanager 0.3x ({FALLBACK_NOTES[0]})",
              red=True, bold=True)
    vmalert_tool = sys.modules.get("test_alerts_vmalert_tool")
    if vmalert_tool is not None and vmalert_tool.DIFFERENCES:
        write("")
        write("vmalert-tool unittest vs promtool: every difference, explained")
        for file, test, check, reason in vmalert_tool.DIFFERENCES:
            write(f"{file:32} {test[:40]:40} {check[:70]:70} {reason}")
    if not FAULT_TABLE:
        return
    write("")
    write("fault injection against the exporter process")
    write(f"{'fault':<36} {'observed':<78} pass")
    for fault, _expected, observed, passed in FAULT_TABLE:
        write(f"{fault:<36} {observed[:78]:<78} {'yes' if passed else 'NO'}")
