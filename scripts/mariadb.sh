#!/usr/bin/env bash
# MariaDB for the metadata-store tests: installs Debian's mariadb-server when its binaries are
# missing (idempotent: nothing to do when they are there). The tests start and stop their own
# server on a free port in a temporary data directory; nothing here starts a service.
set -euo pipefail

if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "mariadb-server is not installed and cannot be installed here (needs root and apt-get):" \
        "apt-get install -y mariadb-server" >&2
    exit 3
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: the package must not start a system-wide server (the tests run their own).
policy=/usr/sbin/policy-rc.d
cleanup_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && cleanup_policy=1
fi
trap '[ "$cleanup_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y -q --no-install-recommends mariadb-server mariadb-client >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends \
         mariadb-server mariadb-client >/dev/null; }
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]
