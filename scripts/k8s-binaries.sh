#!/usr/bin/env bash
# `make k8s-binaries`: build kube-apiserver, kube-controller-manager, kubelet, kube-scheduler and kubectl from Debian bookworm's
# `kubernetes` source package, with Debian's Go 1.19 unpacked (not installed), for the real-cluster test
# tier (tests/k8s). Nothing comes from a container registry. The result is cached by version under
#   ${XDG_CACHE_HOME:-~/.cache}/learnerkit/k8s/<debian version>/{bin,pause.tar}
# and a second run finishes in seconds. The source tree, the toolchain and Go's build cache stay under
# .../<version>/work (delete it after a build to save about 2 GiB; the binaries stay).
#
# It also installs, with apt, what a node needs when missing: containerd, runc, containernetworking-plugins
# (bridge CNI), etcd-server, rsync (a build dependency of Kubernetes' make rules) and dpkg-dev.
#
# Usage: scripts/k8s-binaries.sh [--print-dir]   (--print-dir: print the cache folder and exit 0 when the
# binaries are cached, exit 1 when not; builds nothing)
set -euo pipefail

K8S_DEB_VERSION=${LEARNERKIT_K8S_DEB_VERSION:-1.20.5+really1.20.2-1.1+deb12u1}
K8S_GIT_VERSION=${LEARNERKIT_K8S_GIT_VERSION:-v1.20.2}
ARCHIVE=${LEARNERKIT_DEBIAN_ARCHIVE:-http://deb.debian.org/debian}
SECURITY_ARCHIVE=${LEARNERKIT_DEBIAN_SECURITY_ARCHIVE:-http://deb.debian.org/debian-security}
TARGETS=(kube-apiserver kube-controller-manager kubelet kube-scheduler kubectl)
NODE_PACKAGES=(containerd runc containernetworking-plugins etcd-server rsync dpkg-dev gcc libc6-dev)

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/learnerkit/k8s/$K8S_DEB_VERSION
BIN=$CACHE/bin
WORK=$CACHE/work

say() { printf '\033[1mk8s-binaries:\033[0m %s\n' "$*" >&2; }
cached() {
  local t
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
  [ -s "$CACHE/pause.tar" ]
}

if [ "${1:-}" = "--print-dir" ]; then
  cached && { echo "$CACHE"; exit 0; }
  exit 1
fi
if cached; then
  say "cached: $BIN"
  echo "$CACHE"
  exit 0
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "k8s-binaries: '$*' needs root and sudo is not installed" >&2; exit 1
  fi
}
missing=()
for pkg in "${NODE_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

started=$(date +%s)
mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/archives/partial" "$WORK/debs" "$BIN"
# A private apt state with deb-src lines: the host's sources and package lists stay as they are.
cat > "$WORK/apt/sources.list" <<EOF
deb $ARCHIVE bookworm main
deb-src $ARCHIVE bookworm main
deb $SECURITY_ARCHIVE bookworm-security main
deb-src $SECURITY_ARCHIVE bookworm-security main
EOF
apt_private=(-o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
             -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache::Archives=$WORK/apt/archives"
             -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Sandbox::User=root")
if [ ! -f "$WORK/apt/updated" ]; then
  say "reading Debian's package indexes (private apt state under $WORK/apt)"
  apt-get "${apt_private[@]}" update -qq
  touch "$WORK/apt/updated"
fi

SRC=$WORK/kubernetes-src
if [ ! -f "$SRC/.unpacked" ]; then
  say "fetching the kubernetes $K8S_DEB_VERSION source package"
  rm -rf "$SRC" "$WORK/srcpkg"
  mkdir -p "$WORK/srcpkg"
  (cd "$WORK/srcpkg" && apt-get "${apt_private[@]}" source --download-only -qq "kubernetes=$K8S_DEB_VERSION")
  say "unpacking (with Debian's patches)"
  dpkg-source --no-check -x "$WORK/srcpkg"/kubernetes_*.dsc "$SRC" >/dev/null
  rm -rf "$WORK/srcpkg"
  touch "$SRC/.unpacked"
fi

GO_ROOT_DIR=$WORK/go
if [ ! -x "$GO_ROOT_DIR/usr/lib/go-1.19/bin/go" ]; then
  say "fetching golang-1.19 (unpacked with dpkg -x, not installed)"
  rm -rf "$GO_ROOT_DIR"
  (cd "$WORK/debs" && apt-get "${apt_private[@]}" download -qq golang-1.19-go golang-1.19-src)
  for deb in "$WORK/debs"/golang-1.19-*.deb; do dpkg -x "$deb" "$GO_ROOT_DIR"; done
fi
export GOROOT=$GO_ROOT_DIR/usr/lib/go-1.19
export PATH=$GOROOT/bin:$PATH

# The vendored reflect2 1.0.1 faults under Go >= 1.18 (json-iterator's map decoding); 1.0.2 fixes it.
REFLECT2=$SRC/vendor/github.com/modern-go/reflect2
if [ ! -f "$REFLECT2/.learnerkit-1.0.2" ]; then
  say "replacing the vendored reflect2 1.0.1 with Debian's 1.0.2"
  (cd "$WORK/debs" && apt-get "${apt_private[@]}" download -qq golang-github-modern-go-reflect2-dev)
  rm -rf "$WORK/reflect2" && dpkg -x "$WORK/debs"/golang-github-modern-go-reflect2-dev_*.deb "$WORK/reflect2"
  find "$REFLECT2" -maxdepth 1 -type f -name '*.go' -delete
  cp "$WORK/reflect2/usr/share/gocode/src/github.com/modern-go/reflect2"/*.go "$REFLECT2/"
  rm -f "$REFLECT2"/*_test.go
  touch "$REFLECT2/.learnerkit-1.0.2"
fi

say "building ${TARGETS[*]} with $(go version | cut -d' ' -f3) (log: $WORK/build.log)"
what=$(printf 'cmd/%s ' "${TARGETS[@]}")
(
  cd "$SRC"
  export GOFLAGS=-mod=vendor CGO_ENABLED=0 GOCACHE=$WORK/gocache GOPATH=$WORK/gopath
  export KUBE_GIT_VERSION=$K8S_GIT_VERSION KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian-$K8S_DEB_VERSION
  export KUBE_VERBOSE=1 GOTOOLCHAIN=local
  make WHAT="${what% }" >"$WORK/build.log" 2>&1
) || { tail -n 30 "$WORK/build.log" >&2; say "build failed; full log: $WORK/build.log"; exit 1; }
for t in "${TARGETS[@]}"; do
  install -m 0755 "$SRC/_output/local/bin/linux/amd64/$t" "$BIN/$t.tmp"
  mv "$BIN/$t.tmp" "$BIN/$t"
done

# The pod sandbox ("pause") image from the same tree, as an OCI archive containerd imports.
say "building the pause image from build/pause/linux/pause.c"
rm -rf "$WORK/pause" && mkdir -p "$WORK/pause"
gcc -Os -static -DVERSION="$K8S_GIT_VERSION" -o "$WORK/pause/pause" "$SRC/build/pause/linux/pause.c"
strip "$WORK/pause/pause"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$WORK/pause/Dockerfile"
docker build -q -t learnerkit/k8s-pause:"$K8S_GIT_VERSION" "$WORK/pause" >/dev/null
docker save -o "$CACHE/pause.tar.tmp" learnerkit/k8s-pause:"$K8S_GIT_VERSION"
mv "$CACHE/pause.tar.tmp" "$CACHE/pause.tar"
echo "learnerkit/k8s-pause:$K8S_GIT_VERSION" > "$CACHE/pause.ref"

say "built in $(( $(date +%s) - started )) s: $BIN"
echo "$CACHE"
