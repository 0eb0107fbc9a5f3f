//go:build linux

package stageout_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/storage"
)

// otherUser reads files it does not own; 65532 is the defer pod's user.
const otherUser = 65532

const envUnreadableDir = "KDEFER_TEST_UNREADABLE_DIR"

// TestRunUnreadableFile: stage-out running as a user that may not read an
// output file (0600, owned by someone else) stores the others, lists the
// file as unsaved naming its own UID, and succeeds. Run as root (whom no
// mode stops), the test writes the file as root and runs the stage-out in a
// copy of the test binary as UID 65532; otherwise it makes its own file 0000.
func TestRunUnreadableFile(t *testing.T) {
	dir := worldTraversable(t)
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	for f, mode := range map[string]os.FileMode{"out/a.dat": 0o644, "out/result.h5": 0o600} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("kdefer "+f), mode); err != nil {
			t.Fatal(err)
		}
	}
	uid := os.Geteuid()
	var got string
	if uid == 0 {
		uid = otherUser
		got = runAs(t, otherUser, dir)
	} else {
		if err := os.Chmod(filepath.Join(dir, "out/result.h5"), 0); err != nil {
			t.Fatal(err)
		}
		got = unreadableRun(dir)
	}
	want := fmt.Sprintf(`ok: stored 1 unsaved [out/result.h5: permission denied (stage-out runs as uid %d, gid %d)]`, uid, gidOf(uid))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stage-out outcome (-want +got):\n%s", diff)
	}
}

func gidOf(uid int) int {
	if uid == otherUser {
		return otherUser
	}
	return os.Getegid()
}

// TestUnreadableChild is the stage-out TestRunUnreadableFile runs as
// another user; it does nothing on its own.
func TestUnreadableChild(t *testing.T) {
	dir := os.Getenv(envUnreadableDir)
	if dir == "" {
		t.Skip("run by TestRunUnreadableFile")
	}
	fmt.Println(unreadableRun(dir))
}

// unreadableRun stages dir out and returns the error's class and message,
// or what was stored and what was not.
func unreadableRun(dir string) string {
	o := opts(dir, "mem://unreadable/", 1)
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		return storage.ClassOf(err).String() + ": " + err.Error()
	}
	var unsaved []string
	for _, f := range res.Manifest.Unsaved {
		unsaved = append(unsaved, f.Path+": "+f.Reason)
	}
	return fmt.Sprintf("ok: stored %d unsaved %v", res.Objects, unsaved)
}

// runAs runs TestUnreadableChild on dir as uid (and gid uid) and returns
// the line it printed.
func runAs(t *testing.T, uid int, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private to root: run a copy.
	bin := filepath.Join(worldTraversable(t), "stageout.test")
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestUnreadableChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envUnreadableDir+"="+dir)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as uid %d: %v\n%s", uid, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "permanent:") || strings.HasPrefix(l, "ok:") || strings.HasPrefix(l, "usage:") || strings.HasPrefix(l, "transient:") {
			return l
		}
	}
	t.Fatalf("child as uid %d printed no result:\n%s", uid, out)
	return ""
}

// worldTraversable returns a temporary directory every user can enter
// (t.TempDir's parent is private to its owner).
func worldTraversable(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kdefer-unreadable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
