#!/usr/bin/env bash
# The README's picture of a run report, docs/images/report.png: the top of a real penguin run's
# report (ci profile) in headless Chromium, reduced to a 256-colour PNG (under 300 KB).
#
#   scripts/screenshot_report.sh [REPORT_HTML] [OUTPUT_PNG]
#
# Without REPORT_HTML it runs the penguin pipeline once (`conveyor data` + `conveyor run --env
# ci`, a few minutes) in a temporary working directory, removed afterwards. Chromium (Debian's
# `chromium`) is installed with scripts/ensure_system_packages.sh when missing.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="$root/.venv/bin/python"
report="${1:-}"
output="${2:-$root/docs/images/report.png}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

command -v chromium >/dev/null 2>&1 || "$root/scripts/ensure_system_packages.sh" chromium
if [ -z "$report" ]; then
    (cd "$root" && "$python" -m pipelines.cli data penguin --workdir "$scratch/work" >/dev/null)
    (cd "$root" && "$python" -m pipelines.cli run penguin --env ci --workdir "$scratch/work" \
        --log-format json >"$scratch/run.jsonl")
    report="$("$python" -c 'import json, sys
print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["run_dir"] + "/report.html")' \
        "$scratch/run.jsonl")"
fi
# --no-sandbox: Chromium refuses to run as root with its sandbox (containers, CI).
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,1500 \
    --screenshot="$scratch/shot.png" "file://$report" >/dev/null 2>&1
mkdir -p "$(dirname "$output")"
"$python" - "$scratch/shot.png" "$output" <<'PY'
import sys
from PIL import Image

image = Image.open(sys.argv[1]).convert("RGB")
image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(sys.argv[2], optimize=True)
PY
echo "wrote $output ($(stat -c %s "$output") bytes) from $report"
