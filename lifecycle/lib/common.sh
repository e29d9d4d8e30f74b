# shellcheck shell=bash
# Shared helpers for the HyperPod lifecycle scripts: logging, error trap,
# sandbox-aware paths, idempotent file writers and config loading.
# Sourced by on_create.sh; not meant to be executed on its own.
# Written for bash 4.2+ (Amazon Linux 2 ships 4.2), so no `local -n`,
# no negative array indexes, and empty arrays are never expanded under set -u.

# Every absolute system path goes through sys_path so that tests can run the
# scripts against a sandbox directory. Empty on a real node.
LIFECYCLE_ROOT="${LIFECYCLE_ROOT:-}"
LOG_FILE=""
CURRENT_STEP="init"
# HyperPod uploads this file, and only this file, to the cluster's CloudWatch
# log group, stream LifecycleConfig/<instance-group>/<instance-id> (README.md).
PROVISIONING_LOG=/var/log/provision/provisioning.log

# sys_path /etc/fstab -> "$LIFECYCLE_ROOT/etc/fstab"
sys_path() {
  printf '%s%s' "$LIFECYCLE_ROOT" "$1"
}

log() {
  local level=$1
  shift
  local line
  # bash's printf formats the time itself: no process per log line.
  printf -v line '%(%Y-%m-%dT%H:%M:%S%z)T [%s] [%s] %s' -1 "$level" "$CURRENT_STEP" "$*"
  printf '%s\n' "$line"
  if [[ -n "$LOG_FILE" ]]; then
    printf '%s\n' "$line" >>"$LOG_FILE"
  fi
}
log_info() { log INFO "$@"; }
log_warn() { log WARN "$@"; }

# begin_step NAME: tag the following log lines with the step name.
begin_step() { CURRENT_STEP=$1; }

# die MESSAGE: log one ERROR line and exit non-zero.
die() {
  log ERROR "$*"
  exit 1
}

# ERR trap target: names the failing command, its exit code and location.
on_error() {
  local rc=$1 cmd=$2 where=$3
  trap - ERR
  log ERROR "command failed (exit $rc) at $where: $cmd"
  exit "$rc"
}

# arm_error_trap: (re)install the ERR trap that stops the script.
arm_error_trap() {
  trap 'on_error "$?" "$BASH_COMMAND" "${BASH_SOURCE[0]##*/}:$LINENO"' ERR
}

# open_log: append to the provisioning log and send stderr there too, so
# that whatever a command or bash itself prints on failure (an unbound
# variable, a traceback) reaches CloudWatch, not only the script's stderr.
open_log() {
  local file
  file="$(sys_path "$PROVISIONING_LOG")"
  [[ -d "${file%/*}" ]] || mkdir -p "${file%/*}"
  : >>"$file"
  LOG_FILE=$file
  exec 2> >(tee -a "$LOG_FILE" >&2)
}

# lifecycle_init: strict mode, error trap, sandbox sanity, log file.
lifecycle_init() {
  set -Eeuo pipefail
  shopt -s inherit_errexit 2>/dev/null || true
  arm_error_trap
  if [[ -n "$LIFECYCLE_ROOT" ]]; then
    [[ "$LIFECYCLE_ROOT" == /* && -d "$LIFECYCLE_ROOT" ]] ||
      die "LIFECYCLE_ROOT must be an existing absolute directory, got '$LIFECYCLE_ROOT'"
  elif [[ "$EUID" -ne 0 ]]; then
    die "must run as root (HyperPod runs lifecycle scripts as root)"
  fi
  open_log
}

# Steps that failed under run_best_effort; on_create.sh reports them last.
FAILED_BEST_EFFORT=()

# run_best_effort NAME FUNCTION CONSEQUENCE: run FUNCTION in a subshell with
# the same strict mode and ERR trap. If it fails, log an ERROR line naming
# the step and what the node lacks without it (CONSEQUENCE), and carry on.
# For steps whose failure would repeat on every replacement node (same AMI,
# same configuration) while the node is still useful without them: failing
# on_create would only make HyperPod replace nodes in a loop.
run_best_effort() {
  local name=$1 step=$2 consequence=$3 rc=0
  trap - ERR
  set +e
  (
    set -e
    arm_error_trap
    "$step"
  )
  rc=$?
  set -e
  arm_error_trap
  if [[ "$rc" -ne 0 ]]; then
    FAILED_BEST_EFFORT+=("$name")
    begin_step "$name"
    log ERROR "step failed (exit $rc), continuing without it: $consequence"
  fi
}

# capture CMD ARGS...: log the command, run it, copy its output to the log and
# keep it in CAPTURED for callers that parse it; returns the command's status.
CAPTURED=""
capture() {
  log_info "run: $*"
  local rc=0 line
  CAPTURED="$("$@" 2>&1)" || rc=$?
  if [[ -n "$CAPTURED" ]]; then
    while IFS= read -r line; do
      log_info "  | $line"
    done <<<"$CAPTURED"
  fi
  return "$rc"
}

# run CMD ARGS...: capture, and stop the script with a line naming the command
# if it fails.
run() {
  local rc=0
  capture "$@" || rc=$?
  if [[ "$rc" -ne 0 ]]; then
    die "'$*' failed (exit $rc)"
  fi
}

# try_run CMD ARGS...: like run, but a failure only logs a WARN line and
# returns the command's exit status, for a caller that handles it.
try_run() {
  local rc=0
  capture "$@" || rc=$?
  if [[ "$rc" -ne 0 ]]; then
    log_warn "'$*' failed (exit $rc)"
  fi
  return "$rc"
}

# write_file DEST MODE: replace DEST with stdin only when the content differs
# (atomic rename, so a half-written file never exists); see file_changed.
# The first time an existing file is modified a DEST.pre-lifecycle backup is kept.
FILE_CHANGED=false
write_file() {
  local dest=$1 mode=$2 content="" current=""
  IFS= read -r -d '' content || true
  if [[ -f "$dest" ]]; then
    IFS= read -r -d '' current <"$dest" || true
    if [[ "$content" == "$current" ]]; then
      FILE_CHANGED=false
      return 0
    fi
    [[ -e "$dest.pre-lifecycle" ]] || cp -p "$dest" "$dest.pre-lifecycle"
  fi
  [[ -d "${dest%/*}" ]] || mkdir -p "${dest%/*}"
  printf '%s' "$content" >"$dest.lifecycle-new"
  chmod "$mode" "$dest.lifecycle-new"
  mv -f "$dest.lifecycle-new" "$dest"
  FILE_CHANGED=true
  log_info "wrote ${dest#"$LIFECYCLE_ROOT"}"
}

# file_changed: did the last write_file change its file?
file_changed() {
  [[ "$FILE_CHANGED" == true ]]
}

# remove_file DEST: delete a file this script owns if it exists.
remove_file() {
  if [[ -e "$1" ]]; then
    rm -f "$1"
    log_info "removed ${1#"$LIFECYCLE_ROOT"}"
  fi
}

# Markers on the root volume naming what this root volume's runs seeded on
# the data volume (see seed_dir).
SEED_MARKER_DIR=/var/lib/hyperpod-lifecycle

# seed_dir SRC DEST NAME: create DEST as a copy of SRC (or empty) exactly once
# per root volume, and record that in SEED_MARKER_DIR/NAME.seeded.
# Copies into a staging directory and renames it, so an interrupted copy is
# redone on the next run instead of being mistaken for a finished one.
# --one-file-system: never copy what other file systems have mounted below SRC.
# A DEST without the marker was left by an earlier root volume: the data
# volume can be a secondary EBS volume, which HyperPod keeps when an AMI
# update replaces the root volume. Its containers and pod data belong to the
# previous OS image, so it is removed and seeded again (the AWS sample
# scripts remove it for the same reason).
seed_dir() {
  local src=$1 dest=$2 marker staging="$2.lifecycle-tmp"
  marker="$(sys_path "$SEED_MARKER_DIR")/$3.seeded"
  if [[ -d "$dest" && -f "$marker" ]]; then
    log_info "${dest#"$LIFECYCLE_ROOT"} already exists: nothing to copy"
    return 0
  fi
  if [[ -e "$dest" ]]; then
    log_warn "${dest#"$LIFECYCLE_ROOT"} was left by an earlier root volume: removing it"
    run rm -rf "$dest"
  fi
  run rm -rf "$staging"
  [[ -d "${dest%/*}" ]] || mkdir -p "${dest%/*}"
  if [[ -d "$src" ]]; then
    run cp -a --one-file-system "$src" "$staging"
  else
    run mkdir -p "$staging"
  fi
  run mv "$staging" "$dest"
  [[ -d "${marker%/*}" ]] || mkdir -p "${marker%/*}"
  printf '%s\n' "${dest#"$LIFECYCLE_ROOT"}" >"$marker"
}

# Units this run stopped and has not started again. If the script fails in
# between, restore_services (called from the EXIT trap) starts them again, so
# a failed run never leaves containerd or kubelet down.
STOPPED_SERVICES=()

# stop_service UNIT: stop a running unit and remember it until start_service.
# It is remembered before the stop: starting a unit that is still running is
# harmless, leaving one half-stopped is not.
stop_service() {
  STOPPED_SERVICES+=("$1")
  run systemctl stop "$1"
}

# start_service UNIT: start a unit stopped by stop_service and forget it.
start_service() {
  run systemctl start "$1"
  local unit
  local -a left=()
  for unit in "${STOPPED_SERVICES[@]+"${STOPPED_SERVICES[@]}"}"; do
    [[ "$unit" == "$1" ]] || left+=("$unit")
  done
  STOPPED_SERVICES=("${left[@]+"${left[@]}"}")
}

# restore_services: after a failure, start every unit this run stopped. Never
# exits: a unit that does not start is logged and the next one is tried.
restore_services() {
  local unit out rc line
  for unit in "${STOPPED_SERVICES[@]+"${STOPPED_SERVICES[@]}"}"; do
    log_warn "failure while $unit was stopped: starting $unit again"
    rc=0
    out="$(systemctl start "$unit" 2>&1)" || rc=$?
    if [[ -n "$out" ]]; then
      while IFS= read -r line; do
        log_info "  | $line"
      done <<<"$out"
    fi
    if [[ "$rc" -eq 0 ]]; then
      log_info "started $unit again"
    else
      log ERROR "could not start $unit again (exit $rc)"
    fi
  done
  STOPPED_SERVICES=()
}

# unit_is_active UNIT: true when the systemd unit is running.
unit_is_active() {
  systemctl is-active --quiet "$1"
}

# load_config FILE: validate the JSON config and define the CFG_* variables.
# Parsing and validation live in read_config.py (stdlib json only), which prints
# shell-quoted assignments on success or a single error line on failure.
load_config() {
  local file=$1 out rc=0
  [[ -f "$file" ]] || die "config file not found: $file"
  out="$(python3 -I -S "$LIFECYCLE_DIR/lib/read_config.py" "$file" 2>&1)" || rc=$?
  if [[ "$rc" -ne 0 ]]; then
    die "invalid config ${file##*/}: ${out//$'\n'/ }"
  fi
  eval "$out"
  local w
  for w in "${CFG_WARNINGS[@]+"${CFG_WARNINGS[@]}"}"; do
    log_warn "config: $w"
  done
}
