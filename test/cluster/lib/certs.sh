# shellcheck shell=bash
# Sourced by cluster.sh: the cluster's certificates and kubeconfigs.

# cert NAME CN O SANS(ext value or "") [CA]: an EC P-256 key and a certificate signed by CA (default ca).
cert() {
	local name=$1 cn=$2 o=$3 sans=$4 ca=${5:-ca} subj ext
	[ -s "$PKI/$name.crt" ] && return 0
	subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o$subj"
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
	ext="$PKI/$name.ext"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$sans" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"
		else echo "extendedKeyUsage=clientAuth"; fi
	} >"$ext"
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$ext"
}

ca() {
	local name=$1 cn=$2
	[ -s "$PKI/$name.crt" ] && return 0
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
	openssl req -x509 -new -key "$PKI/$name.key" -subj "/CN=$cn" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$PKI/$name.crt" 2>/dev/null
}

# pki: the control plane's certificates, then each node's (node_ctx sets the
# names: kubelet-client and kubelet-serving for the first node, with a -nI
# suffix for node I).
pki() {
	local i
	mkdir -p "$PKI"; chmod 700 "$PKI"
	# A node-name change invalidates the node certificates.
	if [ -s "$PKI/node-name" ] && [ "$(cat "$PKI/node-name")" != "$NODE1" ]; then rm -f "$PKI"/kubelet*; fi
	echo "$NODE1" >"$PKI/node-name"
	ca ca kdefer-cluster-ca
	ca front-proxy-ca kdefer-front-proxy-ca
	cert apiserver kube-apiserver "" \
		"IP:127.0.0.1,IP:10.0.0.1,IP:$HOST_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
	# What the apiserver presents to kdefer's webhooks (nodes.sh, admission):
	# kdefer accepts this name only (deploy/helm/local-values.yaml).
	cert apiserver-webhook-client kube-apiserver-webhook-client "" ""
	cert admin kubernetes-admin system:masters ""
	cert controller-manager system:kube-controller-manager "" ""
	cert scheduler system:kube-scheduler "" ""
	for ((i = 1; i <= NODES; i++)); do
		node_ctx "$i"
		cert "kubelet-client$SFX" "system:node:$NODE" system:nodes ""
		cert "kubelet-serving$SFX" "$NODE" "" "IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE"
	done
	node_ctx 1
	cert front-proxy-client front-proxy-client "" "" front-proxy-ca
	if [ ! -s "$PKI/sa.key" ]; then
		openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
		openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
}

kubeconfig() { # FILE CERTNAME
	cat >"$1" <<EOC
apiVersion: v1
kind: Config
clusters:
- name: kdefer
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: kdefer
  context: {cluster: kdefer, user: $2, namespace: default}
current-context: kdefer
EOC
	chmod 600 "$1"
}
