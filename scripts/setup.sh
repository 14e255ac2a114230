# Sourced by scripts/demo and scripts/test: a venv with orch installed, and sshd.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing openssh-server (the lab runs real sshd processes)..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
  else
    echo "orch's lab needs /usr/sbin/sshd: run 'sudo apt-get install openssh-server'." >&2
    exit 2
  fi
fi

# sudo: the lab test of non-root logins (`become: sudo`) needs it; it skips without.
if ! command -v sudo >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "Installing sudo (for the test of non-root logins)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo >/dev/null
fi

# chromium: the lab test of `orch report --format html` looks at the page as a browser
# draws it (a headless screenshot); it skips without.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "Installing chromium (for the screenshot of the run page)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# promtool: `orch alerts`' rules are checked by Prometheus's own tool. Debian's package
# is unpacked, not installed: installing it would start a Prometheus server on :9090.
if [ ! -x .cache/prometheus/usr/bin/promtool ] && [ "$(id -u)" = 0 ] \
   && command -v apt-get >/dev/null; then
  echo "Unpacking Debian's prometheus package for promtool..."
  mkdir -p .cache/prometheus
  (cd .cache && apt-get download -qq prometheus 2>/dev/null \
     || { apt-get update -qq && apt-get download -qq prometheus; }) \
    && dpkg -x .cache/prometheus_*.deb .cache/prometheus && rm -f .cache/prometheus_*.deb
fi
if [ -x .cache/prometheus/usr/bin/promtool ]; then
  export PROMTOOL="$PWD/.cache/prometheus/usr/bin/promtool"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import orchestrator, pytest" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
  touch .venv/.installed
fi
