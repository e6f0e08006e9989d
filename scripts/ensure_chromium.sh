#!/usr/bin/env bash
# Install Debian's chromium for the browser test when we can (root + apt); otherwise say why not.
# The browser test itself skips with this reason outside CI, and fails in CI (CI=true) if chromium is absent.
set -u
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian chromium for the browser test ..."
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "could not install chromium with apt-get; the browser test will be skipped"
else
  echo "not root or no apt-get: chromium not installed; the browser test will be skipped"
fi
exit 0
