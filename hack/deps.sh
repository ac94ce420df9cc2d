#!/usr/bin/env bash
# Installs the Debian packages the tests need, so that `make test` on a fresh
# Debian machine runs every test (run by `make test` through `make deps`).
# Only as root with apt-get; otherwise it says what is missing and the tests
# that need it skip, each printing why. Installing is skipped when every
# package is there already (a dpkg query, no network).
#
#   gcc                          go test -race (cgo)
#   systemd                      systemd-analyze verify of the units, a standalone journald
#   dbus                         the kubelet control tests' private dbus-daemon
#   containerd runc              the end-to-end kubelet's container runtime
#
# No CNI plugins: every pod the end-to-end tests run is hostNetwork (as
# hotplugd's DaemonSet is), so containerd never calls one; its configuration
# alone makes the Node Ready (test/e2e/containerd_test.go).
set -euo pipefail
pkgs=(gcc systemd dbus containerd runc)
missing=()
for p in "${pkgs[@]}"; do
	status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
	[ "$status" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
	echo "hack/deps.sh: not root or no apt-get: not installing ${missing[*]}; the tests that need them skip, saying why" >&2
	exit 0
fi
echo "hack/deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
