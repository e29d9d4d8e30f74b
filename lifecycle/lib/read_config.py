"""Validate lifecycle_config.json and print it as shell assignments.

Usage: python3 read_config.py PATH

On success prints `CFG_<FIELD>=<shell-quoted value>` lines (lists and
objects become bash arrays) for on_create.sh to eval, and exits 0.
On failure prints one line naming the offending field and exits 2.

Standard library only, and kept compatible with the python3 that ships on
every HyperPod AMI (3.7 on Amazon Linux 2), so nothing is installed at boot.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable

ABS_PATH = re.compile(r"^/[A-Za-z0-9._/-]*[A-Za-z0-9._-]$")
LCTL_PARAM = re.compile(r"^[A-Za-z0-9_*?\[\]-]+(\.[A-Za-z0-9_*?\[\]-]+)*$")
LCTL_VALUE = re.compile(r"^[A-Za-z0-9._:+-]+$")
MODULE_NAME = re.compile(r"^[a-z0-9_]+$")
MODULE_OPTION = re.compile(r"^[A-Za-z0-9_]+=[^\s#'\"\\$`]+$")
NID = re.compile(r"^[A-Za-z0-9.:_-]+@[a-z]+[0-9]*$")
IFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")

# Fields this reader no longer accepts, with what replaced them. Refused rather than
# ignored: an old file must not silently lose its meaning.
_DISK_LAYOUT = (
    "HyperPod mounts the group's EBS volume at ebs_volume_mount_point and the instance store "
    "is mounted at instance_store_mount_point; the scripts choose between them (README.md)"
)
REMOVED: dict[str, str] = {
    "nvme_mount_point": f"removed: {_DISK_LAYOUT}",
    "containerd_on_nvme": "renamed to containerd_on_data_volume",
    "kubelet_on_nvme": "renamed to kubelet_on_data_volume",
    "nvme_wait_seconds": "renamed to mount_wait_seconds",
    "require_nvme": f"removed: no disk layout fails a node any more; {_DISK_LAYOUT}",
    "require_nvme_on_gpu": f"removed: no disk layout fails a node any more; {_DISK_LAYOUT}",
    "log_dir": (
        "removed: HyperPod uploads only /var/log/provision/provisioning.log to CloudWatch, "
        "so the log always goes there"
    ),
}


class ConfigError(Exception):
    pass


def fail(field: str, message: str) -> NoReturn:
    raise ConfigError(f"field '{field}': {message}")


def type_name(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


def as_bool(field: str, value: object) -> str:
    if not isinstance(value, bool):
        fail(field, f"must be a boolean (true/false), got {type_name(value)}")
    return "true" if value else "false"


def as_path(field: str, value: object) -> str:
    if not isinstance(value, str):
        fail(field, f"must be a string, got {type_name(value)}")
    segments = value.split("/")[1:]
    if not ABS_PATH.match(value) or any(s in ("", ".", "..") for s in segments):
        fail(
            field,
            f"must be an absolute path without spaces, empty, '.' or '..' segments, got {value!r}",
        )
    return value


def check_finite(field: str, value: object) -> None:
    """Reject NaN and infinities (JSON NaN/Infinity, or numbers too large for a
    float such as 1e999) anywhere inside a field's value."""
    if isinstance(value, float) and not math.isfinite(value):
        fail(field, f"numbers must be finite, got {value}")
    if isinstance(value, dict):
        for item in value.values():
            check_finite(field, item)
    elif isinstance(value, list):
        for item in value:
            check_finite(field, item)


def as_int(low: int, high: int) -> Callable[[str, object], str]:
    def check(field: str, value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, int):
            fail(field, f"must be an integer, got {type_name(value)}")
        if not low <= value <= high:
            fail(field, f"must be between {low} and {high}, got {value}")
        return str(value)

    return check


def as_iface(field: str, value: object) -> str:
    if not isinstance(value, str):
        fail(field, f"must be a string, got {type_name(value)}")
    if value and not IFACE.match(value):
        fail(field, f"is not a network interface name: {value!r}")
    return value


def as_tuning(field: str, value: object) -> list[str]:
    if not isinstance(value, dict):
        fail(field, f"must be an object of lctl parameter -> value, got {type_name(value)}")
    out: list[str] = []
    for key in sorted(value):
        item = value[key]
        if not LCTL_PARAM.match(key):
            fail(field, f"invalid lctl parameter name {key!r}")
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            fail(field, f"value of {key!r} must be a string or number, got {type_name(item)}")
        text = str(item)
        if not LCTL_VALUE.match(text):
            fail(field, f"value of {key!r} is not a plain token: {text!r}")
        out.append(f"{key}={text}")
    return out


def as_module_options(field: str, value: object) -> list[str]:
    if not isinstance(value, dict):
        fail(field, f"must be an object of kernel module -> options string, got {type_name(value)}")
    out: list[str] = []
    for module in sorted(value):
        options = value[module]
        if not MODULE_NAME.match(module):
            fail(field, f"invalid kernel module name {module!r}")
        if not isinstance(options, str) or not options.split():
            fail(field, f"options of {module!r} must be a non-empty string")
        for token in options.split():
            if not MODULE_OPTION.match(token):
                fail(field, f"option {token!r} of {module!r} is not name=value")
        out.append("{} {}".format(module, " ".join(options.split())))
    return out


def as_nids(field: str, value: object) -> list[str]:
    if not isinstance(value, list):
        fail(field, f"must be an array of LNet NIDs, got {type_name(value)}")
    for item in value:
        if not isinstance(item, str) or not NID.match(item):
            fail(field, f"{item!r} is not an LNet NID such as 10.0.0.5@tcp")
    return list(value)


# field -> (required, default, checker). Defaults are documented in README.md.
SCHEMA: dict[str, tuple[bool, Any, Callable[[str, Any], str | list[str]]]] = {
    "containerd_on_data_volume": (True, None, as_bool),
    "kubelet_on_data_volume": (True, None, as_bool),
    "fsx_efa_enabled": (True, None, as_bool),
    # API reference, ClusterEbsVolumeConfig: the group's EBS volume is "mounted to /opt/sagemaker".
    "ebs_volume_mount_point": (False, "/opt/sagemaker", as_path),
    # Where AWS's HyperPod lifecycle scripts find the instance store (README.md).
    "instance_store_mount_point": (False, "/opt/dlami/nvme", as_path),
    "mount_wait_seconds": (False, 60, as_int(0, 3600)),
    "lustre_enabled": (False, True, as_bool),
    "lustre_module_options": (False, {}, as_module_options),
    "lustre_tuning": (False, {}, as_tuning),
    "lustre_ping_nids": (False, [], as_nids),
    "lnet_tcp_interface": (False, "", as_iface),
    "lnet_efa_max_interfaces": (False, 8, as_int(1, 64)),
}


def parse(text: str) -> tuple[dict[str, str | list[str]], list[str]]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a JSON object, got {type_name(data)}")
    for field in sorted(data):
        if field in REMOVED:
            fail(field, REMOVED[field])
        check_finite(field, data[field])
    values: dict[str, str | list[str]] = {}
    for field, (required, default, check) in SCHEMA.items():
        if field not in data:
            if required:
                fail(field, "is required but missing")
            data_value = default
        else:
            data_value = data[field]
        values[field] = check(field, data_value)
    if values["fsx_efa_enabled"] == "true" and values["lustre_enabled"] != "true":
        fail("fsx_efa_enabled", "requires lustre_enabled to be true")
    warnings = [f"unknown field '{k}' ignored" for k in sorted(data) if k not in SCHEMA]
    return values, warnings


def shell_assignments(values: dict[str, str | list[str]], warnings: list[str]) -> str:
    lines = []
    for field in SCHEMA:
        name = "CFG_" + field.upper()
        value = values[field]
        if isinstance(value, list):
            lines.append("{}=({})".format(name, " ".join(shlex.quote(v) for v in value)))
        else:
            lines.append(f"{name}={shlex.quote(value)}")
    lines.append("CFG_WARNINGS=({})".format(" ".join(shlex.quote(w) for w in warnings)))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: read_config.py PATH")
        return 2
    try:
        with open(argv[1], encoding="utf-8") as handle:
            text = handle.read()
        values, warnings = parse(text)
    except OSError as exc:
        print(f"cannot read {argv[1]}: {exc.strerror}")
        return 2
    except (ConfigError, UnicodeDecodeError) as exc:
        print(str(exc).replace("\n", " "))
        return 2
    print(shell_assignments(values, warnings))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
