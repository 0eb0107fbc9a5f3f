package storage

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUnreadable checks the message stage-out gives for a file it may not
// read, from injected errors: the unit tests may run as root, for whom no
// file mode makes a file unreadable (stageout's TestRunUnreadableFile reads
// a real one as another user).
func TestUnreadable(t *testing.T) {
	type result struct {
		Msg   string
		Class Class
		Perm  bool // errors.Is(err, fs.ErrPermission) still holds
	}
	eacces := &fs.PathError{Op: "openat", Path: "out/result.h5", Err: syscall.EACCES}
	cases := map[string]struct {
		op       string
		uid, gid int
		err      error
		want     result
	}{
		"EACCES opening a file": {
			op: `open "out/result.h5"`, uid: 65532, gid: 65532, err: eacces,
			want: result{Class: Permanent, Perm: true,
				Msg: `open "out/result.h5": openat out/result.h5: permission denied (stage-out runs as uid 65532, gid 65532) (fix: ` + UnreadableFix + ")"},
		},
		"fs.ErrPermission reading a directory, run as the pod's user": {
			op: `walk "out"`, uid: 1000, gid: 2000, err: &fs.PathError{Op: "open", Path: "out", Err: fs.ErrPermission},
			want: result{Class: Permanent, Perm: true,
				Msg: `walk "out": open out: permission denied (stage-out runs as uid 1000, gid 2000) (fix: ` + UnreadableFix + ")"},
		},
		"EPERM": {
			op: `open "a"`, uid: 65532, gid: 65532, err: &fs.PathError{Op: "openat", Path: "a", Err: syscall.EPERM},
			want: result{Class: Permanent, Perm: true,
				Msg: `open "a": openat a: operation not permitted (stage-out runs as uid 65532, gid 65532) (fix: ` + UnreadableFix + ")"},
		},
		"other errors as WithOp has them": {
			op: `open "a"`, uid: 65532, gid: 65532, err: &fs.PathError{Op: "openat", Path: "a", Err: syscall.EIO},
			want: result{Class: Transient, Msg: `open "a": openat a: input/output error`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Unreadable(tc.op, tc.uid, tc.gid, tc.err)
			got := result{Msg: err.Error(), Class: ClassOf(err), Perm: errors.Is(err, fs.ErrPermission)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Unreadable (-want +got):\n%s", diff)
			}
		})
	}
}
