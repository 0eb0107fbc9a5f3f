package drivers

import (
	"context"
	"net"
	"time"
)

// idleDialer dials connections that fail a Read or Write making no progress
// for idle: a server or network that stalls mid-body would otherwise hang a
// stage step until the pod's deadline (ResponseHeaderTimeout only covers the
// wait for headers). The failure is a timeout, so it is retried.
func idleDialer(idle time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if idle <= 0 {
		return d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &idleConn{Conn: c, idle: idle}, nil
	}
}

type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// Write extends the read deadline too: the transport's read loop parks a
// Read on an idle pooled connection, and a request sent on it must give the
// response a full idle period.
func (c *idleConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
