#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# HyperPod (EKS orchestrator) OnCreate lifecycle script, run as root once on
# every new node from the downloaded lifecycle prefix.
#
# Reads lifecycle_config.json next to this file, then:
#   1. data_volume - where containerd and kubelet go: the EBS volume at
#                    /opt/sagemaker, else the instance store at /opt/dlami/nvme,
#                    else the root volume (no layout fails the node)
#   2. containerd  - containerd data root on the data volume
#   3. kubelet     - /var/lib/kubelet bind-mounted from the data volume
#   4. lustre      - Lustre client modules, LNet over EFA, lctl tunables
#                    (best effort: a failure is logged, the node still joins)
# Safe to run again: every step checks before it changes anything.
# Downloads nothing; everything it needs is on the HyperPod AMI.
#
# Everything is logged to /var/log/provision/provisioning.log, the file
# HyperPod uploads to the cluster's CloudWatch log group, stream
# LifecycleConfig/<instance-group>/<instance-id> (see README.md).
#
# Environment (for tests): LIFECYCLE_ROOT prefixes every absolute system path
# (default: empty); LIFECYCLE_FAILURE_DELAY_SECONDS is how long to wait after
# a failure so the log reaches CloudWatch before HyperPod reacts (default 60).

# Started with sh? Re-run under bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi

LIFECYCLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh
source "$LIFECYCLE_DIR/lib/common.sh"
# shellcheck source=steps/data_volume.sh
source "$LIFECYCLE_DIR/steps/data_volume.sh"
# shellcheck source=steps/containerd.sh
source "$LIFECYCLE_DIR/steps/containerd.sh"
# shellcheck source=steps/kubelet.sh
source "$LIFECYCLE_DIR/steps/kubelet.sh"
# shellcheck source=steps/lustre.sh
source "$LIFECYCLE_DIR/steps/lustre.sh"

# EXIT trap, installed before anything can fail (lifecycle_init included):
# after a failure, start again what the steps stopped, then flush and wait so
# the log reaches CloudWatch before HyperPod reacts.
on_exit() {
  local rc=$?
  if [[ "$rc" -ne 0 ]]; then
    restore_services
    begin_step main
    log ERROR "[stop] on_create.sh failed with exit $rc"
    sync || true
    sleep "${LIFECYCLE_FAILURE_DELAY_SECONDS:-60}" || true
  fi
}

main() {
  trap on_exit EXIT
  lifecycle_init
  begin_step main
  log_info "[start] on_create.sh"
  load_config "$LIFECYCLE_DIR/lifecycle_config.json"
  log_info "config: ebs_volume_mount_point=$CFG_EBS_VOLUME_MOUNT_POINT" \
    "instance_store_mount_point=$CFG_INSTANCE_STORE_MOUNT_POINT" \
    "containerd_on_data_volume=$CFG_CONTAINERD_ON_DATA_VOLUME" \
    "kubelet_on_data_volume=$CFG_KUBELET_ON_DATA_VOLUME lustre_enabled=$CFG_LUSTRE_ENABLED" \
    "fsx_efa_enabled=$CFG_FSX_EFA_ENABLED"

  step_data_volume
  step_containerd
  step_kubelet
  run_best_effort lustre step_lustre \
    "this node has no working Lustre client, so FSx for Lustre volumes will not mount on it"

  begin_step main
  if [[ "${#FAILED_BEST_EFFORT[@]}" -gt 0 ]]; then
    log ERROR "[stop] on_create.sh completed; failed best-effort steps: ${FAILED_BEST_EFFORT[*]}"
  else
    log_info "[stop] on_create.sh completed"
  fi
}

main "$@"
