#!/usr/bin/env bash
# Installs the Debian packages servesim needs to build, test and draw figures.
# Idempotent: packages already present are skipped, and apt-get runs only when
# something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev
  libboost-program-options-dev
  catch2
  libbenchmark-dev
  nlohmann-json3-dev
  libfmt-dev
  python3 python3-numpy python3-matplotlib python3-pandas
  python3-nbclient python3-ipykernel python3-nbformat
  slurm-wlm munge
  prometheus   # a real Prometheus scrapes `servesim serve` in the tests
  nodejs       # the official openai client (npm) streams from `servesim serve` in the tests
  clang libclang-rt-dev  # libFuzzer for the parsers' fuzz tests
)
# Debian's nodejs comes without npm; a Node.js from elsewhere (NodeSource)
# brings its own, and Debian's npm package would conflict with it.
if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
