# shellcheck shell=bash
# Step: find the NVMe instance store that HyperPod mounts at nvme_mount_point.
# The containerd and kubelet steps ask nvme_available afterwards.
# HyperPod formats and mounts the instance store itself; this step never
# formats or mounts a disk, it only waits for the mount to appear.

NVME_AVAILABLE=false

# True once step_nvme found the instance store mounted.
nvme_available() {
  [[ "$NVME_AVAILABLE" == true ]]
}

# True when lsblk reports at least one EC2 instance-store NVMe disk.
has_instance_store_disks() {
  run lsblk -d -n -o MODEL
  grep -q 'Instance Storage' <<<"$CAPTURED"
}

step_nvme() {
  begin_step nvme
  if [[ "$CFG_CONTAINERD_ON_NVME" != true && "$CFG_KUBELET_ON_NVME" != true ]]; then
    log_info "containerd_on_nvme and kubelet_on_nvme are false: NVMe not needed"
    return 0
  fi
  local mount_point waited=0
  mount_point="$(sys_path "$CFG_NVME_MOUNT_POINT")"
  if ! mountpoint -q "$mount_point" && has_instance_store_disks; then
    # The instance has instance-store disks: give HyperPod time to mount them.
    while ! mountpoint -q "$mount_point" && ((waited < CFG_NVME_WAIT_SECONDS)); do
      log_info "waiting for $CFG_NVME_MOUNT_POINT to be mounted (${waited}s/${CFG_NVME_WAIT_SECONDS}s)"
      sleep 5
      waited=$((waited + 5))
    done
  fi
  if mountpoint -q "$mount_point"; then
    NVME_AVAILABLE=true
    log_info "NVMe instance store is mounted at $CFG_NVME_MOUNT_POINT"
    return 0
  fi
  if [[ "$CFG_REQUIRE_NVME" == true ]]; then
    die "NVMe instance store not mounted at nvme_mount_point=$CFG_NVME_MOUNT_POINT and require_nvme is true"
  fi
  log_warn "NVMe instance store not mounted at $CFG_NVME_MOUNT_POINT: containerd and kubelet stay on the root volume"
}
