"""The machine and software a benchmark run happens on: CPU, memory, GPU, load, package versions
and gpuzarr's commit, for the report's header and results.json; ``machine_slug`` names the
machine in saved result files."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> dict[str, Any]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("numpy", "numcodecs", "zarr", "zarrs", "tensorstore", "cupy", "psutil"):
        versions[dist] = _version(dist)
    try:
        import gpuzarr

        versions["gpuzarr"] = gpuzarr.__version__
    except Exception:
        versions["gpuzarr"] = None
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(HERE.parent), "status", "--porcelain", "--", "gpuzarr"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        if commit:
            versions["gpuzarr"] = f"{versions['gpuzarr']} ({commit}{', modified' if dirty else ''})"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    env: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "versions": versions,
        "gpu": None,
        "loadavg_start": loadavg(),
    }
    if device == "gpu":
        with contextlib.suppress(Exception):
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(0)
            env["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return env


def machine_slug(env: dict[str, Any]) -> str:
    words = re.sub(r"\(.*?\)|processor|cpu|@.*", " ", env["cpu_model"], flags=re.I).split()
    slug = "-".join(w.lower() for w in words[:3]) or "cpu"
    slug = re.sub(r"[^a-z0-9-]+", "", slug)
    gpu = ("-" + re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower()).strip("-")) if env.get("gpu") else ""
    return f"{slug}-{env['cpus_usable']}c{gpu}"
