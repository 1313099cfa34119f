#!/usr/bin/env bash
# What the test tiers need on a Debian machine, set up before `make test` and `make faults`:
#   python3-venv              the venvs, when there is none yet and Python lacks its venv module
#   redis-server, redis-cli   private servers, and the shared Redis at 127.0.0.1:6379 (or at the local
#                             DELAYQ_TEST_REDIS_URL), started when nothing answers there
#   nutcracker                twemproxy, for the compatibility tier
#   faketime                  skewed clocks, for the fault tier
#   valkey-server             the Valkey run of `make test` (Valkey 8: bookworm-backports on Debian 12)
#   chromium                  the browser tests
#   curl, jq                  the docs' examples, run as written (tests/local/test_docs_examples.py)
# As root with apt, it installs what is missing; otherwise it stops at once with one line naming the
# missing packages and how to install them. Idempotent, and quick when all is there: no apt call then.
#
# For its own tests (tests/infra/test_infra_setup.py): DELAYQ_SETUP_UID stands for the user id, and
# DELAYQ_SETUP_APT for /etc/apt (where a backports source is looked for and added).
set -euo pipefail
cd "$(dirname "$0")/.."

me="tests/setup.sh"
apt_dir="${DELAYQ_SETUP_APT:-/etc/apt}"
codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")" || codename=""
# Valkey 8 reached Debian after bookworm: there it comes from bookworm-backports.
backports=""
[ "$codename" = bookworm ] && backports="bookworm-backports"

# program:package, in the order they are installed.
needed=(redis-server:redis-server redis-cli:redis-tools nutcracker:nutcracker faketime:faketime
        valkey-server:valkey-server chromium:chromium curl:curl jq:jq)

has() { PATH="$PATH:/usr/sbin:/sbin" command -v "$1" >/dev/null; }  # nutcracker lives in /usr/sbin

missing_packages() {
  local entry
  # The venvs (make's first step) need Python's venv module, a package of its own on Debian.
  [ -x .venv/bin/python ] || python3 -c "import ensurepip, venv" 2>/dev/null || echo python3-venv
  for entry in "${needed[@]}"; do
    has "${entry%%:*}" || echo "${entry#*:}"
  done
}

how_to_install() {  # the apt-get commands that install the packages given
  local plain=() package
  for package in "$@"; do [ "$package" = valkey-server ] && [ -n "$backports" ] || plain+=("$package"); done
  local how=""
  [ ${#plain[@]} -gt 0 ] && how="apt-get install ${plain[*]}"
  if [ ${#plain[@]} -lt $# ]; then
    how="${how:+$how && }apt-get install -t $backports valkey-server (with $backports in apt's sources)"
  fi
  echo "$how"
}

debian_mirror() {  # the mirror apt already fetches $codename from (deb822 or one-line sources), else Debian's
  local uri
  uri="$(awk -v suite="$codename" '
    function check() { if (uris != "" && found) { print uris; exit } uris = ""; found = 0 }
    /^[[:space:]]*$/ { check(); next }
    $1 == "URIs:" { uris = $2 }
    $1 == "Suites:" { for (i = 2; i <= NF; i++) if ($i == suite) found = 1 }
    END { check() }' "$apt_dir"/sources.list.d/*.sources 2>/dev/null)"
  [ -n "$uri" ] || uri="$(awk -v suite="$codename" '$1 == "deb" {
      for (i = 2; i < NF; i++) if ($i ~ /^[a-z+]+:\/\//) { if ($(i + 1) == suite) { print $i; exit } }
    }' "$apt_dir/sources.list" "$apt_dir"/sources.list.d/*.list 2>/dev/null)"
  echo "${uri:-http://deb.debian.org/debian}"
}

add_backports() {  # a source for $backports, on the mirror apt already uses, unless apt has one already
  grep -rqs "$backports" "$apt_dir/sources.list" "$apt_dir/sources.list.d" && return 0
  echo "$me: adding $backports to apt's sources ($apt_dir/sources.list.d/debian-backports.sources)"
  cat >"$apt_dir/sources.list.d/debian-backports.sources" <<EOF
Types: deb
URIs: $(debian_mirror)
Suites: $backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
}

apt_quietly() {  # apt-get "$@", its output shown only when it fails
  local log
  log="$(mktemp)"
  if ! DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -f "$log"
    echo "$me: apt-get $* failed" >&2
    return 1
  fi
  rm -f "$log"
}

install_packages() {
  local plain=() package
  for package in "$@"; do [ "$package" = valkey-server ] && [ -n "$backports" ] || plain+=("$package"); done
  echo "$me: installing $* (apt-get)"
  [ ${#plain[@]} -lt $# ] && add_backports
  apt_quietly update
  [ ${#plain[@]} -gt 0 ] && apt_quietly install "${plain[@]}"
  [ ${#plain[@]} -lt $# ] && apt_quietly install -t "$backports" valkey-server
  if [[ " $* " == *" valkey-server "* ]]; then
    # Where services start on install, Valkey's would take 6379, the shared Redis's port; the Valkey
    # run starts a valkey-server of its own.
    { systemctl disable --now valkey-server || service valkey-server stop; } >/dev/null 2>&1 || true
  fi
  return 0
}

read -r -a missing <<<"$(missing_packages | tr '\n' ' ')"
if [ ${#missing[@]} -gt 0 ]; then
  if [ "${DELAYQ_SETUP_UID:-$(id -u)}" != 0 ] || ! has apt-get; then
    echo "$me: missing ${missing[*]}: as root, $(how_to_install "${missing[@]}")" >&2
    exit 1
  fi
  install_packages "${missing[@]}"
  read -r -a still <<<"$(missing_packages | tr '\n' ' ')"
  if [ ${#still[@]} -gt 0 ]; then
    echo "$me: still missing after apt-get: ${still[*]}: $(how_to_install "${still[@]}")" >&2
    exit 1
  fi
fi

# The tiers share the Redis at DELAYQ_TEST_REDIS_URL, by default 127.0.0.1:6379 (tests/conftest.py):
# start one there when it is on this machine and nothing answers.
url="${DELAYQ_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}"
[[ $url =~ ^redis://(127\.0\.0\.1|localhost):([0-9]+)(/[0-9]*)?$ ]] || exit 0
port="${BASH_REMATCH[2]}"
redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && exit 0
echo "$me: starting redis-server on 127.0.0.1:$port"
redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no >/dev/null
for _ in $(seq 100); do
  redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "$me: redis-server on 127.0.0.1:$port did not answer within 10 s" >&2
exit 1
