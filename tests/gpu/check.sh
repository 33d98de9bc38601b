#!/usr/bin/env bash
# GPU-only checks, for sessions lent a GPU: the CUDA paths the CPU machines cannot exercise.
# Runs in well under 5 minutes on one GPU and prints a one-line summary at the end.
# Usage (repository root, a CUDA torch installed in .venv or the active Python):
#   tests/gpu/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
"$PY" - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, devices: "
      + ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))
PY
start=$(date +%s)
set +e
timeout 280 "$PY" -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rA 2>&1 | tee /tmp/kernel-explorer-gpu.log
status=${PIPESTATUS[0]}
set -e
echo "GPU check: $(grep -Eo '[0-9]+ (passed|failed|skipped|error)[a-z]*' /tmp/kernel-explorer-gpu.log | paste -sd, -), exit $status, $(( $(date +%s) - start )) s"
exit "$status"
