#!/usr/bin/env bash
# check-clean.sh: proves that `cluster.sh down` leaves the machine as `up` found it.
#   check-clean.sh snapshot FILE   record the machine's state (before up)
#   check-clean.sh compare FILE    compare the state now (after down) with FILE; exit 1 on any difference
# Independent of cluster.sh's own bookkeeping: it looks at what the kernel and
# the host show, not at what the cluster recorded. Recorded: network links,
# addresses and routes, network namespaces, mount points, cgroup directories
# (three levels), loop devices, iptables rules, cluster programs (containerd,
# shims, runc, kubelet, pause; etcd and kube-* of this cluster's directory),
# /var/log/containers, IPv4 forwarding.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${KDEFER_CLUSTER_DIR:-$REPO/bin/cluster}

state() {
	echo "## links"; ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
	echo "## addresses"; ip -o addr show | awk '{print $2, $3, $4}' | sort
	echo "## routes"; ip route show table all 2>/dev/null | grep -v '^local\|^broadcast\|^multicast' | sort
	echo "## netns"; ls -1 /run/netns /var/run/netns 2>/dev/null | sort -u
	echo "## mounts"; awk '{print $5}' /proc/self/mountinfo | sort
	# Other programs' cgroups come and go (test sessions): only the kubelets' kinds.
	echo "## cgroups"
	find /sys/fs/cgroup -mindepth 1 -maxdepth 5 -type d 2>/dev/null | grep -E '/(kubepods|kdefer-|pod[0-9a-f]{8}-)' | sort
	echo "## loop devices"; losetup -a 2>/dev/null | sed 's/^[^ ]* //' | sort
	echo "## iptables"
	local t
	for t in filter nat mangle; do iptables -t "$t" -S 2>/dev/null | sed "s/^/$t /"; done
	echo "## processes"
	local d comm
	for d in /proc/[0-9]*; do
		comm=$(cat "$d/comm" 2>/dev/null) || continue
		case "$comm" in containerd | containerd-shim* | runc | kubelet | pause) ;;
		# others' envtest runs etcd and kube-apiserver too: only the cluster's
		etcd | kube-*) tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF "$DIR/" || continue ;;
		*) continue ;; esac
		echo "$comm $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)"
	done | sort
	echo "## /var/log/containers"; ls -1 /var/log/containers 2>/dev/null | sort
	echo "## ip_forward"; cat /proc/sys/net/ipv4/ip_forward
}

case "${1:-}" in
snapshot) state >"${2:?FILE}" ;;
compare)
	if diff -u "${2:?FILE}" <(state) >"$2.diff"; then
		echo "check-clean: the machine is as before up"
	else
		echo "check-clean: differences after down (- before, + now):" >&2
		grep '^[-+][^-+]' "$2.diff" >&2
		exit 1
	fi
	;;
*) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
