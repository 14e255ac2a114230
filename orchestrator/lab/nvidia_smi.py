"""The lab's `nvidia-smi`: the container's GPUs and the memory its vLLM stand-ins hold
(on a host: every container's GPUs, indexed by the minor of their /dev/nvidiaN).

GPUs come from `lab/gpus.json`; memory in use is what the live servers recorded
in `lab/servers/` (records of dead processes are ignored). Answers the CSV
queries, e.g.
`--query-gpu=index,name,uuid,memory.total,memory.used,memory.free --format=csv,noheader,nounits`
and `--query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits`,
with the header and units unless told otherwise; no arguments prints a short table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from orchestrator.lab.paths import (
    CONTAINER_ENV,
    HOST_ENV,
    ContainerPaths,
    HostPaths,
    read_gpus,
    server_records,
)

DRIVER_VERSION = "570.133.20"
CUDA_VERSION = "12.8"
TABLE_WIDTH = 76
USAGE_ERROR = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."


@dataclass(frozen=True)
class Column:
    """One queryable field: its header and how to read it from a row."""

    header: str
    unit: str
    read: Callable[[dict], object]


GPU_FIELDS = {
    "index": Column("index", "", lambda gpu: gpu["index"]),
    "count": Column("count", "", lambda gpu: gpu["count"]),
    "name": Column("name", "", lambda gpu: gpu["name"]),
    "uuid": Column("uuid", "", lambda gpu: gpu["uuid"]),
    "memory.total": Column("memory.total [MiB]", "MiB", lambda gpu: gpu["memory_total_mib"]),
    "memory.used": Column("memory.used [MiB]", "MiB", lambda gpu: gpu["memory_used_mib"]),
    "memory.free": Column(
        "memory.free [MiB]", "MiB", lambda gpu: gpu["memory_total_mib"] - gpu["memory_used_mib"]
    ),
}
GPU_FIELDS["gpu_name"] = GPU_FIELDS["name"]
GPU_FIELDS["gpu_uuid"] = GPU_FIELDS["uuid"]

APP_FIELDS = {
    "pid": Column("pid", "", lambda app: app["pid"]),
    "process_name": Column("process_name", "", lambda app: app["process_name"]),
    "used_memory": Column("used_gpu_memory [MiB]", "MiB", lambda app: app["used_memory_mib"]),
    "gpu_uuid": Column("gpu_uuid", "", lambda app: app["gpu_uuid"]),
}


class UsageError(Exception):
    """Arguments nvidia-smi would refuse (exit 2)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(USAGE_ERROR)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="nvidia-smi", add_help=False)
    query = parser.add_mutually_exclusive_group()
    query.add_argument("--query-gpu")
    query.add_argument("--query-compute-apps")
    parser.add_argument("--format")
    return parser.parse_args(argv)


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "[Not Found]"


def gpus_in_use(container: ContainerPaths) -> tuple[list[dict], list[dict]]:
    """GPUs with the memory used on each, and one compute app per server and GPU."""
    records = server_records(container)
    gpus = read_gpus(container)
    by_index = {str(gpu["index"]): gpu for gpu in gpus}
    apps = [
        {
            "pid": record["pid"],
            "process_name": process_name(record["pid"]),
            "used_memory_mib": mib,
            "gpu_uuid": by_index[index]["uuid"],
        }
        for record in records
        for index, mib in record["gpu_memory_mib"].items()
        if index in by_index
    ]
    rows = []
    for gpu in gpus:
        used = sum(app["used_memory_mib"] for app in apps if app["gpu_uuid"] == gpu["uuid"])
        rows.append({**gpu, "count": len(gpus), "memory_used_mib": used})
    return rows, apps


def node_gpus_in_use(host: HostPaths) -> tuple[list[dict], list[dict]]:
    """On the node: every container's GPUs, indexed by their /dev/nvidiaN minor."""
    gpus, apps = [], []
    for container in host.containers():
        rows, container_apps = gpus_in_use(container)
        gpus += [{**row, "index": row.get("minor", row["index"])} for row in rows]
        apps += container_apps
    gpus.sort(key=lambda gpu: gpu["index"])
    return [{**gpu, "count": len(gpus)} for gpu in gpus], apps


def csv_lines(query: str, fields: dict[str, Column], rows: list[dict], options: str) -> list[str]:
    """nvidia-smi's CSV: `, ` between values, a header and units unless switched off."""
    formats = set(options.split(","))
    if "csv" not in formats:
        raise UsageError(USAGE_ERROR)
    names = [name.strip() for name in query.split(",")]
    for name in names:
        if name not in fields:
            raise UsageError(f'Field "{name}" is not a valid field to query.\n')
    columns = [fields[name] for name in names]
    lines = [] if "noheader" in formats else [", ".join(column.header for column in columns)]
    for row in rows:
        values = []
        for column in columns:
            value = column.read(row)
            unit = column.unit if column.unit and "nounits" not in formats else ""
            values.append(f"{value} {unit}" if unit else str(value))
        lines.append(", ".join(values))
    return lines


def boxed(text: str) -> str:
    return f"| {text:<{TABLE_WIDTH}} |"


def table_lines(gpus: list[dict], apps: list[dict]) -> list[str]:
    """A short version of the default table: one line per GPU, then the processes."""
    rule = "+" + "-" * (TABLE_WIDTH + 2) + "+"
    version = f"Driver Version: {DRIVER_VERSION}     CUDA Version: {CUDA_VERSION}"
    lines = [time.strftime("%a %b %e %H:%M:%S %Y"), rule]
    lines += [boxed(f"NVIDIA-SMI {DRIVER_VERSION}     {version}"), rule]
    lines += [
        boxed(
            f"{gpu['index']:>3}  {gpu['name']:<32} "
            f"{gpu['memory_used_mib']:>6}MiB / {gpu['memory_total_mib']:>6}MiB"
        )
        for gpu in gpus
    ]
    heading = f"{'GPU':>3}  {'PID':>8}  {'Process name':<32} GPU Memory"
    lines += [rule, boxed("Processes:"), boxed(heading)]
    index_of = {gpu["uuid"]: gpu["index"] for gpu in gpus}
    processes = [
        boxed(
            f"{index_of[app['gpu_uuid']]:>3}  {app['pid']:>8}  {app['process_name'][:32]:<32} "
            f"{app['used_memory_mib']:>6}MiB"
        )
        for app in apps
    ]
    lines += processes or [boxed("No running processes found")]
    lines.append(rule)
    return lines


def output_lines(argv: list[str], gpus: list[dict], apps: list[dict]) -> list[str]:
    args = parse_args(argv)
    if args.query_gpu:
        return csv_lines(args.query_gpu, GPU_FIELDS, gpus, args.format or "")
    if args.query_compute_apps:
        return csv_lines(args.query_compute_apps, APP_FIELDS, apps, args.format or "")
    if args.format:
        raise UsageError(USAGE_ERROR)
    return table_lines(gpus, apps)


def main(argv: list[str] | None = None) -> int:
    if HOST_ENV in os.environ:  # the node's own nvidia-smi
        gpus, apps = node_gpus_in_use(HostPaths(Path(os.environ[HOST_ENV])))
    else:
        gpus, apps = gpus_in_use(ContainerPaths(Path(os.environ[CONTAINER_ENV])))
    try:
        lines = output_lines(sys.argv[1:] if argv is None else argv, gpus, apps)
    except UsageError as error:
        print(error)
        return 2
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
