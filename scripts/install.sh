#!/usr/bin/env bash
# The one place that installs llamapy into a virtual environment; `make run`, `make test`
# and .ci/run all call it.  Usage: scripts/install.sh VENV [EXTRA]   (EXTRA: e.g. dev)
#
# On CPU-only machines, torch==2.13.0 is installed first: pip then takes the CPU wheel
# (a local file on the development machines) instead of pulling a multi-GB CUDA build.
# The project's own requirement stays a range, so users with GPUs keep their torch.
set -euo pipefail
venv=${1:-.venv}
extra=${2:-}
python=${PYTHON:-python3}
if [[ ! -x $venv/bin/python ]]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    "${pip[@]}" "torch>=2.4,<3"
  else
    "${pip[@]}" "torch==2.13.0" || "${pip[@]}" "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
  fi
fi
spec="."
[[ -n $extra ]] && spec=".[$extra]"
"${pip[@]}" -e "$spec"
# The dev extras' browser test (tests/test_webui_browser.py) drives Debian's Chromium with
# selenium: installed here where it can be (apt-get and root), else that test skips saying so.
if [[ $extra == *dev* ]] && ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }; } \
      || echo "install.sh: chromium not installed (apt-get failed): tests/test_webui_browser.py will skip" >&2
  else
    echo "install.sh: no chromium (needs apt-get as root): tests/test_webui_browser.py will skip" >&2
  fi
fi
