"""Behaviour of lifecycle/on_create.sh, run against a sandboxed node with stubbed commands."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

LIFECYCLE_SRC = Path(__file__).resolve().parents[2] / "lifecycle"

TIMESTAMPED = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} \[(INFO|WARN|ERROR)\] \[[a-z]+\] "
)
KUBELET_FSTAB = (
    "/opt/dlami/nvme/kubelet /var/lib/kubelet none "
    "bind,nofail,x-systemd.requires-mounts-for=/opt/dlami/nvme 0 0"
)


def assert_no_network_tools(sandbox):
    used = sorted({c[0] for c in sandbox.calls() if c[0] in sandbox.network_tools})
    assert used == [], f"network tools invoked: {used}"


def error_lines(sandbox, log_dir="/var/log/provision"):
    return [line for line in sandbox.log_text(log_dir).splitlines() if "[ERROR]" in line]


def index_of(lines, wanted):
    assert wanted in lines, f"{wanted!r} not called; calls were:\n" + "\n".join(lines)
    return lines.index(wanted)


# --- success paths --------------------------------------------------------------


def test_success_puts_containerd_and_kubelet_on_nvme(sandbox):
    result = sandbox.run()
    assert result.returncode == 0, result.stdout + result.stderr
    root = sandbox.root

    toml = tomllib.loads(sandbox.read("/etc/eks/containerd/containerd-config.toml"))
    assert toml["root"] == "/opt/dlami/nvme/containerd"
    assert toml["state"] == "/run/containerd"
    assert (
        toml["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"]
        == "nvidia"
    )
    assert (
        sandbox.read("/etc/eks/containerd/containerd-config.toml.pre-lifecycle").count(
            "/var/lib/containerd"
        )
        == 1
    )
    # Pre-loaded images were copied to the new root.
    assert (
        root / "opt/dlami/nvme/containerd/io.containerd.content.v1.content/blobs/sha256/pause"
    ).read_text() == "pause"
    assert "RequiresMountsFor=/opt/dlami/nvme" in sandbox.read(
        "/etc/systemd/system/containerd.service.d/50-nvme-root.conf"
    )

    # kubelet: AMI files copied, bind mount applied and persisted, unit ordered after it.
    assert (root / "opt/dlami/nvme/kubelet/kubeconfig").read_text() == "apiVersion: v1\n"
    fstab = sandbox.read("/etc/fstab").splitlines()
    assert fstab == ["UUID=0b7a-root / xfs defaults,noatime 1 1", KUBELET_FSTAB]
    assert "RequiresMountsFor=/var/lib/kubelet" in sandbox.read(
        "/etc/systemd/system/kubelet.service.d/50-nvme-root.conf"
    )

    calls = sandbox.call_lines()
    nvme, kubelet = sandbox.path("/opt/dlami/nvme"), sandbox.path("/var/lib/kubelet")
    stop_c, start_c = (
        index_of(calls, "systemctl stop containerd"),
        index_of(calls, "systemctl start containerd"),
    )
    stop_k, start_k = (
        index_of(calls, "systemctl stop kubelet"),
        index_of(calls, "systemctl start kubelet"),
    )
    mount = index_of(calls, f"mount --bind {nvme}/kubelet {kubelet}")
    assert stop_c < start_c < stop_k < mount < start_k
    assert "systemctl daemon-reload" in calls[stop_c:start_c]

    # Lustre without EFA: modules only, no LNet configuration.
    assert "modprobe lustre" in calls
    assert not any(c.startswith("lnetctl") for c in calls)
    assert sandbox.read("/etc/modules-load.d/lustre-lifecycle.conf") == "lustre\n"
    modprobe_conf = sandbox.read("/etc/modprobe.d/lustre-lifecycle.conf")
    assert "options ptlrpc ptlrpcd_per_cpt_max=64" in modprobe_conf
    assert "kefalnd" not in modprobe_conf

    # Logged to stdout and the log file, every line timestamped.
    log = sandbox.log_text().splitlines()
    assert log and all(TIMESTAMPED.match(line) for line in log), log
    assert log == result.stdout.splitlines()
    assert "[stop] on_create.sh completed" in log[-1]
    assert_no_network_tools(sandbox)


def test_success_with_efa_configures_lnet(sandbox):
    sandbox.write_config(
        fsx_efa_enabled=True,
        lustre_tuning={"max_dirty_mb": 2048, "at_max": 600},
        lustre_ping_nids=["10.1.2.3@efa"],
    )
    result = sandbox.run()
    assert result.returncode == 0, result.stdout + result.stderr

    modprobe_conf = sandbox.read("/etc/modprobe.d/lustre-lifecycle.conf").splitlines()
    assert "options kefalnd ipif_name=ens5" in modprobe_conf
    assert "options ptlrpc ptlrpcd_per_cpt_max=64" in modprobe_conf

    calls = sandbox.call_lines()
    efa_adds = [c for c in calls if c.startswith("lnetctl net add --net efa")]
    assert efa_adds == [
        f"lnetctl net add --net efa --if rdmap0{i}s0 --peer-credits 32" for i in range(4)
    ]
    order = [
        "modprobe lnet",
        "modprobe kefalnd",
        "modprobe ksocklnd",
        "lnetctl lnet configure",
        "lnetctl net add --net tcp --if ens5",
        efa_adds[0],
        "lnetctl udsp add --src efa --priority 0",
        "lnetctl set discovery 1",
        "modprobe lustre",
        "lctl set_param at_max=600",
        "lctl set_param max_dirty_mb=2048",
        "lctl ping 10.1.2.3@efa",
    ]
    positions = [index_of(calls, c) for c in order]
    assert positions == sorted(positions)
    assert_no_network_tools(sandbox)


def test_efa_devices_are_spread_and_interface_override_is_used(sandbox):
    sandbox.set_efa_devices(32)
    sandbox.write_config(fsx_efa_enabled=True, lnet_efa_max_interfaces=8, lnet_tcp_interface="eth7")
    assert sandbox.run().returncode == 0
    calls = sandbox.call_lines()
    assert [c.split()[6] for c in calls if c.startswith("lnetctl net add --net efa")] == [
        f"rdmap{i:02d}s0" for i in range(0, 32, 4)
    ]
    assert "lnetctl net add --net tcp --if eth7" in calls
    assert not any(c.startswith("ip ") for c in calls)
    assert "options kefalnd ipif_name=eth7" in sandbox.read("/etc/modprobe.d/lustre-lifecycle.conf")


def test_both_containerd_configs_are_updated_and_idle_units_are_not_started(sandbox):
    # No top-level root yet, a commented one, and a table-level `root` that must stay.
    sandbox.write(
        "/etc/containerd/config.toml",
        (
            'version = 2\n# root = "/old"\n\n[grpc]\naddress = "/run/x.sock"\n\n'
            '[plugins."io.containerd.runtime.v1.linux"]\nroot = "/run/runc-root"\n'
        ),
    )
    result = sandbox.run(STUB_ACTIVE_UNITS="")
    assert result.returncode == 0, result.stdout
    live = sandbox.read("/etc/containerd/config.toml")
    parsed = tomllib.loads(live)
    assert parsed["root"] == "/opt/dlami/nvme/containerd"
    assert parsed["plugins"]["io.containerd.runtime.v1.linux"]["root"] == "/run/runc-root"
    assert '# root = "/old"' in live
    assert live.index('root = "/opt') < live.index("[grpc]")
    assert (
        tomllib.loads(sandbox.read("/etc/eks/containerd/containerd-config.toml"))["root"]
        == "/opt/dlami/nvme/containerd"
    )
    calls = sandbox.call_lines()
    assert not any(re.match(r"systemctl (stop|start|restart) ", c) for c in calls)


def test_missing_nvme_falls_back_to_root_volume(sandbox):
    sandbox.set_nvme_mounted(False)
    sandbox.run(STUB_LSBLK="Amazon Elastic Block Store\n")
    before = sandbox.tree_hash()
    sandbox.reset_calls()
    result = sandbox.run(STUB_LSBLK="Amazon Elastic Block Store\n")
    assert result.returncode == 0, result.stdout
    assert "[WARN]" in sandbox.log_text() and "stay on the root volume" in sandbox.log_text()
    assert sandbox.tree_hash() == before
    assert (
        tomllib.loads(sandbox.read("/etc/eks/containerd/containerd-config.toml"))["root"]
        == "/var/lib/containerd"
    )
    assert sandbox.read("/etc/fstab") == "UUID=0b7a-root / xfs defaults,noatime 1 1\n"
    assert not sandbox.path("/opt/dlami/nvme/kubelet").exists()
    calls = sandbox.call_lines()
    assert not any(c.startswith(("mount ", "sleep ", "systemctl stop")) for c in calls)
    assert "modprobe lustre" in calls  # the Lustre step still runs


def test_instance_store_not_yet_mounted_is_waited_for(sandbox):
    sandbox.set_nvme_mounted(False)
    sandbox.write_config(nvme_wait_seconds=10)
    result = sandbox.run()
    assert result.returncode == 0
    assert sandbox.call_lines().count("sleep 5") == 2
    assert "waiting for /opt/dlami/nvme to be mounted" in sandbox.log_text()


def test_steps_can_be_switched_off(sandbox):
    sandbox.write_config(containerd_on_nvme=False, kubelet_on_nvme=False, lustre_enabled=False)
    before = sandbox.tree_hash()
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert sandbox.tree_hash() == before
    assert sandbox.calls() == []


def test_unknown_config_field_is_a_warning(sandbox):
    config = json.loads(sandbox.config_path.read_text())
    config["cluster_name"] = "demo"
    sandbox.config_path.write_text(json.dumps(config))
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert "[WARN] [main] config: unknown field 'cluster_name' ignored" in sandbox.log_text()


def test_log_dir_from_config_is_used(sandbox):
    sandbox.write_config(log_dir="/var/log/hyperpod")
    assert sandbox.run().returncode == 0
    assert "[stop] on_create.sh completed" in sandbox.log_text("/var/log/hyperpod")


# --- idempotence -----------------------------------------------------------------


@pytest.mark.parametrize("efa", [False, True], ids=["tcp", "efa"])
def test_second_run_changes_nothing(sandbox, efa):
    sandbox.write_config(fsx_efa_enabled=efa)
    first = sandbox.run()
    assert first.returncode == 0, first.stdout + first.stderr
    after_first = sandbox.tree_hash()
    sandbox.reset_calls()

    second = sandbox.run()
    assert second.returncode == 0, second.stdout + second.stderr
    assert sandbox.tree_hash() == after_first
    assert sandbox.read("/etc/fstab").count("/var/lib/kubelet") == 1
    assert sandbox.log_text().count("[start] on_create.sh") == 2  # appended, not truncated
    calls = sandbox.call_lines()
    assert not any(
        re.match(r"(systemctl (stop|start|daemon-reload)|mount |lnetctl (net add|udsp))", c)
        for c in calls
    ), calls
    assert_no_network_tools(sandbox)


# --- failure paths ---------------------------------------------------------------

# Lustre-step failures skip the NVMe steps: they are covered above and only slow the run down.
LUSTRE = {"containerd_on_nvme": False, "kubelet_on_nvme": False}
EFA = dict(LUSTRE, fsx_efa_enabled=True)

COMMAND_FAILURES = [
    # (command that fails, config overrides, text the ERROR line must contain)
    ("systemctl stop containerd", {}, "'systemctl stop containerd' failed"),
    ("systemctl daemon-reload", {}, "'systemctl daemon-reload' failed"),
    ("systemctl start containerd", {}, "'systemctl start containerd' failed"),
    ("systemctl stop kubelet", {}, "'systemctl stop kubelet' failed"),
    ("mount --bind *", {}, "'mount --bind"),
    ("systemctl start kubelet", {}, "'systemctl start kubelet' failed"),
    ("lsblk *", {"_unmounted": True}, "'lsblk -d -n -o MODEL' failed"),
    ("modprobe lustre", LUSTRE, "'modprobe lustre' failed"),
    ("modprobe lnet", EFA, "'modprobe lnet' failed"),
    ("modprobe kefalnd", EFA, "'modprobe kefalnd' failed"),
    ("ip *", EFA, "'ip -o -4 route show default' failed"),
    ("lnetctl lnet configure", EFA, "'lnetctl lnet configure' failed"),
    ("lnetctl net show", EFA, "'lnetctl net show' failed"),
    ("lnetctl net add --net tcp *", EFA, "'lnetctl net add --net tcp --if ens5' failed"),
    ("lnetctl net add --net efa *", EFA, "'lnetctl net add --net efa --if rdmap00s0"),
    ("lnetctl udsp *", EFA, "'lnetctl udsp add --src efa --priority 0' failed"),
    ("lnetctl set discovery *", EFA, "'lnetctl set discovery 1' failed"),
    (
        "lctl set_param *",
        dict(LUSTRE, lustre_tuning={"max_dirty_mb": 2048}),
        "'lctl set_param max_dirty_mb=2048' failed",
    ),
    (
        "lctl ping *",
        dict(LUSTRE, lustre_ping_nids=["10.1.2.3@tcp"]),
        "'lctl ping 10.1.2.3@tcp' failed",
    ),
]


@pytest.mark.parametrize(
    "pattern,overrides,message", COMMAND_FAILURES, ids=[c[0] for c in COMMAND_FAILURES]
)
def test_failing_command_stops_the_script(sandbox, pattern, overrides, message):
    overrides = dict(overrides)
    if overrides.pop("_unmounted", False):
        sandbox.set_nvme_mounted(False)
    sandbox.write_config(**overrides)
    result = sandbox.run(STUB_FAIL=pattern, STUB_FAIL_RC=7)
    assert result.returncode != 0
    errors = error_lines(sandbox)
    assert any(message in line and "(exit 7)" in line for line in errors), errors
    assert "[stop] on_create.sh failed" in errors[-1]
    assert "simulated failure" in sandbox.log_text()  # the command's own output is logged
    assert_no_network_tools(sandbox)


def test_failure_waits_for_log_upload(sandbox):
    result = sandbox.run(STUB_FAIL="modprobe lustre", LIFECYCLE_FAILURE_DELAY_SECONDS=60)
    assert result.returncode != 0
    calls = sandbox.call_lines()
    assert calls[-2:] == ["sync", "sleep 60"]


SERVICE_WINDOW_FAILURES = [
    # (command failing while a unit is stopped, the unit, the command that failed)
    ("cp -a *", "containerd", "cp -a --one-file-system"),
    ("systemctl daemon-reload", "containerd", "systemctl daemon-reload"),
    ("cp -a --one-file-system */var/lib/kubelet *", "kubelet", "cp -a --one-file-system"),
    ("mount --bind *", "kubelet", "mount --bind"),
]


@pytest.mark.parametrize(
    "pattern,unit,failed", SERVICE_WINDOW_FAILURES, ids=[c[0] for c in SERVICE_WINDOW_FAILURES]
)
def test_failure_while_a_service_is_stopped_starts_it_again(sandbox, pattern, unit, failed):
    result = sandbox.run(STUB_FAIL=pattern, STUB_FAIL_RC=7)
    assert result.returncode != 0
    calls = sandbox.call_lines()
    stop = index_of(calls, f"systemctl stop {unit}")
    failure = max(i for i, c in enumerate(calls) if c.startswith(failed))
    assert stop < failure
    # Started again after the failure, once, and before the wait for the log upload.
    assert calls[failure + 1 :] == [f"systemctl start {unit}", "sync", "sleep 0"], calls
    log = sandbox.log_text()
    assert f"failure while {unit} was stopped: starting {unit} again" in log
    assert f"started {unit} again" in log
    assert "[stop] on_create.sh failed" in error_lines(sandbox)[-1]


def test_service_that_does_not_start_again_is_logged(sandbox):
    result = sandbox.run(STUB_FAIL="mount --bind *;systemctl start kubelet", STUB_FAIL_RC=7)
    assert result.returncode != 0
    assert sandbox.call_lines()[-3:] == ["systemctl start kubelet", "sync", "sleep 0"]
    errors = error_lines(sandbox)
    assert any("could not start kubelet again (exit 7)" in line for line in errors), errors
    assert "[stop] on_create.sh failed" in errors[-1]


def test_failure_outside_the_stop_window_starts_nothing(sandbox):
    result = sandbox.run(STUB_FAIL="modprobe lustre")
    assert result.returncode != 0
    calls = sandbox.call_lines()
    # Each unit was stopped and started exactly once by its own step.
    assert calls.count("systemctl start containerd") == 1
    assert calls.count("systemctl start kubelet") == 1
    assert "starting" not in sandbox.log_text()


def test_init_failure_still_waits_for_log_upload(sandbox):
    # lifecycle_init rejects the sandbox root before the log file exists.
    result = sandbox.run(LIFECYCLE_ROOT="relative/dir", LIFECYCLE_FAILURE_DELAY_SECONDS=60)
    assert result.returncode != 0
    assert sandbox.call_lines() == ["sync", "sleep 60"]
    assert "[stop] on_create.sh failed with exit 1" in result.stdout.splitlines()[-1]


def test_not_running_as_root_still_waits_for_log_upload(tmp_path):
    """The real root check, with no sandbox root: run as an unprivileged user."""
    prefix = Path(tempfile.mkdtemp(prefix="lifecycle-nonroot-"))
    try:
        prefix.chmod(0o755)
        shutil.copytree(
            LIFECYCLE_SRC, prefix / "lifecycle", ignore=shutil.ignore_patterns("__pycache__")
        )
        bin_dir = prefix / "bin"
        bin_dir.mkdir()
        calls = prefix / "calls.log"
        calls.touch()
        calls.chmod(0o666)
        for name in ("sync", "sleep"):
            stub = bin_dir / name
            stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >>"{calls}"\n')
            stub.chmod(0o755)
        command = ["bash", str(prefix / "lifecycle/on_create.sh")]
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            # util-linux ships setpriv on every Debian-based machine this project runs on.
            assert setpriv is not None, (
                "running as root needs setpriv (util-linux) to drop privileges"
            )
            command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LIFECYCLE_FAILURE_DELAY_SECONDS": "60",
        }
        result = subprocess.run(
            command, cwd=prefix, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode != 0
        lines = result.stdout.splitlines()
        assert any("[ERROR] [init] must run as root" in line for line in lines), (
            result.stdout + result.stderr
        )
        assert "[stop] on_create.sh failed with exit 1" in lines[-1]
        assert calls.read_text().splitlines() == ["sync ", "sleep 60"]
    finally:
        shutil.rmtree(prefix)


def nvme_missing_but_required(s):
    s.set_nvme_mounted(False)
    s.write_config(require_nvme=True)


def efa_enabled_without_devices(s):
    s.set_efa_devices(0)
    s.write_config(fsx_efa_enabled=True)


def efa_enabled_without_default_route(s):
    s.write_config(fsx_efa_enabled=True)
    s.env["STUB_IP_ROUTE"] = ""


def no_containerd_config(s):
    s.path("/etc/eks/containerd/containerd-config.toml").unlink()


def kubelet_dir_is_symlink(s):
    shutil.rmtree(s.path("/var/lib/kubelet"))
    s.write("/var/lib/kubelet.real/kubeconfig", "")
    s.path("/var/lib/kubelet").symlink_to("kubelet.real")


def config_file_missing(s):
    s.config_path.unlink()


ENVIRONMENT_FAILURES = [
    # (node setup, text the ERROR line must contain)
    (
        nvme_missing_but_required,
        "not mounted at nvme_mount_point=/opt/dlami/nvme and require_nvme is true",
    ),
    (efa_enabled_without_devices, "no EFA device exists under /sys/class/infiniband"),
    (efa_enabled_without_default_route, "no default-route interface found"),
    (no_containerd_config, "no containerd config exists"),
    (kubelet_dir_is_symlink, "/var/lib/kubelet is a symlink"),
    (config_file_missing, "config file not found"),
]


@pytest.mark.parametrize(
    "setup,message", ENVIRONMENT_FAILURES, ids=[f.__name__ for f, _ in ENVIRONMENT_FAILURES]
)
def test_unusable_node_fails_loudly(sandbox, setup, message):
    setup(sandbox)
    result = sandbox.run()
    assert result.returncode != 0
    errors = error_lines(sandbox)
    assert any(message in line for line in errors), errors
    assert_no_network_tools(sandbox)


def test_relative_sandbox_root_is_rejected(sandbox):
    result = sandbox.run(LIFECYCLE_ROOT="relative/dir")
    assert result.returncode != 0
    assert "LIFECYCLE_ROOT must be an existing absolute directory" in result.stdout


MISSING = object()
MINIMAL_CONFIG = {
    "nvme_mount_point": "/opt/dlami/nvme",
    "containerd_on_nvme": True,
    "kubelet_on_nvme": True,
    "fsx_efa_enabled": False,
}

BAD_CONFIGS = [
    # (id, config text or changes to MINIMAL_CONFIG, text of the error)
    ("not-json", "{nvme_mount_point: ", "not valid JSON"),
    ("not-object", "[]", "top level must be a JSON object"),
    ("missing-nvme_mount_point", {"nvme_mount_point": MISSING}, "'nvme_mount_point': is required"),
    (
        "missing-containerd_on_nvme",
        {"containerd_on_nvme": MISSING},
        "'containerd_on_nvme': is required",
    ),
    ("missing-kubelet_on_nvme", {"kubelet_on_nvme": MISSING}, "'kubelet_on_nvme': is required"),
    ("missing-fsx_efa_enabled", {"fsx_efa_enabled": MISSING}, "'fsx_efa_enabled': is required"),
    ("string-bool", {"containerd_on_nvme": "true"}, "'containerd_on_nvme': must be a boolean"),
    ("int-bool", {"kubelet_on_nvme": 1}, "'kubelet_on_nvme': must be a boolean"),
    (
        "null-bool",
        {"fsx_efa_enabled": None},
        "'fsx_efa_enabled': must be a boolean (true/false), got null",
    ),
    (
        "relative-path",
        {"nvme_mount_point": "opt/dlami/nvme"},
        "'nvme_mount_point': must be an absolute path",
    ),
    (
        "dotdot-path",
        {"nvme_mount_point": "/opt/../etc"},
        "'nvme_mount_point': must be an absolute path",
    ),
    ("root-path", {"nvme_mount_point": "/"}, "'nvme_mount_point': must be an absolute path"),
    ("dot-path", {"nvme_mount_point": "/."}, "'nvme_mount_point': must be an absolute path"),
    ("dot-segment-path", {"log_dir": "/var/./log"}, "'log_dir': must be an absolute path"),
    ("trailing-dot-path", {"log_dir": "/var/log/."}, "'log_dir': must be an absolute path"),
    (
        "trailing-dotdot-path",
        {"nvme_mount_point": "/opt/dlami/.."},
        "'nvme_mount_point': must be an absolute path",
    ),
    (
        "double-slash-path",
        {"nvme_mount_point": "/opt//nvme"},
        "'nvme_mount_point': must be an absolute path",
    ),
    (
        "nan-tuning",
        '{"nvme_mount_point": "/opt/dlami/nvme", "containerd_on_nvme": true, "kubelet_on_nvme": true, '
        '"fsx_efa_enabled": false, "lustre_tuning": {"max_dirty_mb": NaN}}',
        "'lustre_tuning': numbers must be finite",
    ),
    (
        "infinity-tuning",
        {"lustre_tuning": {"at_max": float("inf")}},
        "'lustre_tuning': numbers must be finite",
    ),
    (
        "negative-infinity-wait",
        {"nvme_wait_seconds": float("-inf")},
        "'nvme_wait_seconds': numbers must be finite",
    ),
    (
        "overflow-tuning",
        '{"nvme_mount_point": "/opt/dlami/nvme", "containerd_on_nvme": true, "kubelet_on_nvme": true, '
        '"fsx_efa_enabled": false, "lustre_tuning": {"max_dirty_mb": 1e999}}',
        "'lustre_tuning': numbers must be finite",
    ),
    ("nan-unknown-field", {"extra": [1, {"x": float("nan")}]}, "'extra': numbers must be finite"),
    ("space-path", {"log_dir": "/var/log/my logs"}, "'log_dir': must be an absolute path"),
    ("number-path", {"log_dir": 5}, "'log_dir': must be a string"),
    ("negative-wait", {"nvme_wait_seconds": -1}, "'nvme_wait_seconds': must be between 0 and 3600"),
    ("bool-wait", {"nvme_wait_seconds": True}, "'nvme_wait_seconds': must be an integer"),
    ("bool-require", {"require_nvme": "yes"}, "'require_nvme': must be a boolean"),
    ("bool-lustre", {"lustre_enabled": 0}, "'lustre_enabled': must be a boolean"),
    ("tuning-list", {"lustre_tuning": ["max_dirty_mb=2048"]}, "'lustre_tuning': must be an object"),
    (
        "tuning-value",
        {"lustre_tuning": {"max_dirty_mb": {"v": 1}}},
        "'lustre_tuning': value of 'max_dirty_mb'",
    ),
    (
        "tuning-injection",
        {"lustre_tuning": {"osc.*;reboot": 1}},
        "'lustre_tuning': invalid lctl parameter",
    ),
    (
        "tuning-spaces",
        {"lustre_tuning": {"max_dirty_mb": "1 2"}},
        "'lustre_tuning': value of 'max_dirty_mb'",
    ),
    (
        "module-options",
        {"lustre_module_options": {"ptlrpc": "$(reboot)"}},
        "'lustre_module_options': option",
    ),
    (
        "module-name",
        {"lustre_module_options": {"Bad-Name": "a=1"}},
        "'lustre_module_options': invalid kernel",
    ),
    ("nids-string", {"lustre_ping_nids": "10.0.0.1@tcp"}, "'lustre_ping_nids': must be an array"),
    (
        "nid-format",
        {"lustre_ping_nids": ["10.0.0.1"]},
        "'lustre_ping_nids': '10.0.0.1' is not an LNet NID",
    ),
    ("iface", {"lnet_tcp_interface": "eth 0"}, "'lnet_tcp_interface': is not a network interface"),
    (
        "efa-max",
        {"lnet_efa_max_interfaces": 0},
        "'lnet_efa_max_interfaces': must be between 1 and 64",
    ),
    (
        "efa-without-lustre",
        {"fsx_efa_enabled": True, "lustre_enabled": False},
        "'fsx_efa_enabled': requires lustre_enabled",
    ),
]
# The end-to-end runs cover one case of each kind; the rest are checked in-process.
END_TO_END = {
    "not-json",
    "missing-containerd_on_nvme",
    "string-bool",
    "relative-path",
    "efa-without-lustre",
    "nan-tuning",
    "dot-path",
}


def config_text(content):
    if isinstance(content, str):
        return content
    config = dict(MINIMAL_CONFIG)
    for key, value in content.items():
        if value is MISSING:
            config.pop(key)
        else:
            config[key] = value
    return json.dumps(config)


@pytest.fixture(scope="module")
def read_config():
    spec = importlib.util.spec_from_file_location(
        "read_config", LIFECYCLE_SRC / "lib/read_config.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "content,message", [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_config_validation_names_the_field(read_config, content, message):
    with pytest.raises(read_config.ConfigError, match=re.escape(message)) as error:
        read_config.parse(config_text(content))
    assert "\n" not in str(error.value)


def test_config_defaults(read_config):
    values, warnings = read_config.parse(json.dumps(MINIMAL_CONFIG))
    assert warnings == []
    assert values == {
        "nvme_mount_point": "/opt/dlami/nvme",
        "containerd_on_nvme": "true",
        "kubelet_on_nvme": "true",
        "fsx_efa_enabled": "false",
        "log_dir": "/var/log/provision",
        "require_nvme": "false",
        "nvme_wait_seconds": "60",
        "lustre_enabled": "true",
        "lustre_module_options": [],
        "lustre_tuning": [],
        "lustre_ping_nids": [],
        "lnet_tcp_interface": "",
        "lnet_efa_max_interfaces": "8",
    }


@pytest.mark.parametrize(
    "content,message",
    [c[1:] for c in BAD_CONFIGS if c[0] in END_TO_END],
    ids=[c[0] for c in BAD_CONFIGS if c[0] in END_TO_END],
)
def test_malformed_config_stops_the_script_with_one_line(sandbox, content, message):
    sandbox.config_path.write_text(config_text(content))
    before = sandbox.tree_hash()
    result = sandbox.run()
    assert result.returncode != 0
    config_errors = [
        line for line in error_lines(sandbox) if "invalid config lifecycle_config.json" in line
    ]
    assert len(config_errors) == 1 and message in config_errors[0], error_lines(sandbox)
    # Nothing ran on the node but the wait that lets the log reach CloudWatch.
    assert sandbox.call_lines() == ["sync", "sleep 0"]
    assert sandbox.tree_hash() == before


def test_example_config_is_valid():
    result = subprocess.run(
        [
            sys.executable,
            str(LIFECYCLE_SRC / "lib/read_config.py"),
            str(LIFECYCLE_SRC / "lifecycle_config.example.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout
    assert "CFG_NVME_MOUNT_POINT=/opt/dlami/nvme" in result.stdout.splitlines()
