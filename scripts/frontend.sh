#!/usr/bin/env bash
# The console's front-end packages (learnerkit/scheduler/console/frontend, docs/dependencies.md): installs them
# from the committed lock with `npm ci` (only when the lock changed) and copies the files the console serves into
# its static folder (static/vendor, committed). `scripts/frontend.sh check` builds into a temporary folder and
# fails when that differs from the committed files by a byte. Nothing is compiled: the build is a copy of the
# package's own minified files, so the same lock gives the same bytes.
set -euo pipefail
cd "$(dirname "$0")/../learnerkit/scheduler/console/frontend"
VENDOR=../static/vendor
# What the console serves, as `package file:served name`.
FILES=(
  "uplot/dist/uPlot.iife.min.js:uPlot.iife.min.js"
  "uplot/dist/uPlot.min.css:uPlot.min.css"
  "uplot/LICENSE:uPlot.LICENSE"
)

install() {
  local want stamp=node_modules/.learnerkit-lock
  want=$(sha256sum package-lock.json | cut -c1-64)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "frontend: npm ci (package-lock.json changed)"
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
    echo "$want" > "$stamp"
  fi
}

build() {  # into folder $1
  mkdir -p "$1"
  for entry in "${FILES[@]}"; do
    cp "node_modules/${entry%%:*}" "$1/${entry##*:}.tmp" && mv "$1/${entry##*:}.tmp" "$1/${entry##*:}"
  done
}

install
case "${1:-build}" in
  build) build "$VENDOR" ;;
  check)
    out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
    build "$out"
    diff -r "$out" "$VENDOR" >/dev/null || { echo "frontend: $VENDOR differs from the lock's build; run scripts/frontend.sh" >&2; exit 1; }
    echo "frontend: $VENDOR is the lock's build" ;;
  *) echo "usage: scripts/frontend.sh [build|check]" >&2; exit 2 ;;
esac
