"""Sandbox for running the HyperPod lifecycle scripts without touching the host.

Each sandbox has:
  * the S3 prefix layout: links to the lifecycle/ files plus a generated lifecycle_config.json,
  * a fake node file system used as LIFECYCLE_ROOT,
  * a stub bin directory first on PATH: every system command the scripts may
    call (and every network tool they must never call) records its argv in a
    calls log, and can be told to fail through STUB_FAIL; `cp` is recorded and
    failable too but otherwise really copies,
  * a small amount of faked state (mount table, active units, LNet nets) so
    that a second run sees what the first one did,
  * a node image: /etc/os-release plus the containerd config the image's node
    bootstrap leaves (Amazon Linux 2023 by default, or Amazon Linux 2), and a
    PCI bus with or without NVIDIA GPUs.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LIFECYCLE_SRC = Path(__file__).resolve().parents[2] / "lifecycle"

NETWORK_TOOLS = (
    "curl",
    "wget",
    "git",
    "pip",
    "pip3",
    "apt",
    "apt-get",
    "yum",
    "dnf",
    "aws",
    "scp",
    "rsync",
    "nc",
    "ftp",
)
SYSTEM_TOOLS = (
    "systemctl",
    "modprobe",
    "lnetctl",
    "lctl",
    "mount",
    "umount",
    "mountpoint",
    "findmnt",
    "lsblk",
    "ip",
    "sleep",
    "sync",
    "mkfs",
    "mkfs.ext4",
    "mkfs.xfs",
    "mdadm",
    "blkid",
)
# Recorded (and failable through STUB_FAIL) like the stubs, but otherwise run
# the real command: the scripts' data copies must really happen.
PASSTHROUGH_TOOLS = ("cp",)

# One bash stub for every command, dispatching on its own name.
STUB = r"""#!/usr/bin/env bash
name=${0##*/}
{ printf '%s' "$name"; [[ $# -eq 0 ]] || printf '\t%s' "$@"; printf '\n'; } >>"$STUB_CALLS"
line="$name $*"
IFS=';' read -r -a patterns <<<"${STUB_FAIL:-}"
for pattern in "${patterns[@]}"; do
  if [[ -n "$pattern" && "$line" == $pattern ]]; then
    echo "stub: simulated failure of: $line" >&2
    exit "${STUB_FAIL_RC:-1}"
  fi
done
case "$name" in
  cp)
    command -p cp "$@"; exit ;;
  mountpoint)
    grep -qxF -- "${@: -1}" "$STUB_STATE/mounts" || exit 32 ;;
  mount)
    if [[ "$1" == --bind ]]; then printf '%s\n' "$3" >>"$STUB_STATE/mounts"; fi ;;
  systemctl)
    if [[ "$1" == is-active && " ${STUB_ACTIVE_UNITS:-} " != *" ${@: -1} "* ]]; then exit 3; fi ;;
  lsblk)
    printf '%s' "${STUB_LSBLK:-}" ;;
  ip)
    printf '%s\n' "${STUB_IP_ROUTE:-}" ;;
  lnetctl)
    case "$1 $2" in
      "net show") printf 'net:\n    - net type: lo\n'; cat "$STUB_STATE/lnet" ;;
      "net add") printf '    - net type: %s\n      interfaces: %s\n' "$4" "$6" >>"$STUB_STATE/lnet" ;;
    esac ;;
esac
exit 0
"""

# What nodeadm writes to /etc/containerd/config.toml on Amazon Linux 2023
# (nodeadm/internal/containerd/config.template.toml in awslabs/amazon-eks-ami).
NODEADM_CONTAINERD_TOML = """\
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "nvidia"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "localhost/kubernetes/pause"
enable_cdi = true
"""

# The Amazon Linux 2 bootstrap's template, /etc/eks/containerd/containerd-config.toml.
AL2_CONTAINERD_TOML = """\
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "nvidia"
"""

OS_RELEASE = {
    "al2023": 'NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nVERSION_ID="2023"\n',
    "al2": 'NAME="Amazon Linux"\nVERSION="2"\nID="amzn"\nID_LIKE="centos rhel fedora"\nVERSION_ID="2"\n',
}

FSTAB = "UUID=0b7a-root / xfs defaults,noatime 1 1\n"

# Where the group's EBS volume and the instance store are mounted (the scripts' defaults).
EBS_MOUNT = "/opt/sagemaker"
INSTANCE_STORE_MOUNT = "/opt/dlami/nvme"

BASE_CONFIG = {
    "containerd_on_data_volume": True,
    "kubelet_on_data_volume": True,
    "fsx_efa_enabled": False,
    "mount_wait_seconds": 10,
    "lustre_module_options": {"ptlrpc": "ptlrpcd_per_cpt_max=64"},
}

EBS_DISK = "Amazon Elastic Block Store\n"
INSTANCE_STORE_DISK = "Amazon EC2 NVMe Instance Storage\n"
DEFAULT_ROUTE = "default via 10.1.0.1 dev ens5 proto dhcp src 10.1.0.10 metric 512"


def make_stub_bin(bin_dir: Path) -> Path:
    """Stub executables shared by all sandboxes (their state lives in env vars)."""
    bin_dir.mkdir()
    for name in NETWORK_TOOLS + SYSTEM_TOOLS + PASSTHROUGH_TOOLS:
        stub = bin_dir / name
        stub.write_text(STUB)
        stub.chmod(0o755)
    # The scripts parse their config with the AMI's python3.
    (bin_dir / "python3").symlink_to(sys.executable)
    return bin_dir


class Sandbox:
    network_tools = NETWORK_TOOLS

    def __init__(self, tmp: Path, bin_dir: Path):
        self.base = tmp
        self.scripts = tmp / "prefix"  # what HyperPod downloads from S3
        self.root = tmp / "node"  # LIFECYCLE_ROOT
        self.bin = bin_dir
        self.state = tmp / "state"
        self.calls_file = tmp / "calls.log"
        # The downloaded prefix: the lifecycle files (linked, not copied: they
        # are only read) plus a generated lifecycle_config.json.
        self.scripts.mkdir()
        for entry in LIFECYCLE_SRC.iterdir():
            if entry.name not in ("__pycache__", "lifecycle_config.json"):
                (self.scripts / entry.name).symlink_to(entry)
        for path in (self.root, self.state):
            path.mkdir()
        (self.state / "lnet").touch()
        (self.state / "mounts").touch()
        self.env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(tmp),
            "LANG": "C.UTF-8",
            "LIFECYCLE_ROOT": str(self.root),
            "LIFECYCLE_FAILURE_DELAY_SECONDS": "0",
            "STUB_CALLS": str(self.calls_file),
            "STUB_STATE": str(self.state),
            "STUB_ACTIVE_UNITS": "containerd kubelet",
            "STUB_IP_ROUTE": DEFAULT_ROUTE,
        }
        self._make_node()
        self.write_config()

    # --- the fake node -------------------------------------------------
    def path(self, system_path: str) -> Path:
        return self.root / system_path.lstrip("/")

    def _make_node(self):
        self.set_os("al2023")
        self.write("/etc/fstab", FSTAB)
        # An image the AMI pre-loaded and a kubelet file the AMI ships.
        self.write(
            "/var/lib/containerd/io.containerd.content.v1.content/blobs/sha256/pause", "pause"
        )
        self.write("/var/lib/kubelet/kubeconfig", "apiVersion: v1\n")
        self.set_layout(ebs=True, instance_store=True)
        self.set_nvidia_gpus(2)
        self.set_efa_devices(4)

    def set_os(self, image: str):
        """The OS image and the containerd config its node bootstrap leaves behind."""
        self.write("/etc/os-release", OS_RELEASE[image])
        for path in ("/etc/containerd/config.toml", "/etc/eks/containerd/containerd-config.toml"):
            self.path(path).unlink(missing_ok=True)
        if image == "al2023":
            self.write("/etc/containerd/config.toml", NODEADM_CONTAINERD_TOML)
        else:
            self.write("/etc/eks/containerd/containerd-config.toml", AL2_CONTAINERD_TOML)

    def set_nvidia_gpus(self, count: int, *, other_devices: bool = True):
        """PCI devices: COUNT NVIDIA 3D controllers, plus an NVIDIA audio function and an
        Amazon NVMe controller that must not count as GPUs."""
        pci = self.path("/sys/bus/pci/devices")
        shutil.rmtree(pci, ignore_errors=True)
        pci.mkdir(parents=True)
        devices = [("0x10de", "0x030200")] * count
        if other_devices:
            devices += [("0x10de", "0x040300"), ("0x1d0f", "0x010802")]
        for i, (vendor, cls) in enumerate(devices):
            dev = pci / f"0000:{i + 16:02x}:00.0"
            dev.mkdir()
            (dev / "vendor").write_text(vendor + "\n")
            (dev / "class").write_text(cls + "\n")

    def write(self, system_path: str, text: str):
        target = self.path(system_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def read(self, system_path: str) -> str:
        return self.path(system_path).read_text()

    def set_layout(self, *, ebs: bool, instance_store: bool):
        """The node's disks and mounts: the root volume, plus the group's EBS volume mounted
        at EBS_MOUNT and/or two instance-store disks mounted at INSTANCE_STORE_MOUNT (a p5
        with an EBS volume has both)."""
        self.env["STUB_LSBLK"] = EBS_DISK * (2 if ebs else 1) + (
            INSTANCE_STORE_DISK * 2 if instance_store else ""
        )
        self.set_mounted(
            *([EBS_MOUNT] if ebs else []), *([INSTANCE_STORE_MOUNT] if instance_store else [])
        )

    def set_mounted(self, *mount_points: str):
        """Exactly these system paths are mount points (their directories exist either way)."""
        for mount_point in (EBS_MOUNT, INSTANCE_STORE_MOUNT):
            self.path(mount_point).mkdir(parents=True, exist_ok=True)
        lines = "".join(f"{self.path(m)}\n" for m in mount_points)
        (self.state / "mounts").write_text(lines)

    def set_efa_devices(self, count: int):
        ib = self.path("/sys/class/infiniband")
        shutil.rmtree(ib, ignore_errors=True)
        ib.mkdir(parents=True)
        for i in range(count):
            (ib / f"rdmap{i:02d}s0").mkdir()

    # --- config ------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.scripts / "lifecycle_config.json"

    def write_config(self, **overrides):
        config = dict(BASE_CONFIG)
        config.update(overrides)
        self.config_path.write_text(json.dumps(config, indent=2))
        return config

    # --- running -------------------------------------------------------------
    def run(self, **env) -> subprocess.CompletedProcess:
        full_env = dict(self.env)
        full_env.update({k: str(v) for k, v in env.items()})
        return subprocess.run(
            ["bash", str(self.scripts / "on_create.sh")],
            cwd=self.scripts,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def calls(self):
        if not self.calls_file.exists():
            return []
        return [tuple(line.split("\t")) for line in self.calls_file.read_text().splitlines()]

    def call_lines(self):
        return [" ".join(c) for c in self.calls()]

    def reset_calls(self):
        self.calls_file.unlink(missing_ok=True)

    def log_text(self) -> str:
        log = self.path("/var/log/provision/provisioning.log")
        return log.read_text() if log.exists() else ""

    def tree_hash(self, exclude=("/var/log",)) -> str:
        """Hash of every path, mode, symlink target and file content under the node root."""
        skipped = [self.path(p) for p in exclude]
        digest = hashlib.sha256()
        for path in sorted(self.root.rglob("*")):
            if any(path == s or s in path.parents for s in skipped):
                continue
            rel = path.relative_to(self.root).as_posix()
            digest.update(f"{rel}\0{path.lstat().st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
        return digest.hexdigest()


@pytest.fixture(scope="session")
def stub_bin(tmp_path_factory) -> Path:
    return make_stub_bin(tmp_path_factory.mktemp("stubs") / "bin")


@pytest.fixture
def sandbox(tmp_path, stub_bin) -> Sandbox:
    return Sandbox(tmp_path, stub_bin)


@pytest.fixture
def network_tools():
    return NETWORK_TOOLS
