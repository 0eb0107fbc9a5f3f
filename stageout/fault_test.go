package stageout_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
	"github.com/kdefer/kdefer/test/s3server"
)

func faultTree() stagetest.Tree {
	tree := stagetest.Tree{"big/large.bin": storagetest.RandBytes(1, 80<<20+777)}
	for i := range 300 {
		tree[fmt.Sprintf("d%d/f%03d.dat", i%7, i)] = storagetest.RandBytes(uint64(10+i), 64<<10+i)
	}
	return tree
}

func opts(from, to string, attempts int) stageout.Options {
	r := stagetest.FastRetry()
	r.Attempts = attempts
	return stageout.Options{From: from, To: to, Version: "test", TransferOptions: storage.TransferOptions{Retry: r, Log: zerolog.Nop(), Concurrency: 8}}
}

// objects lists keys under the URL's prefix.
func objects(t *testing.T, u string) []string {
	t.Helper()
	loc, err := storage.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	var keys []string
	if err := be.List(context.Background(), loc.Prefix, func(oi storage.ObjectInfo) error {
		keys = append(keys, strings.TrimPrefix(oi.Key, loc.Prefix))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

func countManifests(keys []string) int {
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, stagecontract.ReservedDir) {
			n++
		}
	}
	return n
}

// verify stages the manifest's files in and compares them with tree.
func verify(t *testing.T, u string, tree stagetest.Tree) {
	t.Helper()
	prefixURL, query, _ := strings.Cut(u, "?")
	dst := t.TempDir()
	r := stagetest.FastRetry()
	if _, err := stagein.Run(context.Background(), stagein.Options{From: prefixURL + stagecontract.ManifestKey + "?" + query, To: dst, TransferOptions: storage.TransferOptions{Retry: r, Log: zerolog.Nop()}}); err != nil {
		t.Fatalf("stage-in of the manifest: %v", err)
	}
	got := stagetest.ReadTree(t, dst)
	for k, v := range tree {
		if string(got[k]) != string(v) {
			t.Errorf("object %s differs after the rerun", k)
		}
	}
	if len(got) != len(tree) {
		t.Errorf("stage-in got %d files, want %d", len(got), len(tree))
	}
}

// The server dies in the middle of an upload; the run fails as transient
// and leaves no manifest; after a restart the rerun skips what was stored,
// uploads the rest, and every object is intact with exactly one manifest.
func TestServerKilledMidUpload(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "fault")
	proxy := s3server.NewProxy(t, srv.Addr())
	var once sync.Once
	killed := make(chan struct{})
	proxy.OnBytes(func(total int64) {
		if total > 12<<20 {
			once.Do(func() { go func() { srv.Kill(); close(killed) }() })
		}
	})
	src := t.TempDir()
	tree := faultTree()
	stagetest.MakeTree(t, src, tree)
	u := s3server.S3URL(proxy.Addr(), "fault", "run/")

	_, err := stageout.Run(context.Background(), opts(src, u, 3))
	<-killed
	if err == nil {
		t.Fatal("stage-out succeeded although the server was killed mid-upload")
	}
	if c := storage.ClassOf(err); c != storage.Transient {
		t.Errorf("error class = %v (%v), want transient: a restart can fix it", c, err)
	}
	srv.Restart()
	left := objects(t, u)
	if slices.Contains(left, stagecontract.ManifestKey) || !slices.Contains(left, stagecontract.UncommittedKey) {
		t.Fatalf("after the interrupted run: %s present %v, %s present %v; want only the uncommitted marker",
			stagecontract.ManifestKey, slices.Contains(left, stagecontract.ManifestKey), stagecontract.UncommittedKey, slices.Contains(left, stagecontract.UncommittedKey))
	}
	// A stage-in of the prefix refuses what the interrupted run left.
	r := stagetest.FastRetry()
	if _, err := stagein.Run(context.Background(), stagein.Options{From: u, To: t.TempDir(), TransferOptions: storage.TransferOptions{Retry: r, Log: zerolog.Nop()}}); err == nil || !strings.Contains(err.Error(), "never committed") {
		t.Errorf("stage-in of the interrupted prefix: %v, want it refused as uncommitted", err)
	}
	stored := len(left) - 1 // the marker aside

	res, err := stageout.Run(context.Background(), opts(src, u, 3))
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if res.Objects+res.Skipped != int64(len(tree)) || res.Skipped == 0 || int(res.Skipped) > stored {
		t.Errorf("rerun: objects %d skipped %d (stored before: %d), want skipped in [1,%d] and a sum of %d", res.Objects, res.Skipped, stored, stored, len(tree))
	}
	t.Logf("killed after %d objects were stored; rerun uploaded %d and skipped %d", stored, res.Objects, res.Skipped)
	keys := objects(t, u)
	if n := countManifests(keys); n != 1 {
		t.Errorf("after the rerun: %d objects under %s, want exactly the manifest", n, stagecontract.ReservedDir)
	}
	if len(keys) != len(tree)+1 {
		t.Errorf("after the rerun: %d objects, want %d files + 1 manifest", len(keys), len(tree))
	}
	verify(t, u, tree)
}

// Connections are reset in the middle of requests, both ways; retries
// carry the run through and the data is intact.
func TestConnectionResets(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "resets")
	proxy := s3server.NewProxy(t, srv.Addr())
	proxy.ResetEvery(3, 200<<10) // every third connection dies after 200 KiB
	src := t.TempDir()
	tree := faultTree()
	stagetest.MakeTree(t, src, tree)
	u := s3server.S3URL(proxy.Addr(), "resets", "run/")
	res, err := stageout.Run(context.Background(), opts(src, u, 10))
	if err != nil {
		t.Fatalf("stage-out through a resetting proxy: %v", err)
	}
	if res.Objects != int64(len(tree)) {
		t.Errorf("objects = %d, want %d", res.Objects, len(tree))
	}
	up := proxy.Resets()
	if up == 0 {
		t.Fatalf("the proxy reset no connection: the test tested nothing")
	}
	t.Logf("%d connections reset during the upload", up)
	verify(t, u, tree) // downloads go through the resetting proxy too
	if proxy.Resets() == up {
		t.Errorf("no connection was reset during the download")
	}
	if n := countManifests(objects(t, u)); n != 1 {
		t.Errorf("%d manifests, want 1", n)
	}
}

// Permanent errors fail fast, with the cause and the fix, and no secret.
func TestPermanentErrors(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "perm")
	src := t.TempDir()
	stagetest.MakeTree(t, src, stagetest.Tree{"a": []byte("a")})

	t.Run("NoSuchBucket", func(t *testing.T) {
		_, err := stageout.Run(context.Background(), opts(src, srv.URL("missing-bucket", "p/"), 10))
		if storage.ClassOf(err) != storage.Permanent || !strings.Contains(err.Error(), "missing-bucket") || !strings.Contains(err.Error(), "create the bucket") {
			t.Errorf("err = %v, want a permanent error naming the bucket and the fix", err)
		}
	})
	t.Run("WrongSecret", func(t *testing.T) {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
		_, err := stageout.Run(context.Background(), opts(src, srv.URL("perm", "p/"), 10))
		if storage.ClassOf(err) != storage.Permanent || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("err = %v, want a permanent error naming AWS_SECRET_ACCESS_KEY", err)
		}
		if err != nil && strings.Contains(err.Error(), "wrong-secret-value") {
			t.Errorf("error leaks the secret: %v", err)
		}
	})
	t.Run("UnknownKey", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "nobody")
		_, err := stageout.Run(context.Background(), opts(src, srv.URL("perm", "p/"), 10))
		if storage.ClassOf(err) != storage.Permanent {
			t.Errorf("err = %v, want permanent", err)
		}
	})
}

// A connection that stops moving mid-transfer (a hung server, a
// black-holed network) is abandoned after the idle timeout and retried.
func TestStalledConnection(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "stall")
	proxy := s3server.NewProxy(t, srv.Addr())
	proxy.ResetEvery(3, 200<<10)
	proxy.Stall(true)
	src := t.TempDir()
	tree := stagetest.Tree{}
	for i := range 20 {
		tree[fmt.Sprintf("f%02d", i)] = storagetest.RandBytes(uint64(i), 512<<10)
	}
	stagetest.MakeTree(t, src, tree)
	u := s3server.S3URL(proxy.Addr(), "stall", "run/")
	o := opts(src, u, 10)
	o.IdleTimeout = 300 * time.Millisecond
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("stage-out through stalling connections: %v", err)
	}
	if proxy.Resets() == 0 {
		t.Fatal("no connection stalled: the test tested nothing")
	}
	if res.Objects != int64(len(tree)) {
		t.Errorf("objects = %d, want %d", res.Objects, len(tree))
	}
	proxy.ResetEvery(0, 0)
	verify(t, u, tree)
}

// lostAnswerBackend stores the first Put of every key but answers it with a
// reset connection (the server killed after it wrote the object), and
// refuses the first Stat after that, as a server not back yet does.
type lostAnswerBackend struct {
	storage.Backend
	mu    sync.Mutex
	puts  map[string]int
	stats map[string]int
}

func (b *lostAnswerBackend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	crc, err := b.Backend.Put(ctx, key, src, size, opts)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.puts[key]++; err == nil && b.puts[key] == 1 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return crc, err
}

func (b *lostAnswerBackend) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	b.mu.Lock()
	lost := b.puts[key] > 0
	if lost {
		b.stats[key]++
	}
	first := lost && b.stats[key] == 1
	b.mu.Unlock()
	if first {
		return storage.ObjectInfo{}, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return b.Backend.Stat(ctx, key)
}

// A write whose answer was lost is not written again when the look before
// the retry fails too (the server still down): the next attempt looks
// again and finds the object stored, instead of writing it blind.
func TestLostAnswerNotWrittenTwice(t *testing.T) {
	const u = "mem://lostanswer/run/"
	mem, _ := storagetest.Open(t, u)
	be := &lostAnswerBackend{Backend: mem, puts: map[string]int{}, stats: map[string]int{}}
	src := t.TempDir()
	tree := stagetest.Tree{"a.dat": storagetest.RandBytes(1, 100<<10), "b.dat": storagetest.RandBytes(2, 7)}
	stagetest.MakeTree(t, src, tree)
	o := outOpts(be, src, u)
	o.Retry.Attempts = 5
	if _, err := stageout.Run(context.Background(), o); err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	for name := range tree {
		if n := be.puts["run/"+name]; n != 1 {
			t.Errorf("%s written %d times, want once: the retry wrote it again although it was stored", name, n)
		}
	}
	dst := t.TempDir()
	if _, err := stagein.Run(context.Background(), inOpts(mem, u+stagecontract.ManifestKey, dst)); err != nil {
		t.Fatalf("stage-in of the manifest: %v", err)
	}
	if got := stagetest.ReadTree(t, dst); !reflect.DeepEqual(got, tree) {
		t.Errorf("stage-in got %d files, not the %d staged out", len(got), len(tree))
	}
}
