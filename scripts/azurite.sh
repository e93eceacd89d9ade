#!/usr/bin/env bash
# Installs (once) the Azurite blob emulator from npm, pinned, into the git-ignored
# .azurite/, and prints the path of `azurite-blob`. The Azure tests (tests/cli/store.rs)
# start it on 127.0.0.1 themselves; their plain client is scripts/az_client.py (in
# .venv-s3, see scripts/s3_venv.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.azurite"
version=3.35.0
bin="$dir/node_modules/.bin/azurite-blob"
if ! [ -x "$bin" ] || [ "$(node -e "console.log(require('$dir/node_modules/azurite/package.json').version)" 2>/dev/null)" != "$version" ]; then
  mkdir -p "$dir"
  (cd "$dir" && npm install --silent --no-audit --no-fund "azurite@$version" >&2)
fi
echo "$bin"
