# shellcheck shell=bash
# Step: choose the data volume for containerd and kubelet.
#
# A HyperPod node can have two local volumes besides its root volume, each
# mounted by something other than these scripts before they run:
#
#   EBS volume      the instance group's extra EBS volume (InstanceStorageConfigs
#                   EbsVolumeConfig), "attached to each instance ... and mounted
#                   to /opt/sagemaker" (API reference, ClusterEbsVolumeConfig).
#   instance store  the instance's NVMe instance-store disks, mounted separately
#                   at /opt/dlami/nvme, the other choice AWS's HyperPod EKS
#                   lifecycle script offers (awsome-distributed-training
#                   1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/
#                   base-config/on_create_main.sh, DISK_FOR_CONTAINERD_KUBELET).
#
# Rule, per layout (that script with its default, /opt/sagemaker, first):
#   EBS volume mounted          -> the EBS volume, whatever else the node has
#   only the instance store     -> the instance store
#   neither                     -> the root volume, with a WARN line
# The EBS volume comes first because it is AWS's default, HyperPod itself
# mounts it and its size is chosen per group (ebs_volume_gib); the instance store
# is the fallback for a group without one. No layout fails the node: a node
# whose disks differ from what was expected still joins, and the log says
# where its data went. This step never formats or mounts a disk.

DATA_VOLUME=""
EBS_MODEL='Elastic Block Store'
INSTANCE_STORE_MODEL='Instance Storage'

# True once step_data_volume chose a data volume (its mount point is DATA_VOLUME).
data_volume_chosen() {
  [[ -n "$DATA_VOLUME" ]]
}

# is_mounted MOUNT: true when something is mounted at MOUNT (a system path).
is_mounted() {
  mountpoint -q "$(sys_path "$1")"
}

step_data_volume() {
  begin_step data_volume
  if [[ "$CFG_CONTAINERD_ON_DATA_VOLUME" != true && "$CFG_KUBELET_ON_DATA_VOLUME" != true ]]; then
    log_info "containerd_on_data_volume and kubelet_on_data_volume are false: no data volume needed"
    return 0
  fi

  local ebs="$CFG_EBS_VOLUME_MOUNT_POINT" store="$CFG_INSTANCE_STORE_MOUNT_POINT"
  local disks ebs_disks store_disks
  run lsblk -d -n -o MODEL
  disks=$CAPTURED
  ebs_disks="$(grep -c "$EBS_MODEL" <<<"$disks" || true)"
  store_disks="$(grep -c "$INSTANCE_STORE_MODEL" <<<"$disks" || true)"
  log_info "disks: $ebs_disks EBS (the root volume is one), $store_disks instance store"

  # Wait only for a mount whose disks are attached, and only until the
  # preferred one is there: a later one is not used while an earlier one is.
  local -a expected=()
  if ((ebs_disks > 1)); then expected+=("$ebs"); fi
  if ((store_disks > 0)); then expected+=("$store"); fi
  local mount waited=0
  for mount in "${expected[@]+"${expected[@]}"}"; do
    while ! is_mounted "$mount" && ((waited < CFG_MOUNT_WAIT_SECONDS)); do
      log_info "waiting for $mount to be mounted (${waited}s/${CFG_MOUNT_WAIT_SECONDS}s)"
      sleep 5
      waited=$((waited + 5))
    done
    if is_mounted "$mount"; then break; fi
    log_warn "$mount is not mounted after ${waited}s although its disks are attached"
  done

  if is_mounted "$ebs"; then
    DATA_VOLUME=$ebs
    log_info "data volume: the EBS volume at $ebs"
  elif is_mounted "$store"; then
    DATA_VOLUME=$store
    log_info "data volume: the instance store at $store (no EBS volume at $ebs)"
  else
    log_warn "neither an EBS volume at $ebs nor the instance store at $store is mounted:" \
      "containerd and kubelet stay on the root volume"
  fi
}
