#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# HyperPod (EKS orchestrator) OnCreate lifecycle script, run as root once on
# every new node from the downloaded lifecycle prefix.
#
# Reads lifecycle_config.json next to this file, then:
#   1. nvme       - wait for the NVMe instance store (or fall back to the root volume)
#   2. containerd - containerd data root on NVMe
#   3. kubelet    - /var/lib/kubelet bind-mounted from NVMe
#   4. lustre     - Lustre client modules, LNet over EFA, lctl tunables
# Safe to run again: every step checks before it changes anything.
# Downloads nothing; everything it needs is on the HyperPod AMI.
#
# Environment (for tests): LIFECYCLE_ROOT prefixes every absolute system path
# (default: empty); LIFECYCLE_FAILURE_DELAY_SECONDS is how long to wait after
# a failure so the log reaches CloudWatch before HyperPod reacts (default 60).

# Started with sh? Re-run under bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi

LIFECYCLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh
source "$LIFECYCLE_DIR/lib/common.sh"
# shellcheck source=steps/nvme.sh
source "$LIFECYCLE_DIR/steps/nvme.sh"
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
  set_log_dir "$CFG_LOG_DIR"
  log_info "config: nvme_mount_point=$CFG_NVME_MOUNT_POINT containerd_on_nvme=$CFG_CONTAINERD_ON_NVME" \
    "kubelet_on_nvme=$CFG_KUBELET_ON_NVME lustre_enabled=$CFG_LUSTRE_ENABLED fsx_efa_enabled=$CFG_FSX_EFA_ENABLED"

  step_nvme
  step_containerd
  step_kubelet
  step_lustre

  begin_step main
  log_info "[stop] on_create.sh completed"
}

main "$@"
