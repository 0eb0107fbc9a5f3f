package resolve

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// world is a Source with ClusterDeferPolicies and namespace labels; its
// DeferPolicies are all in namespace "ns".
type world struct {
	source
	cluster []v1.ClusterDeferPolicy
	ns      map[string]map[string]string
}

func (w world) ClusterPolicies(context.Context) ([]v1.ClusterDeferPolicy, error) {
	return w.cluster, nil
}

func (w world) NamespaceLabels(_ context.Context, ns string) (map[string]string, error) {
	return w.ns[ns], nil
}

func clusterPolicy(name string, nsSel map[string]string, jobSel map[string]string, locked ...v1.LockedField) v1.ClusterDeferPolicy {
	p := v1.ClusterDeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: nsSel}
	if jobSel != nil {
		p.Spec.JobSelector = &metav1.LabelSelector{MatchLabels: jobSel}
	}
	p.Spec.Locked = locked
	p.Spec.StageOut = &v1.StageOut{URL: "s3://platform/" + name + "/{pod}/"}
	p.Spec.Credentials = &corev1.LocalObjectReference{Name: "platform-s3"}
	return p
}

func TestPolicyCluster(t *testing.T) {
	physics := map[string]string{"site": "physics"}
	plat := clusterPolicy("plat", physics, nil)
	platLocked := clusterPolicy("plat-locked", physics, nil, v1.LockedStageOut)
	gpu := clusterPolicy("gpu", physics, map[string]string{"kind": "gpu"})
	team := policy("team", false)
	open := policy("open", true)
	locked := policy("locked", true, v1.LockedStageOut)
	nsLabels := map[string]map[string]string{"ns": physics, "other": {"site": "chemistry"}}
	w := func(ps source, cs ...v1.ClusterDeferPolicy) world {
		return world{source: ps, cluster: cs, ns: nsLabels}
	}

	cases := []struct {
		name     string
		world    world
		subject  Subject
		want     string // the applied policy
		cluster  bool   // it is a ClusterDeferPolicy
		selected string
		wantErr  []string
	}{
		{name: "plain Job in a selected namespace", world: w(source{team}, plat),
			subject: Subject{Namespace: "ns"}, want: "plat", cluster: true, selected: "plat"},
		{name: "namespace not selected", world: w(source{}, plat),
			subject: Subject{Namespace: "other"}},
		{name: "jobSelector selects the Job", world: w(source{}, gpu),
			subject: Subject{Namespace: "ns", Labels: map[string]string{"kind": "gpu"}}, want: "gpu", cluster: true, selected: "gpu"},
		{name: "jobSelector leaves the Job out", world: w(source{}, gpu),
			subject: Subject{Namespace: "ns", Labels: map[string]string{"kind": "cpu"}}},
		{name: "skip opts out of an unlocked policy", world: w(source{}, plat),
			subject: Subject{Namespace: "ns", Skip: true}},
		{name: "a locked policy refuses skip", world: w(source{}, platLocked),
			subject: Subject{Namespace: "ns", Skip: true},
			wantErr: []string{`annotation kdefer.io/skip: opts out, but ClusterDeferPolicy "plat-locked" selects namespace ns and locks stageOut`, "fix: remove the annotation"}},
		{name: "a named DeferPolicy wins over an unlocked one", world: w(source{team}, plat),
			subject: Subject{Namespace: "ns", Named: "team"}, want: "team", selected: "plat"},
		{name: "a locked one refuses a named DeferPolicy", world: w(source{team}, platLocked),
			subject: Subject{Namespace: "ns", Named: "team"},
			wantErr: []string{`annotation kdefer.io/policy: names DeferPolicy "team", but ClusterDeferPolicy "plat-locked" selects namespace ns`}},
		{name: "the namespace's default wins over an unlocked one", world: w(source{open}, plat),
			subject: Subject{Namespace: "ns"}, want: "open", selected: "plat"},
		{name: "a locked one wins over the namespace's unlocked default", world: w(source{open}, platLocked),
			subject: Subject{Namespace: "ns"}, want: "plat-locked", cluster: true, selected: "plat-locked"},
		{name: "the namespace's locked default wins over a locked one", world: w(source{locked}, platLocked),
			subject: Subject{Namespace: "ns"}, want: "locked", selected: "plat-locked"},
		{name: "two select the Job", world: w(source{}, plat, gpu),
			subject: Subject{Namespace: "ns", Labels: map[string]string{"kind": "gpu"}},
			wantErr: []string{"2 ClusterDeferPolicies select this Job of namespace ns: gpu, plat; fix: narrow their spec.namespaceSelector or spec.jobSelector"}},
		{name: "two, but the jobSelector leaves one out", world: w(source{}, plat, gpu),
			subject: Subject{Namespace: "ns"}, want: "plat", cluster: true, selected: "plat"},
		{name: "arming: the recorded one", world: w(source{}, plat, gpu),
			subject: Subject{Namespace: "ns", Armed: true, Recorded: "gpu"}, want: "gpu", cluster: true, selected: "gpu"},
		{name: "arming: none recorded", world: w(source{}, plat),
			subject: Subject{Namespace: "ns", Armed: true}},
		{name: "arming: skip is the run's business then", world: w(source{}, platLocked),
			subject: Subject{Namespace: "ns", Armed: true, Recorded: "plat-locked", Skip: true}, want: "plat-locked", cluster: true, selected: "plat-locked"},
		{name: "arming: the recorded one no longer selects the namespace", world: w(source{}, plat),
			subject: Subject{Namespace: "other", Armed: true, Recorded: "plat"},
			wantErr: []string{`annotation kdefer.io/cluster-policy: admission armed the pod with ClusterDeferPolicy "plat", which no longer exists or no longer selects namespace other`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Policy(context.Background(), tc.world, tc.subject)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Policy = %q, want an error", got.Name())
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name() != tc.want || (got.Cluster != nil) != tc.cluster || got.Selected != tc.selected {
				t.Errorf("Policy = %q (cluster %v, selected by %q), want %q (cluster %v, selected by %q)",
					got.Name(), got.Cluster != nil, got.Selected, tc.want, tc.cluster, tc.selected)
			}
		})
	}

	// A ClusterDeferPolicy's spec is its own, credentials and all.
	got, err := Policy(context.Background(), w(source{}, plat), Subject{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Spec().Credentials; c == nil || c.Name != "platform-s3" || got.Spec().StageOut.URL != "s3://platform/plat/{pod}/" {
		t.Errorf("spec of the applied ClusterDeferPolicy = %+v, want its own", got.Spec())
	}
	_, err = Policy(context.Background(), w(source{}, plat, gpu), Subject{Namespace: "ns", Labels: map[string]string{"kind": "gpu"}})
	if ae := (*AmbiguousClusterError)(nil); !errors.As(err, &ae) {
		t.Errorf("two policies: %v is not an AmbiguousClusterError", err)
	}
}
