# shellcheck shell=bash
# Sourced by cluster.sh: the local-PV storage class and each node's PVs.

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
				cat <<EOC
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $name
  labels: {kdefer.io/local-pv: "true"}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: kdefer-local
  volumeMode: Filesystem
  local: {path: $pvdir}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$NODE]}
EOC
			done
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
		case "$path" in "$DIR"/pv/* | "$DIR"/n[0-9]*/pv/*) ;; *) continue ;; esac
		find "$path" -mindepth 1 -delete
		kubectl patch pv "$name" --type json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null
		n=$((n + 1))
	done < <(kubectl get pv -l kdefer.io/local-pv=true -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.spec.local.path}{"\n"}{end}')
	log "recycled $n released PV(s)"
}
