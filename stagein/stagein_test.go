package stagein

import (
	"strings"
	"testing"
)

func TestCheckTree(t *testing.T) {
	tests := []struct {
		rels []string
		err  string
	}{
		{[]string{"a", "b/c", "b/d/e"}, ""},
		{[]string{"a", "a/b"}, "both a file and a directory"},
		{[]string{"x/y/z", "x/y"}, "both a file and a directory"},
		{[]string{"f" + TempSuffix}, "partial downloads"},
	}
	for _, tc := range tests {
		var es []entry
		for _, r := range tc.rels {
			es = append(es, entry{rel: r})
		}
		err := checkTree(es)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("checkTree(%q) = %v, want %q", tc.rels, err, tc.err)
		}
	}
}
