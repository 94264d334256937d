#!/usr/bin/env bash
# `make demo`, the README's main job: an FfDL manifest submitted to the scheduler, run as a PyTorch learner
# + controller sidecar pair on the local Docker engine against etcd and S3 (SeaweedFS), followed to
# COMPLETED, its provenance verified. Idempotent: images are cached by inputs, running services are reused.
set -euo pipefail
cd "$(dirname "$0")/.."
LK=.venv/bin/learnerkit
PY=.venv/bin/python
DEMO=.learnerkit/demo
say() { printf '\033[1mdemo:\033[0m %s\n' "$*"; }

# etcd, SeaweedFS and the registry need no image: they start in the background while the images build (their
# output in a file, shown if they fail), and the demo waits for them only once the images are there. The
# scheduler pins the sidecar image as it starts, so it starts once that image is built.
# An early exit waits for what runs in the background (`background`), so that none outlives the demo.
mkdir -p "$DEMO"
background=()
trap 'wait "${background[@]}" 2>/dev/null || true' EXIT
say "starting etcd, SeaweedFS (S3) and the catalog's registry in the background ($DEMO/dev-up.log)"
"$LK" dev up >"$DEMO/dev-up.log" 2>&1 &
services=$!
background+=("$services")

# The factsheet shows the scan verdict of the image ID the job ran, from the record `image scan` keeps; the dev
# scheduler trusts the project's images without one, so the demo scans the learner image once per image ID.
scanned() {
  "$PY" - <<'PY'
import sys
from learnerkit.common.engine import image_id
from learnerkit_build.cli_options import selected
from learnerkit_build.scan.records import load_record
_, (spec,) = selected(None, ("pytorch:2.13-cpu",), False, (), None)
found = image_id(f"{spec.repository()}:{spec.tag}")
sys.exit(0 if found and load_record(found) else 1)
PY
}

# Only the demo's two images; each shows what it will build with an estimate from its last build here. The scan
# runs in the background while the sidecar builds and the services start.
say "building the PyTorch learner image and the sidecar image (skipped when their inputs did not change)"
"$LK" image build pytorch:2.13-cpu --quiet-log
scan=""
if scanned; then
  say "the learner image's ID has a scan record (skipping the scan)"
else
  say "scanning the learner image in the background ($DEMO/scan.log), so the job's factsheet carries its verdict"
  "$LK" image scan pytorch:2.13-cpu >"$DEMO/scan.log" 2>&1 &
  scan=$!
  background+=("$scan")
fi
"$LK" sidecar build --quiet-log

if ! wait "$services"; then
  cat "$DEMO/dev-up.log" >&2
  say "the services did not start (above)"
  exit 1
fi
say "starting the scheduler beside them"
"$LK" dev up --with-scheduler
eval "$("$LK" dev env)"

say "uploading the sample dataset to s3://training-data/pytorch-smoke/"
"$LK" dev dataset "$DEMO/data"
"$LK" dev upload "$DEMO/data" s3://training-data/pytorch-smoke/

# The provenance signed as the job ends names the scan's record: the scan ends before the job is submitted.
if [ -n "$scan" ] && ! wait "$scan"; then
  say "the learner image's scan gate did not pass ($DEMO/scan.log): the factsheet says so"
fi
trap - EXIT

say "submitting examples/pytorch-smoke/manifest.yml (the CLI fills in the dev S3 endpoint and keys from the shell)"
job=$("$LK" job submit examples/pytorch-smoke/manifest.yml --output json | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["job_id"])')
say "job $job queued; following it"
"$LK" job status "$job" --follow
echo

say "the last lines of its log:"
"$LK" job logs "$job" | tail -n 3
say "its metric history (the last lines; FfDL's emetrics):"
"$LK" job metrics "$job" | tail -n 5
say "its provenance, signed by the platform's key (written as the job ended):"
for _ in $(seq 60); do "$LK" job provenance "$job" >/dev/null 2>&1 && break; sleep 1; done
"$LK" job provenance "$job"
rm -rf "$DEMO/download"
"$LK" job download "$job" --what all --to "$DEMO/download"
say "the download checked against it (signatures, every file hashed again, the data, the images):"
"$LK" job verify "$DEMO/download" --data "$DEMO/data"
results=$("$LK" job status "$job" --output json | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["results"])')
say "results, logs and checkpoints are in $results; the job was downloaded into $DEMO/download"
say "its page in the web console: ${LEARNERKIT_SCHEDULER_URL}/ui/jobs/$job (log in as tenant demo with the token"
say "  that \`eval \"\$($LK dev env)\"\` puts in \$LEARNERKIT_TOKEN; docs/console.md)"
say "stop the services with: $LK dev down"
