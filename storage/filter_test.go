package storage

import "testing"

func TestFilter(t *testing.T) {
	tests := []struct {
		include, exclude []string
		rel              string
		want             bool
	}{
		{nil, nil, "a/b.txt", true},
		{nil, []string{"*.tmp"}, "a/b/c.tmp", false},
		{nil, []string{"*.tmp"}, "a/b/c.tmpx", true},
		{nil, []string{"cache/**"}, "cache/x/y", false},
		{nil, []string{"cache/**"}, "data/cache/x", true},
		{nil, []string{"**/cache/**"}, "data/cache/x", false},
		{[]string{"results/**"}, nil, "results/a/b.root", true},
		{[]string{"results/**"}, nil, "logs/x", false},
		{[]string{"**/*.root"}, nil, "x.root", true},
		{[]string{"**/*.root"}, nil, "a/b/x.root", true},
		{[]string{"a/*.txt"}, nil, "a/b/c.txt", false},
		{[]string{"file?.dat"}, nil, "file1.dat", true},
		{[]string{"file[0-9].dat"}, nil, "dir/file7.dat", true},
		{[]string{"file[!0-9].dat"}, nil, "file7.dat", false},
		{[]string{"*.root"}, []string{"tmp/**"}, "tmp/x.root", false},
		{nil, []string{"a+b(c).txt"}, "a+b(c).txt", false},
		// Braces (issue #16): this matched nothing with the hand-written
		// glob compiler.
		{[]string{"**/*.{root,log}"}, nil, "run/x.root", true},
		{[]string{"**/*.{root,log}"}, nil, "a/b/job.log", true},
		{[]string{"**/*.{root,log}"}, nil, "top.log", true},
		{[]string{"**/*.{root,log}"}, nil, "a/b/job.txt", false},
		{nil, []string{"{cache,tmp}/**"}, "tmp/x", false},
		{nil, []string{"{cache,tmp}/**"}, "data/x", true},
	}
	for _, tc := range tests {
		f, err := NewFilter(tc.include, tc.exclude)
		if err != nil {
			t.Fatalf("NewFilter(%q, %q): %v", tc.include, tc.exclude, err)
		}
		if got := f.Match(tc.rel); got != tc.want {
			t.Errorf("include %q exclude %q: Match(%q) = %v, want %v", tc.include, tc.exclude, tc.rel, got, tc.want)
		}
	}
	for _, bad := range []string{"", "a[", "*.{root,log", "[]", `a\`} {
		if _, err := NewFilter([]string{bad}, nil); err == nil {
			t.Errorf("NewFilter(%q) accepted", bad)
		}
	}
}
