# shellcheck shell=bash
# Step: put containerd's data root on the data volume.
#
# The data root becomes <data volume>/containerd/data-root. How the
# setting reaches containerd depends on the OS image (/etc/os-release), as in
# the AWS sample lifecycle script for HyperPod EKS:
#
#   Amazon Linux 2     The node bootstrap copies the template
#                      /etc/eks/containerd/containerd-config.toml over
#                      /etc/containerd/config.toml, so `root` is set in the
#                      template and, when it exists, in the live file.
#   Amazon Linux 2023  nodeadm writes /etc/containerd/config.toml again on
#                      every boot, so an edit there does not last. The
#                      scripts write their own copy of nodeadm's file with
#                      the new root (CONTAINERD_OWN_CONFIG) and a systemd
#                      drop-in that starts containerd with it. nodeadm's file
#                      is only read, never changed.
#
# Existing data under /var/lib/containerd (e.g. a pre-loaded pause image) is
# copied across once, with containerd stopped, and containerd is restarted
# only if it was running and something changed. The drop-in also keeps
# containerd from starting before the data volume is mounted.

CONTAINERD_AL2_TEMPLATE=/etc/eks/containerd/containerd-config.toml
CONTAINERD_LIVE_CONFIG=/etc/containerd/config.toml
CONTAINERD_OWN_CONFIG=/etc/containerd/hyperpod-lifecycle-config.toml
CONTAINERD_BINARY=/usr/bin/containerd
CONTAINERD_DROPIN=/etc/systemd/system/containerd.service.d/50-lifecycle-storage.conf

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

# detect_os_image: set OS_IMAGE to "al2" or "al2023" from /etc/os-release,
# or stop the script.
OS_IMAGE=""
detect_os_image() {
  local file id="" version="" key value
  file="$(sys_path /etc/os-release)"
  [[ -f "$file" ]] || die "cannot tell the OS image: /etc/os-release not found"
  # Parsed, not sourced: nothing from the file is executed.
  while IFS='=' read -r key value; do
    value=${value#[\"\']}
    value=${value%[\"\']}
    case "$key" in
      ID) id=$value ;;
      VERSION_ID) version=$value ;;
    esac
  done <"$file"
  case "$id:$version" in
    amzn:2) OS_IMAGE=al2 ;;
    amzn:2023) OS_IMAGE=al2023 ;;
    *) die "unsupported OS image ID=$id VERSION_ID=$version: the containerd step knows" \
      "Amazon Linux 2 and Amazon Linux 2023 only" ;;
  esac
}

step_containerd() {
  begin_step containerd
  if [[ "$CFG_CONTAINERD_ON_DATA_VOLUME" != true ]]; then
    log_info "containerd_on_data_volume is false: containerd keeps its default root"
    return 0
  fi
  if ! data_volume_chosen; then
    log_warn "no data volume: containerd keeps its default root"
    return 0
  fi

  local data_root="$DATA_VOLUME/containerd/data-root" image file
  detect_os_image
  image=$OS_IMAGE
  # (source, destination) pairs: the destination gets the source with the
  # new root.
  local -a sources=() destinations=()
  if [[ "$image" == al2 ]]; then
    [[ -f "$(sys_path "$CONTAINERD_AL2_TEMPLATE")" ]] ||
      die "Amazon Linux 2 without $CONTAINERD_AL2_TEMPLATE: cannot set containerd's root"
    for file in "$CONTAINERD_AL2_TEMPLATE" "$CONTAINERD_LIVE_CONFIG"; do
      if [[ -f "$(sys_path "$file")" ]]; then
        sources+=("$file")
        destinations+=("$file")
      fi
    done
  else
    [[ -f "$(sys_path "$CONTAINERD_LIVE_CONFIG")" ]] ||
      die "Amazon Linux 2023 without $CONTAINERD_LIVE_CONFIG: nodeadm has not configured containerd"
    sources=("$CONTAINERD_LIVE_CONFIG")
    destinations=("$CONTAINERD_OWN_CONFIG")
  fi
  log_info "OS image $image: containerd reads ${destinations[*]}"

  # Stop containerd only when something is about to change.
  local changed=false was_active=false i content dest
  local -a contents=()
  for i in "${!sources[@]}"; do
    contents+=("$(toml_set_root "$(sys_path "${sources[$i]}")" "$data_root")")
    dest="$(sys_path "${destinations[$i]}")"
    if [[ ! -f "$dest" || "${contents[$i]}" != "$(<"$dest")" ]]; then
      changed=true
    fi
  done
  [[ -d "$(sys_path "$data_root")" ]] || changed=true
  if [[ "$changed" == true ]] && unit_is_active containerd; then
    was_active=true
    stop_service containerd
  fi

  seed_dir "$(sys_path /var/lib/containerd)" "$(sys_path "$data_root")" containerd
  for i in "${!sources[@]}"; do
    content=${contents[$i]}
    write_file "$(sys_path "${destinations[$i]}")" 0644 <<<"$content"
  done
  write_containerd_dropin "$image"
  if [[ "$was_active" == true ]]; then
    start_service containerd
  fi
  log_info "containerd root is $data_root"
}

# write_containerd_dropin IMAGE: order containerd after the data volume's
# mount and, on Amazon Linux 2023, start it with the scripts' own config.
write_containerd_dropin() {
  local exec_start=""
  if [[ "$1" == al2023 ]]; then
    exec_start="
[Service]
ExecStart=
ExecStart=$CONTAINERD_BINARY --config $CONTAINERD_OWN_CONFIG"
  fi
  write_file "$(sys_path "$CONTAINERD_DROPIN")" 0644 <<UNIT
# Managed by the HyperPod lifecycle scripts: containerd data lives on $DATA_VOLUME.
[Unit]
RequiresMountsFor=$DATA_VOLUME$exec_start
UNIT
  if file_changed; then
    run systemctl daemon-reload
  fi
}
