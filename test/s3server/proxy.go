package s3server

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 that can cut connections: with
// ResetEvery(n), every n-th connection is reset (RST) after it has carried
// ResetAfter bytes (both directions), the way a flaky network or a restarting
// load balancer does.
type Proxy struct {
	l       net.Listener
	target  string
	conns   atomic.Int64
	resets  atomic.Int64
	upBytes atomic.Int64
	every   atomic.Int64
	after   atomic.Int64
	stall   atomic.Bool
	onBytes func(total int64)
	mu      sync.Mutex
	closed  bool
	wg      sync.WaitGroup
	liveMu  sync.Mutex
	live    map[net.Conn]struct{}
}

// NewProxy listens on a random 127.0.0.1 port and forwards to target.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target, live: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// ResetEvery makes every n-th new connection reset after `after` client
// bytes (n = 0: never).
func (p *Proxy) ResetEvery(n, after int64) { p.every.Store(n); p.after.Store(after) }

// Stall makes the connections ResetEvery selects stop forwarding (and stay
// open) instead of resetting: a hung server or a black-holed network.
func (p *Proxy) Stall(on bool) { p.stall.Store(on) }

// OnBytes calls fn with the running total of client bytes (set before use).
func (p *Proxy) OnBytes(fn func(total int64)) { p.onBytes = fn }

// Resets is the number of connections reset so far.
func (p *Proxy) Resets() int64 { return p.resets.Load() }

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.l.Close()
	p.liveMu.Lock()
	for c := range p.live {
		c.Close()
	}
	p.liveMu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	if add {
		p.live[c] = struct{}{}
	} else {
		delete(p.live, c)
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		n := p.conns.Add(1)
		reset := false
		if every := p.every.Load(); every > 0 && n%every == 0 {
			reset = true
		}
		p.wg.Add(1)
		go p.handle(c, reset)
	}
}

func (p *Proxy) handle(c net.Conn, reset bool) {
	defer p.wg.Done()
	defer c.Close()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		// Upstream down: reset the client, as a dead server's host would.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return
	}
	defer u.Close()
	p.track(c, true)
	p.track(u, true)
	defer p.track(c, false)
	defer p.track(u, false)
	var carried atomic.Int64 // bytes both ways on this connection
	limit := p.after.Load()
	var once sync.Once
	cut := func() {
		once.Do(func() {
			p.resets.Add(1)
			for _, x := range []net.Conn{c, u} {
				if tc, ok := x.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // close sends RST
				}
				x.Close()
			}
		})
	}
	pipe := func(dst, src net.Conn, up bool, done chan<- struct{}) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if reset && carried.Add(int64(n)) > limit {
					if p.stall.Load() {
						p.resets.Add(1)
						// Swallow everything until the peer gives up.
						for {
							if _, err := src.Read(buf); err != nil {
								return
							}
						}
					}
					cut()
					return
				}
				if up {
					total := p.upBytes.Add(int64(n))
					if p.onBytes != nil {
						p.onBytes(total)
					}
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if t, ok := dst.(*net.TCPConn); ok {
					_ = t.CloseWrite()
				}
				return
			}
		}
	}
	done := make(chan struct{}, 2)
	go pipe(u, c, true, done)
	go pipe(c, u, false, done)
	<-done
	<-done
}
