#!/usr/bin/env bash
# Install the real coding-agent CLIs the `clients` test tier drives (tests/clients), pinned.
# Cached outside the clone under $CTXBUDGET_CLIENTS_CACHE/<version-key>/ (about 1.3 GB of
# node_modules): rerunning with the same pins reuses it. Prints the cache folder; its
# node_modules/.bin holds `pi`, `codex`, `claude` and `opencode`.
set -euo pipefail
# Pinned to the versions current on npm when the tier was written (2026-12-04).
PI_PIN="${CTXBUDGET_PI_PIN:-0.73.1}"
CODEX_PIN="${CTXBUDGET_CODEX_PIN:-0.171.0}"
CLAUDE_PIN="${CTXBUDGET_CLAUDE_PIN:-2.1.332}"
OPENCODE_PIN="${CTXBUDGET_OPENCODE_PIN:-1.18.33}"
KEY="pi-$PI_PIN.codex-$CODEX_PIN.claude-$CLAUDE_PIN.opencode-$OPENCODE_PIN"
CACHE="${CTXBUDGET_CLIENTS_CACHE:-$HOME/.cache/ctxbudget/clients}/$KEY"

# --path: print the folder only (the tests find the clients there; they never install).
if [ "${1:-}" = "--path" ]; then
  echo "$CACHE"
  exit 0
fi
if [ -f "$CACHE/.complete" ]; then
  echo "$CACHE"
  exit 0
fi
command -v npm >/dev/null || { echo "install_clients: 'npm' (Node 20+) is required" >&2; exit 2; }
mkdir -p "$CACHE"
cd "$CACHE"
[ -f package.json ] || echo '{"name": "ctxbudget-test-clients", "private": true}' > package.json
# --ignore-scripts is not used: codex and opencode fetch their platform binary as an optional
# dependency, which npm resolves itself; postinstall scripts only link it.
npm install --no-audit --no-fund --loglevel=error --save-exact \
  "@mariozechner/pi-coding-agent@$PI_PIN" \
  "@openai/codex@$CODEX_PIN" \
  "@anthropic-ai/claude-code@$CLAUDE_PIN" \
  "opencode-ai@$OPENCODE_PIN" >&2
for bin in pi codex claude opencode; do
  [ -x "node_modules/.bin/$bin" ] || { echo "install_clients: $bin missing after npm install" >&2; exit 1; }
done
touch .complete
echo "$CACHE"
