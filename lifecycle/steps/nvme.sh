# shellcheck shell=bash
# Step: find the data volume that HyperPod mounts at nvme_mount_point.
#
# HyperPod formats and mounts the node's local storage itself, before the
# lifecycle scripts run: the NVMe instance-store disks (combined into LVM
# volume group vg.01) and any secondary EBS volume of the instance group
# appear at /opt/sagemaker. This step never formats or mounts a disk; it
# waits for the mount, checks what backs it, and decides whether containerd
# and kubelet move there (the containerd and kubelet steps ask
# nvme_available afterwards).
#
# A node with NVIDIA GPUs must have the instance store behind the mount
# (require_nvme_on_gpu): image layers and pod scratch space of a GPU node do
# not fit the root volume, so such a node fails here, loudly, instead of
# joining the cluster and filling its root volume later. Other nodes fall
# back to the root volume unless require_nvme is set.

NVME_AVAILABLE=false
INSTANCE_STORE_MODEL='Instance Storage'
PCI_VENDOR_NVIDIA=0x10de

# True once step_nvme found the data volume mounted.
nvme_available() {
  [[ "$NVME_AVAILABLE" == true ]]
}

# Prints how many NVIDIA GPUs the PCI bus has (vendor 0x10de, display
# controller class 0x03xxxx). Read from sysfs, so it works before any
# driver is loaded and needs neither nvidia-smi nor the network.
count_nvidia_gpus() {
  local dev vendor class count=0
  for dev in "$(sys_path /sys/bus/pci/devices)"/*; do
    [[ -r "$dev/vendor" && -r "$dev/class" ]] || continue
    read -r vendor <"$dev/vendor" || true
    read -r class <"$dev/class" || true
    if [[ "$vendor" == "$PCI_VENDOR_NVIDIA" && "$class" == 0x03* ]]; then
      count=$((count + 1))
    fi
  done
  printf '%s\n' "$count"
}

# mount_backed_by_instance_store MOUNT: true when a device under the file
# system mounted at MOUNT (MOUNT is a system path) is an instance-store disk.
# Whatever the volume group or logical volume is called.
mount_backed_by_instance_store() {
  local source
  run findmnt -n -o SOURCE --mountpoint "$(sys_path "$1")"
  source=${CAPTURED##*$'\n'}  # the top mount when several are stacked
  log_info "$1 is mounted from $source"
  # lsblk -s walks from the mounted device (an LVM volume) down to its disks;
  # it fails on a source that is no block device: not the instance store.
  try_run lsblk -s -n -o NAME,MODEL "$source" || return 1
  grep -q "$INSTANCE_STORE_MODEL" <<<"$CAPTURED"
}

step_nvme() {
  begin_step nvme
  local gpus required=false why=""
  gpus="$(count_nvidia_gpus)"
  if [[ "$CFG_REQUIRE_NVME" == true ]]; then
    required=true
    why="require_nvme is true"
  elif [[ "$CFG_REQUIRE_NVME_ON_GPU" == true && "$gpus" -gt 0 ]]; then
    required=true
    why="this node has $gpus NVIDIA GPUs and require_nvme_on_gpu is true"
  fi
  if [[ "$CFG_CONTAINERD_ON_NVME" != true && "$CFG_KUBELET_ON_NVME" != true && "$required" != true ]]; then
    log_info "containerd_on_nvme and kubelet_on_nvme are false: the data volume is not needed"
    return 0
  fi

  local mount_point="$CFG_NVME_MOUNT_POINT" disks store_disks=0 disk_count=0 waited=0
  run lsblk -d -n -o MODEL
  disks=$CAPTURED
  store_disks="$(grep -c "$INSTANCE_STORE_MODEL" <<<"$disks" || true)"
  disk_count="$(grep -c . <<<"$disks" || true)"
  log_info "$disk_count disks, $store_disks of them instance store; $gpus NVIDIA GPUs"
  if [[ "$required" == true && "$store_disks" -eq 0 ]]; then
    die "no NVMe instance-store disk is attached, but $why; this node cannot hold" \
      "its image layers and pod data (disks: ${disks//$'\n'/, })"
  fi

  # More than the root disk: HyperPod has something to mount, give it time.
  if ((disk_count > 1)); then
    while ! mountpoint -q "$(sys_path "$mount_point")" && ((waited < CFG_NVME_WAIT_SECONDS)); do
      log_info "waiting for $mount_point to be mounted (${waited}s/${CFG_NVME_WAIT_SECONDS}s)"
      sleep 5
      waited=$((waited + 5))
    done
  fi
  if ! mountpoint -q "$(sys_path "$mount_point")"; then
    if [[ "$required" == true ]]; then
      die "nothing is mounted at nvme_mount_point=$mount_point after ${waited}s, but $why;" \
        "HyperPod mounts the instance store (volume group vg.01) there"
    fi
    log_warn "nothing is mounted at $mount_point: containerd and kubelet stay on the root volume"
    return 0
  fi

  if ((store_disks > 0)) && ! mount_backed_by_instance_store "$mount_point"; then
    if [[ "$required" == true ]]; then
      die "$mount_point is not on the NVMe instance store, but $why" \
        "(devices under it: ${CAPTURED//$'\n'/, })"
    fi
    log_warn "$mount_point is not on the instance store: using it anyway"
  fi
  NVME_AVAILABLE=true
  log_info "data volume is mounted at $mount_point"
}
