#!/bin/bash
# AWS ParallelCluster 3 OnNodeConfigured action for hpk: Apptainer (setuid, with fakeroot) on every
# node, and a Flannel overlay as Apptainer's CNI network so that pods in cni mode (one network namespace
# per pod, `--net --fakeroot`) get addresses routable between nodes, as the HPK paper's evaluation set it up.
#
# Cluster config (the same script for both, with the node's role as the first argument):
#   HeadNode:
#     CustomActions:
#       OnNodeConfigured:
#         Script: s3://<bucket>/on-node-configured.sh
#         Args: [head]
#   Scheduling:
#     SlurmQueues:
#       - Name: queue1
#         CustomActions:
#           OnNodeConfigured:
#             Script: s3://<bucket>/on-node-configured.sh
#             Args: [compute]
#
# Runs as root after ParallelCluster's own bootstrap (Slurm is configured). What it does:
#   every node  Apptainer + apptainer-suid from signed distribution repositories (Ubuntu: the Apptainer
#               PPA; RHEL/Rocky 8, 9 and Amazon Linux 2: EPEL); subordinate uid/gid ranges for the local
#               users (apptainer config fakeroot --add), so --fakeroot works; user namespaces enabled;
#               flanneld (a systemd service) and the flannel CNI plugin; Apptainer's "fakeroot" network
#               (/etc/apptainer/network/40_fakeroot.conflist) becomes flannel + firewall + portmap.
#   head node   etcd (v3.6.14, the control-plane image's version and checksums) on the head node's
#               address, holding flannel's network configuration (10.244.0.0/16, vxlan).
#
# Then, in the hpk site profile (~/.config/hpk/sites/parallelcluster.toml):
#   [apptainer]
#   network = "cni"
#   cni_network = "fakeroot"
#   parent_image = "localhost/hpk-parent:1"   # hpkctl build --site parallelcluster parent
#   [pods]
#   dns_server = "169.254.169.253"
# and check with `hpkctl doctor --site parallelcluster`.
#
# Every download is checked against a SHA-256 pinned below; flannel's are not pinned in hpkctl (no value
# could be verified where this script was written): fill in FLANNEL_SHA256_* and FLANNEL_CNI_SHA256_*
# from the releases' published checksums after checking them yourself, or the script refuses to install
# flannel (Apptainer and fakeroot are still set up). `--no-flannel` skips the overlay (host networking).
#
# Security: etcd listens without TLS on the head node's VPC address (port 2379), as flannel is set up in
# HPK's deployment; restrict it with the cluster's security group to the cluster's own subnet.
set -euo pipefail

ETCD_VERSION=v3.6.14
ETCD_SHA256_amd64=ffe840ff9295808e88cce2794a18a5ac87f12a5203c8314d0bf6aa119b41bac5
ETCD_SHA256_arm64=fa1b80565ee6fc2df1ae6f57a508b221f3ecc7d591c317c581cd8281b0842b3e
FLANNEL_VERSION=v0.25.0
FLANNEL_SHA256_amd64=""
FLANNEL_SHA256_arm64=""
FLANNEL_CNI_VERSION=v1.1.2
FLANNEL_CNI_SHA256_amd64=""
FLANNEL_CNI_SHA256_arm64=""
FLANNEL_NETWORK=10.244.0.0/16
ETCD_PORT=2379
MAX_USER_NAMESPACES=15000

usage() {
  cat <<'EOF'
usage: on-node-configured.sh head|compute [--no-flannel] [--users "NAME ..."]
  head|compute   this node's role (the CustomActions Args of HeadNode / SlurmQueues)
  --no-flannel   Apptainer and fakeroot only (pods in host network mode)
  --users LIST   users to give subordinate id ranges (default: local users with UID 1000-59999)
EOF
}

die() {
  echo "on-node-configured.sh: error: $*" >&2
  exit 1
}

log() {
  echo "on-node-configured.sh: $*"
}

role=""
flannel=1
users=""
while [ $# -gt 0 ]; do
  case "$1" in
    head|compute) role=$1 ;;
    --no-flannel) flannel=0 ;;
    --users) [ $# -ge 2 ] || die "--users needs a value"; users=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done
[ -n "$role" ] || { usage >&2; die "give the node's role: head or compute"; }
[ "$(id -u)" = 0 ] || die "must run as root (ParallelCluster runs custom actions as root)"

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) die "unsupported architecture $(uname -m)" ;;
esac

# shellcheck disable=SC1091  # the distribution's own file
. /etc/os-release
os_id=${ID:-unknown}
os_major=${VERSION_ID%%.*}

# fetch URL SHA256 DEST: download and check, or fail without leaving DEST
fetch() {
  local url=$1 sum=$2 dest=$3
  [ -n "$sum" ] || die "no SHA-256 pinned for $url: fill it in at the top of this script (after checking the value the project publishes)"
  curl -fsSL --retry 3 -o "$dest.part" "$url" || die "download failed: $url"
  if ! echo "$sum  $dest.part" | sha256sum -c --quiet -; then
    rm -f "$dest.part"
    die "checksum mismatch for $url"
  fi
  mv "$dest.part" "$dest"
}

# The address of the head node (slurmctld) as the compute nodes reach it.
head_address() {
  local conf
  for conf in /opt/slurm/etc/slurm_parallelcluster.conf /opt/slurm/etc/slurm.conf /etc/slurm/slurm.conf; do
    if [ -f "$conf" ] && grep -q '^SlurmctldHost=' "$conf"; then
      sed -n 's/^SlurmctldHost=[^(]*(\([0-9.]*\)).*/\1/p' "$conf" | head -n 1
      return 0
    fi
  done
  return 1
}

install_apptainer() {
  if command -v apptainer >/dev/null 2>&1 && [ -e /usr/libexec/apptainer/bin/starter-suid ]; then
    log "Apptainer with its setuid starter is already installed: $(apptainer --version)"
    return 0
  fi
  case "$os_id" in
    ubuntu)
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -q
      apt-get install -y -q software-properties-common curl
      add-apt-repository -y ppa:apptainer/ppa
      apt-get update -q
      apt-get install -y -q apptainer-suid
      ;;
    rhel|rocky|almalinux|centos)
      case "$os_major" in
        8|9) dnf install -y "https://dl.fedoraproject.org/pub/epel/epel-release-latest-${os_major}.noarch.rpm" ;;
        *) die "$os_id $VERSION_ID: no EPEL for this release; install Apptainer yourself" ;;
      esac
      dnf install -y apptainer-suid curl
      ;;
    amzn)
      [ "$os_major" = 2 ] || die "Amazon Linux $VERSION_ID has no EPEL; use an Ubuntu or RHEL AMI, or install Apptainer yourself"
      amazon-linux-extras install -y epel
      yum install -y apptainer-suid curl
      ;;
    *) die "unsupported distribution $os_id; install Apptainer (with apptainer-suid) yourself" ;;
  esac
  log "installed $(apptainer --version)"
}

setup_fakeroot() {
  local current name
  current=$(sysctl -n user.max_user_namespaces 2>/dev/null || echo 0)
  if [ "$current" -lt "$MAX_USER_NAMESPACES" ]; then
    echo "user.max_user_namespaces=$MAX_USER_NAMESPACES" >/etc/sysctl.d/90-hpk-user-namespaces.conf
    sysctl -q -p /etc/sysctl.d/90-hpk-user-namespaces.conf
  fi
  if [ -z "$users" ]; then
    users=$(awk -F: '$3 >= 1000 && $3 < 60000 && $7 !~ /(nologin|false)$/ {print $1}' /etc/passwd)
  fi
  for name in $users; do
    if grep -q "^$name:" /etc/subuid 2>/dev/null; then
      log "fakeroot: $name already has a subordinate id range"
    else
      apptainer config fakeroot --add "$name"
      log "fakeroot: added a subordinate id range for $name"
    fi
  done
}

install_etcd() {
  local address=$1 sum tmp
  if [ "$arch" = amd64 ]; then sum=$ETCD_SHA256_amd64; else sum=$ETCD_SHA256_arm64; fi
  tmp=$(mktemp -d)
  fetch "https://github.com/etcd-io/etcd/releases/download/$ETCD_VERSION/etcd-$ETCD_VERSION-linux-$arch.tar.gz" \
    "$sum" "$tmp/etcd.tar.gz"
  tar -xzf "$tmp/etcd.tar.gz" -C "$tmp" --strip-components=1
  install -m 0755 "$tmp/etcd" "$tmp/etcdctl" /usr/local/bin/
  rm -rf "$tmp"
  install -d -m 0700 /var/lib/hpk-flannel-etcd
  cat >/etc/systemd/system/hpk-flannel-etcd.service <<EOF
[Unit]
Description=etcd holding flannel's network configuration (hpk)
After=network-online.target

[Service]
ExecStart=/usr/local/bin/etcd --name=hpk-flannel --data-dir=/var/lib/hpk-flannel-etcd --listen-client-urls=http://$address:$ETCD_PORT,http://127.0.0.1:$ETCD_PORT --advertise-client-urls=http://$address:$ETCD_PORT --listen-peer-urls=http://127.0.0.1:2380
Restart=always

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  systemctl enable --now hpk-flannel-etcd
  local tries=0
  until ETCDCTL_API=3 /usr/local/bin/etcdctl --endpoints="http://127.0.0.1:$ETCD_PORT" endpoint health >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt 30 ] || die "etcd did not become healthy (journalctl -u hpk-flannel-etcd)"
    sleep 1
  done
  ETCDCTL_API=3 /usr/local/bin/etcdctl --endpoints="http://127.0.0.1:$ETCD_PORT" put /coreos.com/network/config \
    "{\"Network\": \"$FLANNEL_NETWORK\", \"Backend\": {\"Type\": \"vxlan\"}}" >/dev/null
  log "etcd for flannel on $address:$ETCD_PORT, network $FLANNEL_NETWORK (vxlan)"
}

install_flannel() {
  local address=$1 sum cni_sum cni_dir
  if [ "$arch" = amd64 ]; then
    sum=$FLANNEL_SHA256_amd64 cni_sum=$FLANNEL_CNI_SHA256_amd64
  else
    sum=$FLANNEL_SHA256_arm64 cni_sum=$FLANNEL_CNI_SHA256_arm64
  fi
  fetch "https://github.com/flannel-io/flannel/releases/download/$FLANNEL_VERSION/flanneld-$arch" "$sum" \
    /usr/local/bin/flanneld
  chmod 0755 /usr/local/bin/flanneld
  cat >/etc/systemd/system/flanneld.service <<EOF
[Unit]
Description=flannel overlay for hpk pods (Apptainer CNI)
After=network-online.target

[Service]
ExecStart=/usr/local/bin/flanneld -etcd-endpoints=http://$address:$ETCD_PORT -ip-masq
Restart=always

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  systemctl enable --now flanneld
  cni_dir=/usr/libexec/apptainer/cni
  [ -d "$cni_dir" ] || die "$cni_dir is missing: is Apptainer installed from a package?"
  fetch "https://github.com/flannel-io/cni-plugin/releases/download/$FLANNEL_CNI_VERSION/flannel-$arch" "$cni_sum" \
    "$cni_dir/flannel"
  chmod 0755 "$cni_dir/flannel"
  install -d -m 0755 /etc/apptainer/network
  cat >/etc/apptainer/network/40_fakeroot.conflist <<'EOF'
{
    "cniVersion": "1.0.0",
    "name": "fakeroot",
    "plugins": [
        {"type": "flannel", "delegate": {"isDefaultGateway": true}},
        {"type": "firewall"},
        {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
    ]
}
EOF
  log "flanneld runs (etcd http://$address:$ETCD_PORT); Apptainer's fakeroot network is flannel"
}

install_apptainer
setup_fakeroot
if [ "$flannel" = 1 ]; then
  command -v iptables >/dev/null 2>&1 || die "iptables is missing: the CNI firewall and portmap plugins need it"
  address=$(head_address) || die "cannot find SlurmctldHost in the Slurm configuration"
  [ -n "$address" ] || die "SlurmctldHost names no address"
  if [ "$role" = head ]; then
    install_etcd "$address"
  fi
  install_flannel "$address"
fi
log "done ($role node)"
