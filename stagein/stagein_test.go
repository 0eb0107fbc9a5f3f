package stagein

import (
	"strings"
	"testing"

	"github.com/kdefer/kdefer/storage"
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
		err := storage.CheckTree(tc.rels, TempSuffix)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("CheckTree(%q) = %v, want %q", tc.rels, err, tc.err)
		}
	}
}
