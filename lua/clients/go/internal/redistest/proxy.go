package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a server. It can hold what the server
// sends (a network that stalls replies after Redis ran the command), and
// delay each new connection's set-up (a busy host, a slow handshake).
type Proxy struct {
	listener     net.Listener
	target       string
	mu           sync.Mutex
	hold         bool
	released     *sync.Cond
	connectDelay time.Duration
	conns        []net.Conn
}

// StartProxy listens on a random port, forwarding to target; closed at the
// end of the test.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{listener: l, target: target}
	p.released = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Hold stops forwarding what the server sends, until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	p.hold = true
	p.mu.Unlock()
}

// Release forwards again what the server sent.
func (p *Proxy) Release() {
	p.mu.Lock()
	p.hold = false
	p.released.Broadcast()
	p.mu.Unlock()
}

// SetConnectDelay delays each new connection by d before it reaches the
// server.
func (p *Proxy) SetConnectDelay(d time.Duration) {
	p.mu.Lock()
	p.connectDelay = d
	p.mu.Unlock()
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.Release()
	_ = p.listener.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *Proxy) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.forward(client)
	}
}

func (p *Proxy) forward(client net.Conn) {
	p.mu.Lock()
	delay := p.connectDelay
	p.mu.Unlock()
	time.Sleep(delay)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, client, server)
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.hold {
				p.released.Wait()
			}
			p.mu.Unlock()
			if _, werr := client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = client.Close()
}
