# shellcheck shell=bash
# Step: prepare the Lustre client for FSx for Lustre.
#
# The FSx CSI driver mounts the file system inside Kubernetes, so this step
# only makes sure the client modules load (now and at every boot), configures
# LNet over EFA when the file system is EFA-enabled, applies lctl tunables
# and, if asked, checks that the file servers answer an LNet ping.
#
# on_create.sh runs this step best effort (run_best_effort): a failure is
# logged as an ERROR line and the node still joins, without a Lustre client.
# The AWS sample lifecycle script treats a failed `modprobe lustre` or EFA
# client setup the same way (a WARN line, then it continues). The usual
# causes (client modules that do not match the AMI's kernel, an EFA
# configuration the instance type lacks) repeat on every replacement node,
# so failing on_create would only make HyperPod replace nodes in a loop.

MODPROBE_CONF=/etc/modprobe.d/lustre-lifecycle.conf
MODULES_LOAD_CONF=/etc/modules-load.d/lustre-lifecycle.conf
EFA_PEER_CREDITS=32

# EFA devices to use for LNet: at most lnet_efa_max_interfaces, spread evenly
# over all devices (e.g. every 4th of 32 on p5, one per PCIe switch).
select_efa_devices() {
  local dir
  local -a all=()
  for dir in "$(sys_path /sys/class/infiniband)"/*; do
    if [[ -e "$dir" ]]; then
      all+=("${dir##*/}")
    fi
  done
  local count=${#all[@]} max=$CFG_LNET_EFA_MAX_INTERFACES i
  ((count > 0)) || return 0
  local stride=$(((count + max - 1) / max))
  for ((i = 0; i < count; i += stride)); do
    printf '%s\n' "${all[$i]}"
  done
}

# configure_lnet_efa TCP_IF DEVICES...: add a tcp NI and one efa NI per
# device, unless LNet already has an efa network (second run, or a reboot
# into an already configured node).
configure_lnet_efa() {
  local tcp_if=$1 dev nets
  shift
  run modprobe lnet
  run modprobe kefalnd
  run modprobe ksocklnd
  run lnetctl lnet configure
  run lnetctl net show
  nets=$CAPTURED
  if ! grep -q 'net type: tcp' <<<"$nets"; then
    run lnetctl net add --net tcp --if "$tcp_if"
  fi
  if grep -q 'net type: efa' <<<"$nets"; then
    log_info "LNet already has an efa network: leaving it as is"
  else
    for dev in "$@"; do
      run lnetctl net add --net efa --if "$dev" --peer-credits "$EFA_PEER_CREDITS"
    done
    # Prefer EFA over TCP for peers that have both.
    run lnetctl udsp add --src efa --priority 0
  fi
  run lnetctl set discovery 1
}

step_lustre() {
  begin_step lustre
  if [[ "$CFG_LUSTRE_ENABLED" != true ]]; then
    log_info "lustre_enabled is false: skipping the Lustre client"
    return 0
  fi

  local tcp_if="" entry
  local -a efa_devices=()
  if [[ "$CFG_FSX_EFA_ENABLED" == true ]]; then
    mapfile -t efa_devices < <(select_efa_devices)
    [[ "${#efa_devices[@]}" -gt 0 ]] ||
      die "fsx_efa_enabled is true but no EFA device exists under /sys/class/infiniband"
    tcp_if="$CFG_LNET_TCP_INTERFACE"
    if [[ -z "$tcp_if" ]]; then
      # Default: the interface carrying the default route (the primary ENI).
      run ip -o -4 route show default
      tcp_if="$(awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }' <<<"$CAPTURED")"
    fi
    [[ -n "$tcp_if" ]] ||
      die "fsx_efa_enabled is true but no default-route interface found; set lnet_tcp_interface"
    log_info "LNet over EFA: tcp on $tcp_if, efa on ${efa_devices[*]}"
  fi

  # Module options must be in place before the modules load; the files also
  # make the settings and the module load survive a reboot.
  local options=""
  for entry in "${CFG_LUSTRE_MODULE_OPTIONS[@]+"${CFG_LUSTRE_MODULE_OPTIONS[@]}"}"; do
    options+="options $entry"$'\n'
  done
  if [[ -n "$tcp_if" ]]; then
    options+="options kefalnd ipif_name=$tcp_if"$'\n'
  fi
  if [[ -n "$options" ]]; then
    write_file "$(sys_path "$MODPROBE_CONF")" 0644 <<<"# Managed by the HyperPod lifecycle scripts.
${options%$'\n'}"
  else
    remove_file "$(sys_path "$MODPROBE_CONF")"
  fi
  write_file "$(sys_path "$MODULES_LOAD_CONF")" 0644 <<<"lustre"

  if [[ "$CFG_FSX_EFA_ENABLED" == true ]]; then
    configure_lnet_efa "$tcp_if" "${efa_devices[@]}"
  fi
  run modprobe lustre

  for entry in "${CFG_LUSTRE_TUNING[@]+"${CFG_LUSTRE_TUNING[@]}"}"; do
    run lctl set_param "$entry"
  done
  for entry in "${CFG_LUSTRE_PING_NIDS[@]+"${CFG_LUSTRE_PING_NIDS[@]}"}"; do
    run lctl ping "$entry"
  done
  log_info "Lustre client ready"
}
