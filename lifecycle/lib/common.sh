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

# sys_path /etc/fstab -> "$LIFECYCLE_ROOT/etc/fstab"
sys_path() {
  printf '%s%s' "$LIFECYCLE_ROOT" "$1"
}

log() {
  local level=$1
  shift
  local line
  line="$(date -u '+%Y-%m-%dT%H:%M:%SZ') [$level] [$CURRENT_STEP] $*"
  printf '%s\n' "$line"
  if [[ -n "$LOG_FILE" ]]; then
    printf '%s\n' "$line" >>"$LOG_FILE"
  fi
}
log_info() { log INFO "$@"; }
# begin_step NAME: tag the following log lines with the step name.
begin_step() { CURRENT_STEP=$1; }
log_warn() { log WARN "$@"; }

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

# set_log_dir DIR: (re)open the log file DIR/provisioning.log (DIR is a
# system path, prefixed with LIFECYCLE_ROOT here).
set_log_dir() {
  local dir
  dir="$(sys_path "$1")"
  mkdir -p "$dir"
  LOG_FILE="$dir/provisioning.log"
  touch "$LOG_FILE"
}

# lifecycle_init: strict mode, error trap, sandbox sanity, default log file.
lifecycle_init() {
  set -Eeuo pipefail
  shopt -s inherit_errexit 2>/dev/null || true
  trap 'on_error "$?" "$BASH_COMMAND" "${BASH_SOURCE[0]##*/}:$LINENO"' ERR
  if [[ -n "$LIFECYCLE_ROOT" ]]; then
    [[ "$LIFECYCLE_ROOT" == /* && -d "$LIFECYCLE_ROOT" ]] ||
      die "LIFECYCLE_ROOT must be an existing absolute directory, got '$LIFECYCLE_ROOT'"
  elif [[ "$EUID" -ne 0 ]]; then
    die "must run as root (HyperPod runs lifecycle scripts as root)"
  fi
  set_log_dir /var/log/provision
}

# run CMD ARGS...: log the command, run it, copy its output to the log and
# stop the script with a line naming the command if it fails.
run() {
  log_info "run: $*"
  local out rc=0
  out="$("$@" 2>&1)" || rc=$?
  local line
  if [[ -n "$out" ]]; then
    while IFS= read -r line; do
      log_info "  | $line"
    done <<<"$out"
  fi
  if [[ "$rc" -ne 0 ]]; then
    die "'$*' failed (exit $rc)"
  fi
}

# write_file DEST MODE: replace DEST with stdin only when the content differs
# (atomic rename, so a half-written file never exists); see file_changed.
# The first time an existing file is modified a DEST.pre-lifecycle backup is kept.
FILE_CHANGED=false
write_file() {
  local dest=$1 mode=$2 tmp="$1.lifecycle-new"
  mkdir -p "$(dirname "$dest")"
  cat >"$tmp"
  if [[ -f "$dest" ]] && cmp -s "$tmp" "$dest"; then
    rm -f "$tmp"
    FILE_CHANGED=false
    return 0
  fi
  if [[ -f "$dest" && ! -e "$dest.pre-lifecycle" ]]; then
    cp -p "$dest" "$dest.pre-lifecycle"
  fi
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
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

# seed_dir SRC DEST: create DEST as a copy of SRC (or empty) exactly once.
# Copies into a staging directory and renames it, so an interrupted copy is
# redone on the next run instead of being mistaken for a finished one.
seed_dir() {
  local src=$1 dest=$2 staging="$2.lifecycle-tmp"
  if [[ -d "$dest" ]]; then
    log_info "${dest#"$LIFECYCLE_ROOT"} already exists: nothing to copy"
    return 0
  fi
  run rm -rf "$staging"
  if [[ -d "$src" ]]; then
    run cp -a "$src" "$staging"
  else
    run mkdir -p "$staging"
  fi
  run mv "$staging" "$dest"
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
  out="$(python3 "$LIFECYCLE_DIR/lib/read_config.py" "$file" 2>&1)" || rc=$?
  if [[ "$rc" -ne 0 ]]; then
    die "invalid config ${file##*/}: ${out//$'\n'/ }"
  fi
  eval "$out"
  local w
  for w in "${CFG_WARNINGS[@]+"${CFG_WARNINGS[@]}"}"; do
    log_warn "config: $w"
  done
}
