#!/usr/bin/env bash
# Debian packages some tests need beyond requirements.lock (mariadb-server, prometheus,
# prometheus-pushgateway, chromium...): installs those of PACKAGE... that dpkg does not list as
# installed, with apt-get, and does nothing when all are there. Nothing here starts a service:
# the tests start their own servers on free ports in temporary directories.
#
#   scripts/ensure_system_packages.sh PACKAGE...
#
# Exit status: 0 when every package is installed afterwards; 3 when some are missing and cannot
# be installed here (needs root and apt-get; the message says what to run); apt-get's own
# status when it fails.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 PACKAGE..." >&2
    exit 2
fi

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

missing_packages() {
    missing=()
    for package in "$@"; do
        installed "$package" || missing+=("$package")
    done
}

missing_packages "$@"
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "${missing[*]} not installed and cannot be installed here (needs root and apt-get):" \
        "apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 3
fi
# One install at a time: tests on parallel workers ask for packages together, and a second
# apt-get fails at once on dpkg's lock. The one that waited finds what the first installed.
exec 9>"${TMPDIR:-/tmp}/conveyor-system-packages.lock"
flock 9
missing_packages "$@"
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d exit 101: a package's maintainer scripts must not start a system-wide service
# (Debian's prometheus and mariadb-server would); invoke-rc.d and deb-systemd-invoke honour it.
policy=/usr/sbin/policy-rc.d
cleanup_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && cleanup_policy=1
fi
trap '[ "$cleanup_policy" = 1 ] && rm -f "$policy"' EXIT
# Stale package lists are the usual reason an install fails: update once and try again.
# An apt-get outside this script holding dpkg's lock is waited for, not failed on.
wait_lock=(-o DPkg::Lock::Timeout=600)
apt-get "${wait_lock[@]}" install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get "${wait_lock[@]}" update -q >/dev/null \
         && apt-get "${wait_lock[@]}" install -y -q --no-install-recommends "${missing[@]}" \
             >/dev/null; }
for package in "${missing[@]}"; do
    installed "$package" || { echo "$package: apt-get did not install it" >&2; exit 1; }
done
