# shellcheck shell=bash
# Sourced by cluster.sh: the images (no registry: tarballs imported into every
# node's containerd).

PAUSE_IMAGE=$(cat "$IMAGES_DIR/pause.ref" 2>/dev/null || echo kdefer.io/pause:1.0)

# ensure_images builds the images when one is missing (kdefer's own only once
# its cmd package exists). Rebuilding after a code change is `make images`.
ensure_images() {
	local n
	if [ ! -s "$IMAGES_DIR/pause.tar" ] || [ ! -s "$IMAGES_DIR/busybox.tar" ]; then
		log "building the pause and busybox images into $IMAGES_DIR"
		(cd "$REPO" && go run ./test/images --out "$IMAGES_DIR" --only pause,busybox) >&2
	fi
	# kdefer's own: a compile error in code under work must not stop the cluster.
	# KDEFER_CLUSTER_KDEFER_IMAGES=0 leaves them out: the e2e tier pulls them
	# from its test registry, and building them here cost ~40 s it never used.
	for n in kdefer-stage kdefer-controller; do
		[[ ${KDEFER_CLUSTER_KDEFER_IMAGES:-1} == 1 ]] || break
		ls "$REPO/cmd/$n/"*.go >/dev/null 2>&1 || continue
		[ -s "$IMAGES_DIR/$n.tar" ] && continue
		log "building the $n image into $IMAGES_DIR"
		(cd "$REPO" && go run ./test/images --out "$IMAGES_DIR" --only "$n") >&2 ||
			log "WARNING: building the $n image failed; the cluster starts without it (make images)"
	done
	PAUSE_IMAGE=$(cat "$IMAGES_DIR/pause.ref")
}

# load_images [FILE...]: imports into every running node's containerd the
# tarballs whose content changed since that node's last import.
load_images() {
	local i
	for ((i = 1; i <= $(running_nodes); i++)); do
		node_ctx "$i"
		if ((i > 1)) && ! alive "containerd$SFX"; then log "node $NODE: containerd not running, images not imported"; continue; fi
		load_node_images "$@"
	done
	node_ctx 1
}

# images_present STAMP: true when every image name listed in STAMP (after its
# first line, the tarball's digest) is in the current node's containerd; a
# stamp from before the names were recorded lists none and counts as absent.
images_present() {
	local names have n
	names=$(tail -n +2 "$1")
	[ -n "$names" ] || return 1
	have=$(ctr_ images ls -q)
	for n in $names; do grep -qxF "$n" <<<"$have" || return 1; done
}

# load_node_images [FILE...]: load_images for the current node.
load_node_images() {
	local files=("$@") f sum stamp out
	[ ${#files[@]} -gt 0 ] || files=("$IMAGES_DIR"/*.tar)
	mkdir -p "$NDIR/containerd/imported"
	for f in "${files[@]}"; do
		[ -f "$f" ] || continue
		sum=$(sha256sum "$f" | cut -c1-64)
		stamp="$NDIR/containerd/imported/$(basename "$f").sha256"
		# The stamp is not enough: the kubelet's image GC removes unused
		# images under disk pressure (seen: the pause image went after a run
		# that filled the disk, and every later pod failed to get a sandbox),
		# so the image names the import printed must still be there.
		if [ "$(head -1 "$stamp" 2>/dev/null)" = "$sum" ] && images_present "$stamp"; then continue; fi
		out=$(ctr_ images import --snapshotter overlayfs "$f") || die "importing $f into $NODE failed"
		{ echo "$sum"; awk '$1 == "unpacking" { print $2 }' <<<"$out"; } >"$stamp"
		log "imported $(basename "$f")${SFX:+ into $NODE}"
	done
}
