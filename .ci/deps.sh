#!/usr/bin/env bash
# Installs what the tests need and the machine lacks (`make deps`, run by
# `make test`): a C compiler when cgo is off (the race detector), versitygw
# (the real S3 server of the tier tests), the
# RocketMQ 5 Node.js client from proxy/nodetest's lockfile (the gRPC tests),
# playwright-core from console/browsertest's lockfile and Debian's chromium
# (the web console tests). Idempotent: what is there
# already is kept. Whatever it cannot install it names, with what to do, and
# the run goes on: the tests that need it then skip or fail saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
root=false
[[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1 && root=true
apt_updated=false
apt_install() { # packages...
	if ! $apt_updated; then
		apt-get update -qq
		apt_updated=true
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v go >/dev/null 2>&1; then
	echo "deps: Go is not installed: install Go (go.mod names the version) from https://go.dev/dl/ and run this again" >&2
	exit 1
fi
echo "== go: $(go version)"
go mod download

echo "== a C compiler (the race detector needs cgo)"
if [[ $(go env CGO_ENABLED) != 1 ]]; then
	if $root; then
		echo "deps: installing gcc with apt-get"
		apt_install gcc libc6-dev
	fi
	if [[ $(go env CGO_ENABLED) != 1 ]]; then
		missing+=("a C compiler: cgo is off (no gcc, or CGO_ENABLED=0) and this is not root on Debian/Ubuntu; install gcc ('sudo apt-get install gcc'): the first test pass runs with -race, which needs cgo")
	fi
else
	echo "deps: cgo is on"
fi

echo "== versitygw (real S3 server for the tier tests)"
if ! bash .ci/versitygw.sh; then
	missing+=("versitygw: 'go install github.com/versity/versitygw/cmd/versitygw@v1.8.0' failed (network?); the real-S3 tests skip without it, and fail when CI is set")
fi

echo "== node and npm (the RocketMQ 5 Node.js client for the gRPC tests)"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
	if $root; then
		echo "deps: installing nodejs and npm with apt-get"
		apt_install nodejs npm
	fi
fi
if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
	lock=proxy/nodetest/package-lock.json
	installed=proxy/nodetest/node_modules/.package-lock.json
	if [[ -d proxy/nodetest/node_modules/rocketmq-client-nodejs && $installed -nt $lock ]]; then
		echo "deps: proxy/nodetest/node_modules is up to date with its lockfile"
	else
		echo "deps: npm ci in proxy/nodetest"
		if ! (cd proxy/nodetest && npm ci --no-audit --no-fund --loglevel=error); then
			missing+=("the Node.js client: 'npm ci' in proxy/nodetest failed (network?); the Node.js client tests skip without it")
		fi
	fi
	if [[ -d console/browsertest/node_modules/playwright-core && console/browsertest/node_modules/.package-lock.json -nt console/browsertest/package-lock.json ]]; then
		echo "deps: console/browsertest/node_modules is up to date with its lockfile"
	else
		echo "deps: npm ci in console/browsertest (playwright-core)"
		if ! (cd console/browsertest && npm ci --no-audit --no-fund --loglevel=error); then
			missing+=("playwright-core: 'npm ci' in console/browsertest failed (network?); the console's Playwright test fails without it")
		fi
	fi
else
	missing+=("node and npm: not installed and not root on Debian/Ubuntu, so not installed here; install Node.js and npm, then run 'npm ci' in proxy/nodetest and console/browsertest (the Node.js client tests skip and the console's Playwright test fails without them)")
fi

echo "== chromium (headless browser for the web console test)"
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
	if $root; then
		echo "deps: installing chromium with apt-get"
		apt_install chromium
	else
		missing+=("chromium: not on PATH and not root on Debian/Ubuntu, so not installed here; install it ('sudo apt-get install chromium') or put a chromium on PATH: TestConsoleChromium fails without it")
	fi
fi

if ((${#missing[@]})); then
	echo "== deps: NOT INSTALLED:" >&2
	for m in "${missing[@]}"; do
		echo "  - $m" >&2
	done
else
	echo "== deps: everything the tests need is installed"
fi
