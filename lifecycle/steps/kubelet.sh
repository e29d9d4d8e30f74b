# shellcheck shell=bash
# Step: put kubelet's data directory on the data volume.
#
# /var/lib/kubelet is bind-mounted from <data volume>/kubelet instead of
# changing kubelet's --root-dir or replacing it with a symlink: CSI node
# plugins, device plugins and the bootstrap all use the literal
# /var/lib/kubelet path, and kubelet resolves symlinks, which breaks volume
# mounts made through them (the AWS sample script uses a symlink). The bind
# mount is recorded in /etc/fstab so it returns after a reboot, and kubelet
# gets a drop-in so it never starts before the mount is there. Neither
# bootstrap.sh (Amazon Linux 2) nor nodeadm (Amazon Linux 2023) touches
# /etc/fstab or /var/lib/kubelet, so the same steps serve both images.

step_kubelet() {
  begin_step kubelet
  if [[ "$CFG_KUBELET_ON_DATA_VOLUME" != true ]]; then
    log_info "kubelet_on_data_volume is false: /var/lib/kubelet stays on the root volume"
    return 0
  fi
  if ! data_volume_chosen; then
    log_warn "no data volume: /var/lib/kubelet stays on the root volume"
    return 0
  fi

  local data_dir="$DATA_VOLUME/kubelet" target
  target="$(sys_path /var/lib/kubelet)"
  [[ ! -L "$target" ]] || die "/var/lib/kubelet is a symlink; refusing to bind-mount over it"

  local mounted=false was_active=false
  if mountpoint -q "$target"; then
    mounted=true
    log_info "/var/lib/kubelet is already a mount point"
  elif unit_is_active kubelet; then
    was_active=true
    stop_service kubelet
  fi

  local fstab content reload=false
  fstab="$(sys_path /etc/fstab)"
  # Keep exactly one fstab entry for /var/lib/kubelet: ours.
  content="$(if [[ -f "$fstab" ]]; then awk '$2 != "/var/lib/kubelet"' "$fstab"; fi
    printf '%s /var/lib/kubelet none bind,nofail,x-systemd.requires-mounts-for=%s 0 0\n' \
      "$data_dir" "$DATA_VOLUME")"
  write_file "$fstab" 0644 <<<"$content"
  if file_changed; then reload=true; fi
  write_file "$(sys_path /etc/systemd/system/kubelet.service.d/50-lifecycle-storage.conf)" 0644 <<UNIT
# Managed by the HyperPod lifecycle scripts: kubelet data lives on $DATA_VOLUME.
[Unit]
RequiresMountsFor=/var/lib/kubelet
UNIT
  if file_changed; then reload=true; fi
  if [[ "$reload" == true ]]; then
    run systemctl daemon-reload
  fi

  if [[ "$mounted" != true ]]; then
    # The AMI may ship files in /var/lib/kubelet (e.g. a kubeconfig template):
    # copy them once; the originals stay hidden under the bind mount.
    seed_dir "$target" "$(sys_path "$data_dir")" kubelet
    run mkdir -p "$target"
    run mount --bind "$(sys_path "$data_dir")" "$target"
  fi
  if [[ "$was_active" == true ]]; then
    start_service kubelet
  fi
  log_info "/var/lib/kubelet is bind-mounted from $data_dir"
}
