package v1alpha1

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func TestParseAnnotations(t *testing.T) {
	cases := []struct {
		name string
		in   map[string]string
		want *Annotations
		// wantErrs are substrings, one per expected error, in key order.
		wantErrs []string
	}{
		{name: "none", in: nil, want: &Annotations{}},
		{
			name: "foreign annotations ignored",
			in:   map[string]string{"example.com/x": "y", "kdefer.io/summary": "3/3 staged out"},
			want: &Annotations{},
		},
		{
			name: "everything",
			in: map[string]string{
				AnnotationPolicy:        "default",
				AnnotationStageOut:      "s3://bucket/runs/{namespace}/{job}/{pod}/?endpoint=http://10.88.0.1:9000",
				AnnotationStageOutPath:  "outputs",
				AnnotationInclude:       "*.root, logs/**",
				AnnotationExclude:       "tmp/**",
				AnnotationStageIn:       "s3://bucket/inputs/,file:///data/in/{index}/",
				AnnotationStageInPath:   "in",
				AnnotationCredentials:   "minio",
				AnnotationWorkVolume:    "work",
				AnnotationWorkMountPath: "/work",
				AnnotationWorkSize:      "10Gi",
				AnnotationStorageClass:  "local",
				AnnotationTriggers:      "succeeded, OOMKilled,Evicted",
				AnnotationDeadline:      "1h30m",
				AnnotationSkip:          "false",
				AnnotationRendered:      "v0.1.0",
			},
			want: &Annotations{
				Policy:        "default",
				StageOut:      ptr("s3://bucket/runs/{namespace}/{job}/{pod}/?endpoint=http://10.88.0.1:9000"),
				StageOutPath:  ptr("outputs"),
				Include:       []string{"*.root", "logs/**"},
				Exclude:       []string{"tmp/**"},
				StageIn:       []string{"s3://bucket/inputs/", "file:///data/in/{index}/"},
				StageInPath:   ptr("in"),
				Credentials:   ptr("minio"),
				WorkVolume:    ptr("work"),
				WorkMountPath: ptr("/work"),
				WorkSize:      ptr(resource.MustParse("10Gi")),
				StorageClass:  ptr("local"),
				Triggers:      []Trigger{TriggerSucceeded, TriggerOOMKilled, TriggerEvicted},
				Deadline:      &metav1.Duration{Duration: 90 * time.Minute},
				Rendered:      "v0.1.0",
			},
		},
		{name: "triggers all", in: map[string]string{AnnotationTriggers: "All"}, want: &Annotations{}},
		{name: "skip", in: map[string]string{AnnotationSkip: "true"}, want: &Annotations{Skip: true}},
		{name: "bad trigger", in: map[string]string{AnnotationTriggers: "Succeeded,Exploded"},
			wantErrs: []string{`annotation kdefer.io/triggers: "Exploded" is not a trigger; fix: use "all" or a comma-separated list of Succeeded, Failed`}},
		{name: "all mixed", in: map[string]string{AnnotationTriggers: "all,Failed"},
			wantErrs: []string{`kdefer.io/triggers: "all" cannot be combined`}},
		{name: "bad duration", in: map[string]string{AnnotationDeadline: "3x"},
			wantErrs: []string{`annotation kdefer.io/deadline: "3x" is not a positive duration; fix: use a Go duration such as 30m or 2h`}},
		{name: "negative duration", in: map[string]string{AnnotationDeadline: "-1m"},
			wantErrs: []string{`kdefer.io/deadline: "-1m" is not a positive duration`}},
		{name: "no scheme", in: map[string]string{AnnotationStageOut: "bucket/runs"},
			wantErrs: []string{`annotation kdefer.io/stage-out: "bucket/runs" is not a URL (no scheme); fix: use e.g. s3://`}},
		{name: "unknown scheme", in: map[string]string{AnnotationStageOut: "http://x/y"},
			wantErrs: []string{`has scheme "http"; kdefer understands s3, gs, azblob, file`}},
		{name: "mem scheme", in: map[string]string{AnnotationStageOut: "mem://b/{pod}/"},
			wantErrs: []string{`annotation kdefer.io/stage-out: "mem://b/{pod}/" is in the memory of the stage step, which nothing outlives`}},
		{name: "mem scheme in stage-in", in: map[string]string{AnnotationStageIn: "s3://b/in/,mem://b/in/"},
			wantErrs: []string{`annotation kdefer.io/stage-in: "mem://b/in/" is in the memory of the stage step`}},
		{name: "no bucket", in: map[string]string{AnnotationStageOut: "s3:///runs"},
			wantErrs: []string{`"s3:///runs" names no bucket`}},
		{name: "unknown placeholder", in: map[string]string{AnnotationStageOut: "s3://b/{jobname}/"},
			wantErrs: []string{`uses placeholder {jobname}; known placeholders are {namespace} {job}`}},
		{name: "unterminated placeholder", in: map[string]string{AnnotationStageOut: "s3://b/{job/"},
			wantErrs: []string{`has an unterminated '{'`}},
		{name: "placeholder in bucket", in: map[string]string{AnnotationStageOut: "s3://{namespace}/x"},
			wantErrs: []string{`has placeholders outside the path`}},
		{name: "credentials in URL", in: map[string]string{AnnotationStageOut: "s3://AKIA:secret@b/x"},
			wantErrs: []string{`"s3://***@b/x" holds credentials in the URL; put them in the Secret named by kdefer.io/credentials`}},
		{name: "trigger in stage-in", in: map[string]string{AnnotationStageIn: "s3://b/{trigger}/"},
			wantErrs: []string{`annotation kdefer.io/stage-in: "s3://b/{trigger}/" uses {trigger}`}},
		{name: "stage-in empty list", in: map[string]string{AnnotationStageIn: " , "},
			wantErrs: []string{`kdefer.io/stage-in: holds no URL`}},
		{name: "absolute stage-out path", in: map[string]string{AnnotationStageOutPath: "/out"},
			wantErrs: []string{`annotation kdefer.io/stage-out-path: "/out" is absolute`}},
		{name: "dotdot stage-in path", in: map[string]string{AnnotationStageInPath: "a/../../etc"},
			wantErrs: []string{`kdefer.io/stage-in-path: "a/../../etc" contains '..'`}},
		{name: "bad glob", in: map[string]string{AnnotationInclude: "[abc"},
			wantErrs: []string{`annotation kdefer.io/include: glob "[abc" is malformed`}},
		{name: "unclosed brace", in: map[string]string{AnnotationInclude: "**/*.{root,log"},
			wantErrs: []string{`annotation kdefer.io/include: glob "**/*.{root,log" is malformed`}},
		{name: "brace globs", in: map[string]string{AnnotationInclude: "**/*.{root,log}, logs/**,a\\,b"},
			want: &Annotations{Include: []string{"**/*.{root,log}", "logs/**", "a\\,b"}}},
		{name: "bad volume name", in: map[string]string{AnnotationWorkVolume: "Work_Dir"},
			wantErrs: []string{`annotation kdefer.io/work-volume: "Work_Dir" is not a volume name`}},
		{name: "relative mount path", in: map[string]string{AnnotationWorkMountPath: "work"},
			wantErrs: []string{`annotation kdefer.io/work-mount-path: "work" is not an absolute path`}},
		{name: "bad size", in: map[string]string{AnnotationWorkSize: "lots"},
			wantErrs: []string{`annotation kdefer.io/work-size: "lots" is not a positive quantity; fix: use a size such as 10Gi`}},
		{name: "zero size", in: map[string]string{AnnotationWorkSize: "0"},
			wantErrs: []string{`"0" is not a positive quantity`}},
		{name: "bad secret", in: map[string]string{AnnotationCredentials: "My Secret"},
			wantErrs: []string{`annotation kdefer.io/credentials: "My Secret" is not a Secret name`}},
		{name: "bad policy", in: map[string]string{AnnotationPolicy: "-x"},
			wantErrs: []string{`annotation kdefer.io/policy: "-x" is not a DeferPolicy name`}},
		{name: "bad storage class", in: map[string]string{AnnotationStorageClass: "UPPER"},
			wantErrs: []string{`annotation kdefer.io/storage-class: "UPPER" is not a StorageClass name`}},
		{name: "bad skip", in: map[string]string{AnnotationSkip: "yes please"},
			wantErrs: []string{`annotation kdefer.io/skip: "yes please" is not a boolean`}},
		{name: "empty value", in: map[string]string{AnnotationStageOut: " "},
			wantErrs: []string{`annotation kdefer.io/stage-out: is empty; fix: set a value or remove the annotation`}},
		{
			name: "every problem at once, sorted by key",
			in:   map[string]string{AnnotationDeadline: "soon", AnnotationTriggers: "Boom", AnnotationWorkSize: "x"},
			wantErrs: []string{
				"kdefer.io/deadline:",
				"kdefer.io/triggers:",
				"kdefer.io/work-size:",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAnnotations(tc.in)
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("ParseAnnotations: %v", err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("ParseAnnotations (-want +got):\n%s", diff)
				}
				return
			}
			var errs AnnotationErrors
			if !errors.As(err, &errs) {
				t.Fatalf("ParseAnnotations error = %v, want AnnotationErrors", err)
			}
			if len(errs) != len(tc.wantErrs) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tc.wantErrs), err)
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tc.wantErrs[i]) {
					t.Errorf("error %d = %q, want it to contain %q", i, e.Error(), tc.wantErrs[i])
				}
				if e.Fix == "" {
					t.Errorf("error %d names no fix: %q", i, e.Error())
				}
			}
		})
	}
}

func TestUnknownAnnotations(t *testing.T) {
	got := UnknownAnnotations(map[string]string{
		"kdefer.io/stageout":   "s3://b/x",
		"kdefer.io/summary":    "1/1",
		"kdefer.io/frobnicate": "x",
		"other.io/x":           "y",
	})
	want := []string{
		"annotation kdefer.io/frobnicate is not a kdefer annotation and is ignored",
		"annotation kdefer.io/stageout is not a kdefer annotation and is ignored; did you mean kdefer.io/stage-out?",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UnknownAnnotations (-want +got):\n%s", diff)
	}
}

func FuzzParseAnnotations(f *testing.F) {
	f.Add("kdefer.io/stage-out", "s3://b/{pod}/", "kdefer.io/triggers", "all")
	f.Add("kdefer.io/stage-in", "s3://b/x,file:///y", "kdefer.io/deadline", "30m")
	f.Add("kdefer.io/work-size", "1Gi", "kdefer.io/include", "[a-")
	f.Add("kdefer.io/stage-out", "s3://a@b/{", "kdefer.io/stage-out-path", "../x")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{k1: v1, k2: v2}
		a, err := ParseAnnotations(in)
		if a == nil {
			t.Fatal("ParseAnnotations returned nil Annotations")
		}
		if err != nil {
			var errs AnnotationErrors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %v is not AnnotationErrors", err)
			}
			for _, e := range errs {
				if !strings.HasPrefix(e.Key, AnnotationPrefix) {
					t.Fatalf("error for key %q outside kdefer.io/", e.Key)
				}
			}
		}
		_ = UnknownAnnotations(in)
	})
}
