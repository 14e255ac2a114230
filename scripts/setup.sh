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

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import orchestrator, pytest" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
  touch .venv/.installed
fi
