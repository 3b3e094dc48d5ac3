"""Make the Debian builds unpacked into the cache read their own data files, never the system's.

Debian builds Prometheus, Alertmanager and amtool to read data from absolute system paths that
only Debian's own packages populate. Unpacked with `dpkg-deb -x` (scripts/bootstrap.sh), the
binaries still look there. Alertmanager reads its default notification templates from
/usr/share/prometheus/alertmanager at every config load and exits 1 without them (no flag moves
that directory), and a host with Debian 12's 0.25 package would give the 0.33 binary another
version's templates; the web assets, the console folders, amtool's config file and the default
config files sit under /usr/share/prometheus and /etc/prometheus too. Every path, when it is read
and how it is handled: docs/compatibility.md, "Debian's builds and their data files". promtool,
victoria-metrics, vmalert and vmalert-tool name no such path.

`relocate_into(root, dest)` copies each binary above from ``root/usr/bin`` into `dest`, with the
prefixes `/usr/share/prometheus/` and `/etc/prometheus/` rewritten into the relative
`usr/share/prometheus//` and `etc/prometheus//` — the same length, so no other byte moves (Go
strings carry their length; the doubled slash is a no-op in a path) — and records what it did in
``dest/RELOCATED``. A relocated copy reads those files relative to its working directory, which
the lab sets to the unpacked root (`binaries.working_dir`): each finds its own package's files,
and nothing of the host's. The unpacked tree itself is never changed, so a checkout that predates
the relocation and shares the cache keeps running the binaries it knows.

Standard library only: bootstrap runs this file straight from lab/ with the system's python3
(`python3 lab/vllm_spec_lab/relocate.py ROOT DEST`) once the tree is unpacked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Absolute system prefix -> a relative one of the same length.
PREFIXES = {b"/usr/share/prometheus/": b"usr/share/prometheus//", b"/etc/prometheus/": b"etc/prometheus//"}
# Binary -> the least number of prefixes it must contain: fewer means the build changed and this
# table needs a look (an unrecognised build is a loud failure, never a silently unrelocated one).
BINARIES = {"prometheus-alertmanager": 4, "prometheus": 5, "amtool": 1}
MARKER = "RELOCATED"


def relocate_bytes(data: bytes) -> tuple[bytes, int]:
    """`data` with every system prefix made relative, and how many were rewritten."""
    count = 0
    for absolute, relative in PREFIXES.items():
        assert len(absolute) == len(relative), (absolute, relative)
        count += data.count(absolute)
        data = data.replace(absolute, relative)
    return data, count


def relocate_binary(source: Path, dest: Path) -> int:
    """Write `source` relocated to `dest` (through a temporary file and a rename, mode kept);
    return the number of prefixes rewritten."""
    data, count = relocate_bytes(source.read_bytes())
    tmp = dest.with_name(dest.name + ".relocating")
    tmp.write_bytes(data)
    os.chmod(tmp, source.stat().st_mode)
    os.replace(tmp, dest)
    return count


def relocate_into(root: Path, dest: Path) -> dict[str, int]:
    """Relocated copies of every binary of `BINARIES` under ``root/usr/bin`` in `dest`, and
    ``dest/RELOCATED``. Raises RuntimeError naming the binary when one is missing or names fewer
    paths than expected (then no marker is written)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MARKER).unlink(missing_ok=True)
    counts = {}
    for name, least in BINARIES.items():
        source = root / "usr" / "bin" / name
        if not source.is_file():
            raise RuntimeError(f"relocate: {source} is missing")
        counts[name] = relocate_binary(source, dest / name)
        if counts[name] < least:
            raise RuntimeError(f"relocate: {source} names {counts[name]} system data paths, expected at least "
                               f"{least}: a new Debian build? see lab/vllm_spec_lab/relocate.py")
    (dest / MARKER).write_text("".join(f"{name} {count}\n" for name, count in counts.items()))
    return counts


def is_relocated(dest: Path) -> bool:
    return (dest / MARKER).is_file()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python3 relocate.py UNPACKED_ROOT DEST")
    try:
        done = relocate_into(Path(sys.argv[1]), Path(sys.argv[2]))
    except (OSError, RuntimeError) as error:
        sys.exit(str(error))
    print("relocated system data paths: " + ", ".join(f"{name} {count}" for name, count in done.items()))
