# shellcheck shell=bash
# Sourced by hack/vm-assets.sh and hack/node-image.sh: fetching Debian
# packages without installing anything. A private apt state (its own sources
# list naming this machine's Debian mirror, its own lists, cache, lock and a
# copy of dpkg's status) runs `apt-get update`, `-s install` (what would be
# installed) and `download`; the system's apt configuration and dpkg
# database are left alone. Both scripts' cache keys hash this file too.

# debian_mirror prints the URI this machine's apt sources use for the suite
# bookworm, one-line (sources.list) or deb822 (*.sources) format;
# HOTPLUGD_VM_MIRROR overrides it. Nothing printed: none found.
debian_mirror() {
	if [ -n "${HOTPLUGD_VM_MIRROR:-}" ]; then
		echo "$HOTPLUGD_VM_MIRROR"
		return
	fi
	local f
	{
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			awk '$1=="deb" { line=$0; sub(/\[[^]]*\]/, "", line); split(line, f, /[ \t]+/)
				if (f[3]=="bookworm") { print f[2]; exit } }' "$f"
		done
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			awk 'BEGIN { RS=""; FS="\n" } {
				uri=""; suites=""; enabled=1
				for (i=1; i<=NF; i++) {
					if ($i ~ /^URIs:/) { uri=$i; sub(/^URIs:[ \t]*/, "", uri); sub(/[ \t].*/, "", uri) }
					if ($i ~ /^Suites:/) suites=" " substr($i, 8) " "
					if ($i ~ /^Enabled:[ \t]*no/) enabled=0
				}
				if (enabled && suites ~ /[ \t]bookworm[ \t]/) { print uri; exit }
			}' "$f"
		done
	} | head -n1
}

# private_apt DIR URI SUITE... makes a private apt state in DIR for the
# main component of each suite at URI and runs `apt-get update`. It sets
# apt_opts (the options every apt-get and apt-cache call of that state
# takes) and apt_signed (" [signed-by=...]" when Debian's archive keyring is
# there, for a sources line of the same archive).
private_apt() {
	local dir="$1" uri="$2" suite
	shift 2
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/sources.list.d" "$dir/preferences.d" "$dir/dpkg"
	apt_signed=""
	[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] && apt_signed=" [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
	: >"$dir/sources.list"
	for suite in "$@"; do
		echo "deb$apt_signed $uri $suite main" >>"$dir/sources.list"
	done
	# A copy of dpkg's status: the resolver sees what is installed, and
	# the lock apt takes next to it is ours.
	cp /var/lib/dpkg/status "$dir/dpkg/status"
	apt_opts=(
		-o "Dir::State=$dir" -o "Dir::State::lists=$dir/lists" -o "Dir::State::status=$dir/dpkg/status"
		-o "Dir::Cache=$dir/cache" -o "Dir::Cache::archives=$dir/cache/archives"
		-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=$dir/sources.list.d"
		-o "Dir::Etc::preferences=$dir/preferences" -o "Dir::Etc::preferencesparts=$dir/preferences.d"
		-o "APT::Sandbox::User=root" -o "Debug::NoLocking=1" -o "APT::Get::List-Cleanup=0"
	)
	apt-get "${apt_opts[@]}" -qq update >&2
}
