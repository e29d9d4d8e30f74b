"""Validate lifecycle_config.json and print it as shell assignments.

Usage: python3 read_config.py PATH

On success prints `CFG_<FIELD>=<shell-quoted value>` lines (lists and
objects become bash arrays) for on_create.sh to eval, and exits 0.
On failure prints one line naming the offending field and exits 2.

Standard library only, and kept compatible with the python3 that ships on
every HyperPod AMI (3.7 on Amazon Linux 2), so nothing is installed at boot.
"""

import json
import math
import re
import shlex
import sys

ABS_PATH = re.compile(r"^/[A-Za-z0-9._/-]*[A-Za-z0-9._-]$")
LCTL_PARAM = re.compile(r"^[A-Za-z0-9_*?\[\]-]+(\.[A-Za-z0-9_*?\[\]-]+)*$")
LCTL_VALUE = re.compile(r"^[A-Za-z0-9._:+-]+$")
MODULE_NAME = re.compile(r"^[a-z0-9_]+$")
MODULE_OPTION = re.compile(r"^[A-Za-z0-9_]+=[^\s#'\"\\$`]+$")
NID = re.compile(r"^[A-Za-z0-9.:_-]+@[a-z]+[0-9]*$")
IFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")

DEFAULT_LOG_DIR = "/var/log/provision"


class ConfigError(Exception):
    pass


def fail(field, message):
    raise ConfigError("field '{}': {}".format(field, message))


def type_name(value):
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)


def as_bool(field, value):
    if not isinstance(value, bool):
        fail(field, "must be a boolean (true/false), got {}".format(type_name(value)))
    return "true" if value else "false"


def as_path(field, value):
    if not isinstance(value, str):
        fail(field, "must be a string, got {}".format(type_name(value)))
    segments = value.split("/")[1:]
    if not ABS_PATH.match(value) or any(s in ("", ".", "..") for s in segments):
        fail(field, "must be an absolute path without spaces, empty, '.' or '..' segments, got {!r}".format(value))
    return value


def check_finite(field, value):
    """Reject NaN and infinities (JSON NaN/Infinity, or numbers too large for a
    float such as 1e999) anywhere inside a field's value."""
    if isinstance(value, float) and not math.isfinite(value):
        fail(field, "numbers must be finite, got {}".format(value))
    if isinstance(value, dict):
        for item in value.values():
            check_finite(field, item)
    elif isinstance(value, list):
        for item in value:
            check_finite(field, item)


def as_int(low, high):
    def check(field, value):
        if isinstance(value, bool) or not isinstance(value, int):
            fail(field, "must be an integer, got {}".format(type_name(value)))
        if not low <= value <= high:
            fail(field, "must be between {} and {}, got {}".format(low, high, value))
        return str(value)
    return check


def as_iface(field, value):
    if not isinstance(value, str):
        fail(field, "must be a string, got {}".format(type_name(value)))
    if value and not IFACE.match(value):
        fail(field, "is not a network interface name: {!r}".format(value))
    return value


def as_tuning(field, value):
    if not isinstance(value, dict):
        fail(field, "must be an object of lctl parameter -> value, got {}".format(type_name(value)))
    out = []
    for key in sorted(value):
        item = value[key]
        if not LCTL_PARAM.match(key):
            fail(field, "invalid lctl parameter name {!r}".format(key))
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            fail(field, "value of {!r} must be a string or number, got {}".format(key, type_name(item)))
        text = str(item)
        if not LCTL_VALUE.match(text):
            fail(field, "value of {!r} is not a plain token: {!r}".format(key, text))
        out.append("{}={}".format(key, text))
    return out


def as_module_options(field, value):
    if not isinstance(value, dict):
        fail(field, "must be an object of kernel module -> options string, got {}".format(type_name(value)))
    out = []
    for module in sorted(value):
        options = value[module]
        if not MODULE_NAME.match(module):
            fail(field, "invalid kernel module name {!r}".format(module))
        if not isinstance(options, str) or not options.split():
            fail(field, "options of {!r} must be a non-empty string".format(module))
        for token in options.split():
            if not MODULE_OPTION.match(token):
                fail(field, "option {!r} of {!r} is not name=value".format(token, module))
        out.append("{} {}".format(module, " ".join(options.split())))
    return out


def as_nids(field, value):
    if not isinstance(value, list):
        fail(field, "must be an array of LNet NIDs, got {}".format(type_name(value)))
    for item in value:
        if not isinstance(item, str) or not NID.match(item):
            fail(field, "{!r} is not an LNet NID such as 10.0.0.5@tcp".format(item))
    return list(value)


# field -> (required, default, checker). Defaults are documented in README.md.
SCHEMA = {
    "nvme_mount_point": (True, None, as_path),
    "containerd_on_nvme": (True, None, as_bool),
    "kubelet_on_nvme": (True, None, as_bool),
    "fsx_efa_enabled": (True, None, as_bool),
    "log_dir": (False, DEFAULT_LOG_DIR, as_path),
    "require_nvme": (False, False, as_bool),
    "nvme_wait_seconds": (False, 60, as_int(0, 3600)),
    "lustre_enabled": (False, True, as_bool),
    "lustre_module_options": (False, {}, as_module_options),
    "lustre_tuning": (False, {}, as_tuning),
    "lustre_ping_nids": (False, [], as_nids),
    "lnet_tcp_interface": (False, "", as_iface),
    "lnet_efa_max_interfaces": (False, 8, as_int(1, 64)),
}


def parse(text):
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError("not valid JSON: {}".format(exc))
    if not isinstance(data, dict):
        raise ConfigError("top level must be a JSON object, got {}".format(type_name(data)))
    for field in sorted(data):
        check_finite(field, data[field])
    values = {}
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
    warnings = ["unknown field '{}' ignored".format(k) for k in sorted(data) if k not in SCHEMA]
    return values, warnings


def shell_assignments(values, warnings):
    lines = []
    for field in SCHEMA:
        name = "CFG_" + field.upper()
        value = values[field]
        if isinstance(value, list):
            lines.append("{}=({})".format(name, " ".join(shlex.quote(v) for v in value)))
        else:
            lines.append("{}={}".format(name, shlex.quote(value)))
    lines.append("CFG_WARNINGS=({})".format(" ".join(shlex.quote(w) for w in warnings)))
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print("usage: read_config.py PATH")
        return 2
    try:
        with open(argv[1], encoding="utf-8") as handle:
            text = handle.read()
        values, warnings = parse(text)
    except OSError as exc:
        print("cannot read {}: {}".format(argv[1], exc.strerror))
        return 2
    except (ConfigError, UnicodeDecodeError) as exc:
        print(str(exc).replace("\n", " "))
        return 2
    print(shell_assignments(values, warnings))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
