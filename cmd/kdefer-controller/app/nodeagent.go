package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/certs"
	"github.com/kdefer/kdefer/controller/logsendpoint"
	"github.com/kdefer/kdefer/nodelogs"
	"github.com/kdefer/kdefer/stagecontract"
)

// The node agent's ClusterRole (deploy/node-agent/role.yaml): it watches
// the pods of its node, reads the runs their defer pods serve and reviews
// their tokens. No pods/log, no Secrets, no writes.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// NodeAgentOptions configure kdefer's node agent (kdefer-controller
// node-agent, a DaemonSet): it keeps the log files of kdefer's pods on its
// node (nodelogs.Spool) and serves them to their defer pods there
// (logsendpoint.Server), so a log outlives the kubelet's removal of a
// deleted or evicted pod's containers.
type NodeAgentOptions struct {
	// NodeName is the agent's node (the downward API's spec.nodeName).
	NodeName string
	// BindAddress is host:port of the logs endpoint (the node's address:
	// defer pods reach it there, and on a host network each node's agent
	// needs an address of its own).
	BindAddress string
	// CertDir holds tls.crt and tls.key (NodeAgentCertSecret), reloaded
	// when they change.
	CertDir string
	// PodLogsDir is the kubelet's podLogsDir and SpoolDir the spool, on
	// the same mount (hard links cannot cross mounts).
	PodLogsDir, SpoolDir string
	// Namespaces, when set, are the only namespaces whose pods the agent
	// keeps logs of (a namespaced install, as the controller's): it lists
	// and watches pods there only, which is all its Roles allow, and the
	// spool holds no other pod, so it serves no other.
	Namespaces Namespaces
	Log        logr.Logger
}

// RunNodeAgent runs the node agent until ctx ends.
func RunNodeAgent(ctx context.Context, cfg *rest.Config, o NodeAgentOptions) error {
	if o.NodeName == "" || o.BindAddress == "" || o.PodLogsDir == "" || o.SpoolDir == "" {
		return errors.New("node agent: --node-name, --bind-address, --pod-logs-dir and --spool-dir are required")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("make the node agent's clientset: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return fmt.Errorf("make the node agent's client: %w", err)
	}
	spool := &nodelogs.Spool{PodLogsDir: o.PodLogsDir, Dir: o.SpoolDir, Log: o.Log.WithName("spool")}
	pods, err := watchKeptPods(ctx, cs, o.NodeName, o.Namespaces, spool, o.Log)
	if err != nil {
		return err
	}
	cw, err := certwatcher.New(filepath.Join(o.CertDir, certs.CertKey), filepath.Join(o.CertDir, certs.PrivKeyKey))
	if err != nil {
		return fmt.Errorf("load the node agent's certificate: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(stagecontract.LogsPath, &logsendpoint.Server{Client: c, Reader: c, Source: spoolSource{spool}, Log: o.Log.WithName("logs")})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !pods() {
			http.Error(w, "pods not synced", http.StatusServiceUnavailable)
		}
	})
	srv := &http.Server{Addr: o.BindAddress, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	srv.TLSConfig = tlsServerConfig(cw)
	ln, err := net.Listen("tcp", o.BindAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.BindAddress, err)
	}
	errc := make(chan error, 3)
	go func() { errc <- cw.Start(ctx) }()
	go func() { errc <- spool.Run(ctx) }()
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	o.Log.Info("serve logs", "node", o.NodeName, "address", o.BindAddress, "podLogsDir", o.PodLogsDir, "spool", o.SpoolDir, "namespaces", o.Namespaces.String())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// watchKeptPods keeps the logs of kdefer's pods on node: the pods it
// rendered and its defer pods (for the stage-logs sidecar), from the
// moment the informer sees them until they are deleted (released); what
// the spool holds of pods deleted while the agent was away (or of
// namespaces it no longer serves) is pruned once every informer has
// synced. One informer for every namespace, or one per namespace of a
// namespaced install (an informer lists one namespace or all). It returns
// whether they have synced.
func watchKeptPods(ctx context.Context, cs kubernetes.Interface, node string, namespaces Namespaces, spool *nodelogs.Spool, log logr.Logger) (func() bool, error) {
	scopes := []string{metav1.NamespaceAll}
	if len(namespaces) > 0 {
		scopes = namespaces
	}
	keep := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			spool.Keep(nodelogs.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID})
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    keep,
		UpdateFunc: func(_, obj any) { keep(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				if err := spool.Forget(p.UID); err != nil {
					log.Error(err, "remove a released pod's logs", "pod", p.Namespace+"/"+p.Name)
				}
			}
		},
	}
	var infs []toolscache.SharedIndexInformer
	for _, ns := range scopes {
		f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
				o.LabelSelector = v1.LabelManaged
			}))
		inf := f.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("watch pods in %q: %w", ns, err)
		}
		f.Start(ctx.Done())
		infs = append(infs, inf)
	}
	synced := func() bool {
		for _, inf := range infs {
			if !inf.HasSynced() {
				return false
			}
		}
		return true
	}
	go func() {
		if !toolscache.WaitForCacheSync(ctx.Done(), synced) {
			return
		}
		kept := map[types.UID]bool{}
		for _, inf := range infs {
			for _, obj := range inf.GetStore().List() {
				kept[obj.(*corev1.Pod).UID] = true
			}
		}
		if err := spool.Prune(func(uid types.UID) bool { return kept[uid] }); err != nil {
			log.Error(err, "prune the logs of pods released while the agent was away")
		}
	}()
	return synced, nil
}

// spoolSource serves the spool's logs, a log it lacks as 404 with why.
type spoolSource struct{ s *nodelogs.Spool }

func (s spoolSource) Open(ctx context.Context, pod *corev1.Pod, ref stagecontract.LogRef) (io.ReadCloser, error) {
	rc, err := s.s.Open(ctx, pod, ref)
	if errors.Is(err, nodelogs.ErrNoLog) {
		return nil, logsendpoint.NotFound("%v", err)
	}
	return rc, err
}

// tlsServerConfig serves cw's certificate, reloaded as it rotates; HTTP/1.1
// only, as the metrics server (MetricsOptions).
func tlsServerConfig(cw *certwatcher.CertWatcher) *tls.Config {
	return &tls.Config{GetCertificate: cw.GetCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}
