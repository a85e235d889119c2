#!/usr/bin/env bash
# One command that installs everything millwheel-beam needs on a fresh Debian
# machine with Python 3.11+:
#   - Java 17+ for PySpark 4 (Debian's openjdk-17-jre-headless) when absent,
#   - Go and Google's Bigtable emulator sources (golang-go,
#     golang-google-cloud-dev), from which the emulator is built into .bin/,
#   - the Python package with its test, report and bigtable extras.
# System packages need root (or sudo); without either they are skipped with a
# message and the rest still installs.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"

apt_install() {
  local runner=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then runner=(sudo); else
      echo "setup: not root and no sudo; install by hand: $*" >&2; return 0
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get; install by hand: $*" >&2; return 0
  fi
  "${runner[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${runner[@]}" apt-get install -y -qq "$@"
}

java_major() {
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

needed=()
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  needed+=(openjdk-17-jre-headless)
fi
command -v go >/dev/null 2>&1 || needed+=(golang-go)
[ -d /usr/share/gocode/src/cloud.google.com/go/bigtable/bttest ] \
  || needed+=(golang-google-cloud-dev)
if [ ${#needed[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${needed[*]}"
  apt_install "${needed[@]}"
fi

echo "setup: installing the Python package and its extras"
"$PYTHON" -m pip install --quiet --disable-pip-version-check \
  -e ".[test,report,bigtable]"

if [ -f testing/bigtable_emulator.go ] && command -v go >/dev/null 2>&1; then
  echo "setup: building Google's Bigtable emulator into .bin/bttest"
  mkdir -p .bin
  GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$PWD/.bin/gocache" \
    go build -o .bin/bttest testing/bigtable_emulator.go
fi
echo "setup: building the Spark driver's class archive (faster Spark starts)"
"$PYTHON" -m runners.spark.class_archive \
  || echo "setup: continuing without it (Spark starts as before)"
echo "setup: done"
