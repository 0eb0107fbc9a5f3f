package nodelogs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The kubelet removes a stopped container's logs at once, at a moment
// nobody chooses. With no resync to fall back on, the watcher must have
// linked the file at its creation: then every line written is served,
// those written after the removal too (the runtime's fd and the link keep
// the inode).
func TestRaceWriterAndKubelet(t *testing.T) {
	s := newSpool(t, time.Hour)
	run(t, s)
	for i := range 6 {
		p := testPod(fmt.Sprintf("p%d", i))
		s.Keep(p) // before the kubelet creates the pod's log dir
		lines := 50 + rand.IntN(150)
		// Even pods: removed right after the last write. Odd ones: removed
		// while the writer goes on writing to its fd.
		afterLast := i%2 == 0
		// The kubelet makes the pod's dir, then the container's; the runtime
		// creates the file: each may come before or after the watch on its
		// parent.
		if err := os.Mkdir(filepath.Join(s.PodLogsDir, p.dirName()), 0o755); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		c := newContainer(t, s, p)
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		c.open("0.log")
		wrote := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(wrote)
			for n := range lines {
				c.line([]string{"stdout", "stderr"}[n%2], "F", fmt.Sprintf("line %d of %d", n, lines))
				time.Sleep(time.Millisecond)
			}
		})
		wg.Go(func() {
			if afterLast {
				<-wrote
			} else {
				time.Sleep(time.Duration(50+rand.IntN(lines-50+1)) * time.Millisecond)
			}
			if err := os.RemoveAll(filepath.Join(s.PodLogsDir, p.dirName())); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		c.close()
		checkLog(t, s, p, mainLog, c.take())
	}
}
