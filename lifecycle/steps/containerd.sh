# shellcheck shell=bash
# Step: put containerd's data root on the NVMe instance store.
#
# Sets the top-level `root` key of the containerd config to
# <nvme_mount_point>/containerd. On Amazon Linux 2 EKS AMIs the node bootstrap
# copies /etc/eks/containerd/containerd-config.toml over
# /etc/containerd/config.toml, so both files are updated when present.
# Existing data under /var/lib/containerd (e.g. a pre-loaded pause image) is
# copied across once, with containerd stopped, and containerd is restarted
# only if it was running and something changed.

# Candidate config files (system paths); every one that exists is updated.
CONTAINERD_CONFIGS=(/etc/eks/containerd/containerd-config.toml /etc/containerd/config.toml)

# toml_set_root FILE ROOT: print FILE with its top-level `root = ...` set to
# ROOT (added before the first [table] when missing; duplicates dropped).
toml_set_root() {
  awk -v root="$2" '
    function emit() { if (!done) { printf "root = \"%s\"\n", root; done = 1 } }
    /^[[:space:]]*\[/ { emit(); in_table = 1 }
    !in_table && /^[[:space:]]*root[[:space:]]*=/ { emit(); next }
    { print }
    END { emit() }
  ' "$1"
}

step_containerd() {
  begin_step containerd
  if [[ "$CFG_CONTAINERD_ON_NVME" != true ]]; then
    log_info "containerd_on_nvme is false: containerd keeps its default root"
    return 0
  fi
  if ! nvme_available; then
    log_warn "no NVMe instance store: containerd keeps its default root"
    return 0
  fi

  local data_root="$CFG_NVME_MOUNT_POINT/containerd" config file
  local -a configs=()
  for config in "${CONTAINERD_CONFIGS[@]}"; do
    file="$(sys_path "$config")"
    if [[ -f "$file" ]]; then
      configs+=("$file")
    fi
  done
  if [[ "${#configs[@]}" -eq 0 ]]; then
    die "containerd_on_nvme is true but no containerd config exists (looked for ${CONTAINERD_CONFIGS[*]})"
  fi

  # Stop containerd only when something is about to change.
  local changed=false was_active=false content
  for file in "${configs[@]}"; do
    content="$(toml_set_root "$file" "$data_root")"
    if [[ "$content" != "$(<"$file")" ]]; then
      changed=true
    fi
  done
  [[ -d "$(sys_path "$data_root")" ]] || changed=true
  if [[ "$changed" == true ]] && unit_is_active containerd; then
    was_active=true
    stop_service containerd
  fi

  seed_dir "$(sys_path /var/lib/containerd)" "$(sys_path "$data_root")"
  for file in "${configs[@]}"; do
    content="$(toml_set_root "$file" "$data_root")"
    write_file "$file" 0644 <<<"$content"
  done
  write_containerd_dropin
  if [[ "$was_active" == true ]]; then
    start_service containerd
  fi
  log_info "containerd root is $data_root"
}

# At boot, start containerd only once the instance store is mounted.
write_containerd_dropin() {
  write_file "$(sys_path /etc/systemd/system/containerd.service.d/50-nvme-root.conf)" 0644 <<UNIT
# Managed by the HyperPod lifecycle scripts: containerd data lives on NVMe.
[Unit]
RequiresMountsFor=$CFG_NVME_MOUNT_POINT
UNIT
  if file_changed; then
    run systemctl daemon-reload
  fi
}
