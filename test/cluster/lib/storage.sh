# shellcheck shell=bash
# Sourced by cluster.sh: the storage classes and their PVs.
#   kdefer-local   (the default) each node's own local PVs, on its node file
#                  system: bound to that node (node affinity on its hostname).
#   kdefer-shared  SHARED_PV_COUNT local PVs in $DIR/shared on the host's file
#                  system, which every node of this machine sees at the same
#                  path: network storage's stand-in (a cluster file system
#                  mounted on every node), mountable from any node (affinity
#                  kubernetes.io/os=linux, which every kubelet sets), so a run
#                  on a lost node relocates (e2e TestMultiNodeNodeLost).

# Shared PVs (few: only scenarios that relocate use them).
SHARED_PV_COUNT=${KDEFER_CLUSTER_SHARED_PVS:-8}

# pv_yaml NAME CLASS PATH AFFINITY_KEY AFFINITY_VALUE: one pre-created local PV.
pv_yaml() {
	cat <<EOC
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $1
  labels: {kdefer.io/local-pv: "true"}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $2
  volumeMode: Filesystem
  local: {path: $3}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: $4, operator: In, values: [$5]}
EOC
}

storage() {
	local i j name pvdir
	{
		cat <<EOC
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: kdefer-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOC
		for ((i = 1; i <= NODES; i++)); do
			node_ctx "$i"
			for ((j = 0; j < PV_COUNT; j++)); do
				name=$(printf '%s-%03d' "$PV_PREFIX" "$j")
				pvdir="$NDIR/pv/$name"
				mkdir -p "$pvdir"
				pv_yaml "$name" kdefer-local "$pvdir" kubernetes.io/hostname "$NODE"
			done
		done
		cat <<EOC
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: kdefer-shared
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOC
		for ((j = 0; j < SHARED_PV_COUNT; j++)); do
			name=$(printf 'kdefer-shared-%03d' "$j")
			pvdir="$DIR/shared/$name"
			mkdir -p "$pvdir"
			pv_yaml "$name" kdefer-shared "$pvdir" kubernetes.io/os linux
		done
		node_ctx 1
	} >"$DIR/conf/storage.yaml"
	# up always reaches here with an empty etcd: create is one request per
	# object (apply needs three and the OpenAPI document: seconds on a busy host).
	kubectl create --validate=false -f "$DIR/conf/storage.yaml" >/dev/null 2>&1 ||
		kubectl apply --validate=false -f "$DIR/conf/storage.yaml" >/dev/null
}

# recycle_pvs: every Released PV of the class gets its directory emptied and its claimRef removed (Available again).
recycle_pvs() {
	local name phase path n=0
	while read -r name phase path; do
		[ "$phase" = Released ] || continue
		case "$path" in "$DIR"/pv/* | "$DIR"/n[0-9]*/pv/* | "$DIR"/shared/*) ;; *) continue ;; esac
		find "$path" -mindepth 1 -delete
		kubectl patch pv "$name" --type json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null
		n=$((n + 1))
	done < <(kubectl get pv -l kdefer.io/local-pv=true -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.spec.local.path}{"\n"}{end}')
	log "recycled $n released PV(s)"
}
