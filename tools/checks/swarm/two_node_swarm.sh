#!/usr/bin/env bash
# two_node_swarm.sh -- a real two-node Docker Swarm (manager + worker) on ONE Linux host, for
# the swarm runtime's tests and benchmark (props.tools.checks.swarm.rig drives it). Adapted from
# the measured recipe of ../shared/swarm (its README lists the traps this script avoids).
#
# Each node is a separate dockerd in its own network namespace (veth into a private bridge),
# with its own data-root, exec-root, pidfile, unix socket, cgroup parent and UTS hostname.
# A docker-registry (Debian's "docker-registry") runs in the manager's namespace; the critic
# image (Debian bookworm minbase with python3, built offline by debootstrap from the Debian
# mirror apt uses, cached as a tar) is imported, pushed to it, and pulled by the worker.
# Worker daemons run with --bridge=none: a task without networks has only loopback (swarm on
# 20.10 refuses the "none" network per service), and --no-new-privileges.
#
# It never talks to the host's own dockerd (/var/run/docker.sock) and never touches iptables.
# Only 10.231.0.0/16 addresses are used, all on interfaces inside the namespaces it creates.
#
#   two_node_swarm.sh up            # prints MANAGER=, WORKER=, IMAGE= (pinned by digest)
#   two_node_swarm.sh kill-worker   # SIGKILL the worker's dockerd (its containers live on)
#   two_node_swarm.sh status
#   two_node_swarm.sh down          # stop everything it started (by PID), remove all it made
#
# Env: SWARM_DIR (default /tmp/sw2n), SWARM_PREFIX (default sw2n: names of netns/bridge/veths),
#      ROOTFS_TAR (the rootfs tarball: made by debootstrap when missing, then reused),
#      REGISTRY_DATA (the registry's storage; outside SWARM_DIR, its image is pushed once),
#      DEBIAN_MIRROR (default: the first Debian URI in apt's sources),
#      SWARM_HEARTBEAT (dispatcher heartbeat, default 1s: a dead node is "Down" after ~4 s).
# Needs: root, iproute2, util-linux (unshare), docker.io (dockerd 20.10+, containerd, runc),
#        docker-registry, debootstrap, curl, bc.
set -euo pipefail

B=${SWARM_DIR:-/tmp/sw2n}
P=${SWARM_PREFIX:-sw2n}
BR=${P}br0
NET=10.231.0
MGR_IP=$NET.2
WRK_IP=$NET.3
REG=$MGR_IP:5000
IMAGE=$REG/props-critic:bookworm
REG_DATA=${REGISTRY_DATA:-$B/registry/data}  # outside $B: the image outlives `down`
MGR_HOST=${P}-mgr
WRK_HOST=${P}-w1
export DOCKER_CONFIG=$B/cli          # never read/write the user's ~/.docker
unset DOCKER_HOST DOCKER_CONTEXT

log() { printf '[%s] %s\n' "$(date +%T.%3N)" "$*" >&2; }
now() { date +%s.%N; }
since() { echo "scale=2; ($(now) - $1)/1" | bc; }
ns_of() { echo "${P}-$1"; }                       # netns name of node m|w
sock() { echo "$B/$1/docker.sock"; }
dk() { local n=$1; shift; docker -H "unix://$(sock "$n")" "$@"; }   # docker CLI on node m|w
api() { local n=$1; shift; curl -sS --max-time 30 --unix-socket "$(sock "$n")" "$@"; }  # raw Engine API
pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }
# Dead for good: gone, or a zombie not reaped yet (kill -0 still answers for one, and dockerd
# refuses to start beside a pidfile whose process it finds: "pid file found").
pid_dead() { [[ -z ${1:-} ]] || ! pid_alive "$1" \
  || [[ $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) == Z ]]; }
dockerd_pid() { cat "$B/$1/docker.pid" 2>/dev/null || true; }
TIMES=$B/times.txt
record() { echo "$1=$2" >> "$TIMES"; log "TIME $1 = $2 s"; }

# --- network: bridge + one netns per node, no address on the host side -----------------------
net_up() {
  ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge
  ip link set "$BR" up
  local n ip
  for n in m w; do
    ip=$([[ $n == m ]] && echo $MGR_IP || echo $WRK_IP)
    ip netns list | grep -qw "$(ns_of $n)" || ip netns add "$(ns_of $n)"
    if ! ip link show "${P}v$n" >/dev/null 2>&1; then
      ip link add "${P}v$n" type veth peer name "${P}p$n"
      ip link set "${P}p$n" netns "$(ns_of $n)"
      ip link set "${P}v$n" master "$BR" up
      ip -n "$(ns_of $n)" link set "${P}p$n" name eth0
      ip -n "$(ns_of $n)" addr add "$ip/24" dev eth0
      ip -n "$(ns_of $n)" link set eth0 up
      ip -n "$(ns_of $n)" link set lo up
    fi
  done
}

# --- registry in the manager's namespace --------------------------------------------------------
registry_up() {
  mkdir -p "$B/registry" "$REG_DATA"
  if pid_alive "$(cat "$B/registry/pid" 2>/dev/null)"; then return; fi
  cat > "$B/registry/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $REG_DATA}
  delete: {enabled: true}
http: {addr: "$REG"}
EOF
  ip netns exec "$(ns_of m)" setsid docker-registry serve "$B/registry/config.yml" \
      > "$B/registry/log" 2>&1 < /dev/null &
  echo $! > "$B/registry/pid"
  local i
  for i in $(seq 1 50); do
    ip netns exec "$(ns_of m)" curl -fsS --max-time 2 "http://$REG/v2/" >/dev/null 2>&1 && return
    sleep 0.2
  done
  log "registry did not come up"; cat "$B/registry/log" >&2; return 1
}

# --- one dockerd per node ---------------------------------------------------------------------
dockerd_up() {  # $1 = m|w
  local n=$1 dir=$B/$1 host
  host=$([[ $n == m ]] && echo $MGR_HOST || echo $WRK_HOST)
  mkdir -p "$dir"
  if pid_alive "$(dockerd_pid "$n")" && dk "$n" version >/dev/null 2>&1; then return; fi
  # A daemon SIGKILLed (kill-worker) left its pidfile, stale once its process is dead, and
  # its containerd running: a new dockerd waits on that one and can time out ("timeout
  # waiting for containerd to start", seen at the third kill of a session), so it goes too
  # (the containers' shims live on; the new containerd finds them).
  if pid_dead "$(dockerd_pid "$n")"; then
    rm -f "$dir/docker.pid"
    local cpid; cpid=$(cat "$dir/exec/containerd/containerd.pid" 2>/dev/null || true)
    if ! pid_dead "$cpid"; then
      kill -KILL "$cpid" 2>/dev/null || true
      for _ in $(seq 1 50); do pid_dead "$cpid" && break; sleep 0.1; done
    fi
  fi
  local extra=()
  # No --node-generic-resource: 20.10's constraint enforcer rewrites completed jobs that
  # reserved one to "rejected" (the recipe's pitfall 6); the launcher limits concurrency.
  # own UTS namespace so each node has its own hostname (swarm's node.hostname); own netns.
  # nsenter, not "ip netns exec": the latter remounts /sys, hiding /sys/fs/cgroup from dockerd.
  # A private (slave) mount namespace keeps the node's overlay/netns mounts off the host's table.
  setsid nsenter --net="/run/netns/$(ns_of "$n")" unshare --uts --mount --propagation slave sh -c "hostname $host; exec dockerd \
      --data-root $dir/data --exec-root $dir/exec --pidfile $dir/docker.pid \
      -H unix://$dir/docker.sock \
      --iptables=false --ip-masq=false --bridge=none \
      --default-address-pool base=10.231.128.0/17,size=24 \
      --cgroup-parent /${P}-$n --insecure-registry $REG --no-new-privileges \
      --log-level warn ${extra[*]:-}" > "$dir/dockerd.log" 2>&1 < /dev/null &
  local i
  for i in $(seq 1 150); do
    dk "$n" version >/dev/null 2>&1 && return
    sleep 0.2
  done
  log "dockerd $n did not come up"; tail -20 "$dir/dockerd.log" >&2; return 1
}

swarm_up() {
  local t0 state
  state=$(dk m info --format '{{.Swarm.LocalNodeState}}')
  if [[ $state != active ]]; then
    t0=$(now)
    dk m swarm init --advertise-addr $MGR_IP --listen-addr $MGR_IP:2377 \
       --default-addr-pool 10.231.64.0/18 --default-addr-pool-mask-length 24 \
       --dispatcher-heartbeat "${SWARM_HEARTBEAT:-1s}" >/dev/null
    record swarm_init "$(since "$t0")"
  fi
  state=$(dk w info --format '{{.Swarm.LocalNodeState}}')
  if [[ $state != active ]]; then
    local token; token=$(dk m swarm join-token -q worker)
    t0=$(now)
    dk w swarm join --token "$token" --advertise-addr $WRK_IP --listen-addr $WRK_IP:2377 $MGR_IP:2377 >/dev/null
    record swarm_join "$(since "$t0")"
    local i
    for i in $(seq 1 100); do
      [[ $(dk m node ls --format '{{.Status}}' | grep -c Ready) == 2 ]] && break
      sleep 0.2
    done
    record join_to_both_ready "$(since "$t0")"
  fi
  dk m node ls >&2
}

# --- image with python3, built offline from the Debian mirror --------------------------------
mirror() {
  if [[ -n ${DEBIAN_MIRROR:-} ]]; then echo "$DEBIAN_MIRROR"; return; fi
  local u; u=$(grep -hoE 'https?://[^ ]*/debian/?$' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | head -1 || true)
  [[ -z $u ]] && u=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -E '/debian/?$' | head -1 || true)
  [[ -n $u ]] || { echo "no Debian mirror in apt sources: set DEBIAN_MIRROR" >&2; return 1; }; echo "$u"
}

image_up() {
  if ip netns exec "$(ns_of m)" curl -fsS --max-time 5 "http://$REG/v2/props-critic/manifests/bookworm" \
       -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' >/dev/null 2>&1; then
    log "image already in registry"
  else
    local tar=${ROOTFS_TAR:-$B/rootfs.tar} t0
    if [[ ! -s $tar ]]; then
      t0=$(now)
      debootstrap --variant=minbase --include=python3 bookworm "$B/rootfs" "$(mirror)" > "$B/debootstrap.log" 2>&1
      record debootstrap "$(since "$t0")"
      # slim: no package caches, docs, man pages, locales
      rm -rf "$B/rootfs/var/cache/apt/archives/"*.deb "$B/rootfs/var/lib/apt/lists/"* \
             "$B/rootfs/usr/share/doc" "$B/rootfs/usr/share/man" "$B/rootfs/usr/share/locale"
      t0=$(now)
      mkdir -p "$(dirname "$tar")"
      tar -C "$B/rootfs" --numeric-owner -cf "$tar.partial" . && mv "$tar.partial" "$tar"
      record rootfs_tar "$(since "$t0")"
      rm -rf "$B/rootfs"
    fi
    log "rootfs tar: $(du -h "$tar" | cut -f1)"
    t0=$(now)
    dk m import --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' "$tar" $IMAGE >/dev/null
    record docker_import "$(since "$t0")"
    t0=$(now)
    dk m push $IMAGE >/dev/null
    record push "$(since "$t0")"
  fi
  if ! dk w image inspect $IMAGE >/dev/null 2>&1; then
    local t0; t0=$(now)
    dk w pull $IMAGE >/dev/null
    record worker_pull "$(since "$t0")"
  fi
  dk w image ls $IMAGE >&2
}

up() {
  mkdir -p "$B" "$DOCKER_CONFIG"
  net_up
  registry_up
  local t0; t0=$(now)
  dockerd_up m; dockerd_up w
  record dockerds_up "$(since "$t0")"
  swarm_up
  image_up
  local digest
  digest=$(ip netns exec "$(ns_of m)" curl -fsSI --max-time 10 \
      -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$REG/v2/props-critic/manifests/bookworm" | tr -d '\r' \
      | awk -F': ' 'tolower($1) == "docker-content-digest" {print $2}')
  [[ -n $digest ]] || { log "no digest for $IMAGE in the registry"; return 1; }
  echo "MANAGER=unix://$(sock m)"
  echo "WORKER=unix://$(sock w)"
  echo "WORKER_PID=$(dockerd_pid w)"
  echo "IMAGE=${IMAGE%:*}@$digest"
}

status() {
  ip netns list | grep "$P" || true
  for n in m w; do echo "dockerd $n pid=$(dockerd_pid $n) alive=$(pid_alive "$(dockerd_pid $n)" && echo y || echo n)"; done
  dk m node ls 2>/dev/null || true
  cat "$TIMES" 2>/dev/null || true
}

# --- teardown: only what this script started, by PID ------------------------------------------
down() {
  log "down: start"
  local n pid i
  # Both daemons stopped at once (each takes seconds to leave the swarm), then waited for.
  for n in w m; do
    pid=$(dockerd_pid $n)
    pid_alive "$pid" && kill -TERM "$pid"
  done
  for n in w m; do
    pid=$(dockerd_pid $n)
    for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.2; done
    if pid_alive "$pid"; then kill -KILL "$pid"; fi
  done
  log "down: daemons stopped"
  pid=$(cat "$B/registry/pid" 2>/dev/null || true)
  if pid_alive "$pid"; then
    kill -TERM "$pid"
    for i in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.1; done
  fi
  # Leftovers: anything still inside our netns (containerd, shims) or in our cgroups (containers).
  for n in m w; do
    if ip netns list | grep -qw "$(ns_of $n)"; then
      for pid in $(ip netns pids "$(ns_of $n)" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    fi
    for f in /sys/fs/cgroup/pids/${P}-$n/*/cgroup.procs /sys/fs/cgroup/${P}-$n/*/cgroup.procs; do
      [[ -f $f ]] || continue
      for pid in $(cat "$f"); do kill -KILL "$pid" 2>/dev/null || true; done
    done
  done
  log "down: leftovers killed"
  sleep 0.5
  for n in m w; do
    ip link del "${P}v$n" 2>/dev/null || true
    ip netns del "$(ns_of $n)" 2>/dev/null || true
    # empty cgroup dirs left by the cgroupfs driver (v1 hierarchies or v2)
    for d in /sys/fs/cgroup/*/${P}-$n /sys/fs/cgroup/${P}-$n; do
      [[ -d $d ]] || continue
      find "$d" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
      rmdir "$d" 2>/dev/null || true
    done
  done
  ip link del "$BR" 2>/dev/null || true
  # mounts under $B would only exist if something escaped the netns' private mount namespace
  if grep -q " $B" /proc/mounts; then
    grep " $B" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" || true; done
  fi
  log "down: links gone"
  rm -rf "$B"
  log "down: removed $B, netns $(ns_of m)/$(ns_of w), bridge $BR"
}

case ${1:-} in
  up) up ;;
  kill-worker)  # SIGKILL, then wait (bounded) until it is dead: a restart may follow at once
    pid=$(dockerd_pid w); kill -KILL "$pid"
    for _ in $(seq 1 100); do pid_dead "$pid" && break; sleep 0.1; done ;;
  status) status ;;
  down) down ;;
  *) echo "usage: $0 up|kill-worker|status|down" >&2; exit 2 ;;
esac
