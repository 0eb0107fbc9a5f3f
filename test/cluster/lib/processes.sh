# shellcheck shell=bash
# Sourced by cluster.sh: starting, watching and stopping the components.
# A component's key names its pid file and log: the program's name, with the
# node's suffix for node components of nodes 2..N (containerd-n2, kubelet-n2).

pidfile() { echo "$RUN/$1.pid"; }

# bin_of KEY: the program a key runs (kubelet-n2 -> kubelet).
bin_of() { echo "${1%-n[0-9]*}"; }

# runs PID BIN: PID has exec'ed the program BIN (its executable, not its
# command line: while the kernel execs a program, /proc/PID/cmdline is empty
# for a moment, between the new memory map and the arguments copied into it,
# and before that env's and setsid's command lines name the program too. w39
# saw etcd reported "exited" 0.3 s after its start, while it ran.)
runs() {
	local exe
	exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
	[[ $exe == */"$2" || $exe == */"$2 (deleted)" ]] || return 1
	! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}

# alive KEY: the recorded pid runs the component's binary.
alive() {
	local f; f=$(pidfile "$1"); [ -s "$f" ] || return 1
	runs "$(cat "$f")" "$(bin_of "$1")"
}

# launch KEY ARGV...: starts a component in its own session, output to logs/KEY.log.
# Proxy variables are dropped (the apiserver would send webhook calls through
# them); a proxy on a closed loopback port makes any accidental image pull fail
# at once instead of leaving the machine.
launch() {
	local name=$1 bin; shift
	bin=$(bin_of "$name")
	echo "=== $(date -Is) start: $*" >>"$LOGS/$name.log"
	env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u no_proxy -u NO_PROXY -u ALL_PROXY -u all_proxy \
		${LAUNCH_ENV:-} setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
	local pid=$! i
	echo "$pid" >"$(pidfile "$name")"
	# until the forked shell has exec'ed env, setsid and then the program,
	# the pid is not yet the component's (up to 10 s on a loaded machine)
	for ((i = 0; i < 500; i++)); do
		runs "$pid" "$bin" && break
		[ -d "/proc/$pid" ] || break
		sleep 0.02
	done
}

# stop_proc KEY [GRACE [SIGNAL]]: SIGNAL (default TERM), wait up to GRACE seconds, then KILL.
stop_proc() {
	local name=$1 grace=${2:-10} sig=${3:-TERM} p i
	alive "$name" || { rm -f "$(pidfile "$name")"; return 0; }
	p=$(cat "$(pidfile "$name")")
	kill "-$sig" "$p" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do alive "$name" || break; sleep 0.1; done
	if alive "$name"; then log "$name ($p) ignored $sig for ${grace}s: KILL"; kill -KILL "$p" 2>/dev/null || true; sleep 0.2; fi
	rm -f "$(pidfile "$name")"
}

# wait_until DESC TIMEOUT LOGNAME CMD...: polls CMD every 0.25 s; on timeout names the log to read.
wait_until() {
	local desc=$1 timeout=$2 lg=$3 start=$SECONDS; shift 3
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS - start >= timeout)); then
			echo "[cluster] ERROR: timed out after ${timeout}s waiting for $desc" >&2
			[ -n "$lg" ] && [ -f "$LOGS/$lg.log" ] && { echo "--- last lines of $LOGS/$lg.log:" >&2; tail -n 25 "$LOGS/$lg.log" >&2; }
			return 1
		fi
		[ -n "$lg" ] && [ "$lg" != - ] && ! alive "$lg" && { echo "[cluster] ERROR: $lg exited while waiting for $desc; last lines of $LOGS/$lg.log:" >&2; tail -n 25 "$LOGS/$lg.log" >&2; return 1; }
		sleep 0.25
	done
}

tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

start_etcd() {
	alive etcd && return 0
	mkdir -p "$DIR/etcd"; chmod 700 "$DIR/etcd"
	launch etcd "$(etcd_dir)/etcd" --name kdefer --data-dir "$DIR/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "kdefer=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
	wait_until "etcd on 127.0.0.1:$ETCD_CLIENT_PORT" 30 etcd tcp_open 127.0.0.1 "$ETCD_CLIENT_PORT"
}

# launch_containerd: the current node's containerd (node_ctx), not waited for.
launch_containerd() {
	mkdir -p "$RUN" "$LOGS" "$NDIR/run"
	LAUNCH_ENV="HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY=${REGISTRY%:*}" \
		launch "containerd$SFX" containerd --config "$NDIR/conf/containerd.toml"
}

start_containerd() {
	alive "containerd$SFX" && return 0
	local cri; cri=$(criready_bin) || return 1
	mkdir -p "$NDIR/containerd/root" "$NDIR/containerd/state" "$NDIR/containerd/opt"
	launch_containerd
	wait_until "containerd on $CTRD_SOCK" 30 "containerd$SFX" ctr -a "$CTRD_SOCK" version
	# The daemon answers before its CRI plugin has recovered the last run's
	# containers; a kubelet started then checks the CRI once and exits.
	wait_until "containerd's CRI on $CTRD_SOCK" 60 "containerd$SFX" "$cri" "$CTRD_SOCK"
}

# criready_bin: the path of test/cluster/criready, built when missing or older
# than its source (a cached build: about a second).
criready_bin() {
	local b="$DIR/bin/criready" src="$REPO/test/cluster/criready/main.go"
	if [ ! -x "$b" ] || [ "$src" -nt "$b" ]; then
		(cd "$REPO" && go build -o "$b" ./test/cluster/criready) >&2 || { echo "[cluster] ERROR: building test/cluster/criready failed" >&2; return 1; }
	fi
	echo "$b"
}

start_apiserver() {
	alive kube-apiserver && return 0
	launch kube-apiserver "$(kube_dir)/kube-apiserver" \
		--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API_PORT \
		--endpoint-reconciler-type=none \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction,PodNodeSelector \
		--admission-control-config-file="$DIR/conf/admission.yaml" \
		--allow-privileged=true \
		--service-cluster-ip-range=$SERVICE_CIDR \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
		--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
		--enable-aggregator-routing=true \
		--profiling=false --v=1
	wait_until "kube-apiserver /readyz on 127.0.0.1:$API_PORT" 90 kube-apiserver kubectl get --raw /readyz
}

start_controller_manager() {
	alive kube-controller-manager && return 0
	local kc="$DIR/conf/controller-manager.kubeconfig"
	launch kube-controller-manager "$(kube_dir)/kube-controller-manager" \
		--kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--use-service-account-credentials=true --controllers='*' \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
		--profiling=false --v=1
}

start_scheduler() {
	alive kube-scheduler && return 0
	local kc="$DIR/conf/scheduler.kubeconfig"
	launch kube-scheduler "$(kube_dir)/kube-scheduler" \
		--kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false --v=1
}

# launch_kubelet: the current node's kubelet (node_ctx), not waited for.
launch_kubelet() {
	mkdir -p "$NDIR/kubelet" "$POD_LOGS"
	launch "kubelet$SFX" "$(kube_dir)/kubelet" \
		--config="$NDIR/conf/kubelet.yaml" --kubeconfig="$NDIR/conf/kubelet.kubeconfig" \
		--hostname-override="$NODE" --node-ip="$NODE_IP" \
		--root-dir="$NDIR/kubelet" --cert-dir="$NDIR/kubelet/pki" --v=2
}

wait_kubelet() {
	wait_until "kubelet of $NODE: healthz on $HEALTHZ_ADDR:10248" 60 "kubelet$SFX" tcp_open "$HEALTHZ_ADDR" 10248
}

start_kubelet() {
	alive "kubelet$SFX" && return 0
	launch_kubelet
	wait_kubelet
}

# start_component NAME: a control-plane component, or the current node's containerd or kubelet.
start_component() {
	case "$1" in
	etcd) start_etcd ;; containerd) start_containerd ;; kube-apiserver) start_apiserver ;;
	kube-controller-manager) start_controller_manager ;; kube-scheduler) start_scheduler ;; kubelet) start_kubelet ;;
	*) die "unknown component $1 (one of: $COMPONENTS)" ;;
	esac
}
