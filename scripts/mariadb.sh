#!/usr/bin/env bash
# MariaDB for the metadata-store tests: installs Debian's mariadb-server when its binaries are
# missing (idempotent: nothing to do when they are there). The tests start and stop their own
# server on a free port in a temporary data directory; nothing here starts a service.
set -euo pipefail

if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
    exit 0
fi
"$(dirname "$0")/ensure_system_packages.sh" mariadb-server mariadb-client
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]
