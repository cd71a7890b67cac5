// Command socket-relay runs in a node agent's pod and lets the suite reach a DRA driver's kubelet-plugin sockets
// on a node whose file system is not the suite's machine's. The suite reaches it through a port-forward.
//
// Each connection starts with one line naming a socket by its path on the node; the relay answers "ok" and then
// copies bytes both ways between the connection and that socket, or answers "error: <why>" and closes. Only
// sockets under the -allow directories can be named: the agent sees the node's whole root file system, and a
// relay to, say, the container runtime's socket would hand out far more than the driver's sockets.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// headerTimeout bounds how long a connection may take to name its socket (one short line from the suite).
const headerTimeout = 10 * time.Second

func main() {
	port := flag.Int("port", 0, "TCP port to listen on, on the pod's loopback addresses only")
	root := flag.String("root", "/host", "where the node's root file system is mounted in this container")
	allow := flag.String("allow", "", "comma-separated node directories whose sockets may be relayed")
	flag.Parse()
	var allowed []string
	for _, dir := range strings.Split(*allow, ",") {
		if dir = strings.TrimSpace(dir); dir != "" {
			allowed = append(allowed, filepath.Clean(dir))
		}
	}
	if *port <= 0 || len(allowed) == 0 {
		fmt.Fprintln(os.Stderr, "socket-relay: -port and -allow are required")
		os.Exit(2)
	}
	// Loopback only: a port-forward reaches it there, while other pods on the cluster network cannot.
	listener, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "socket-relay: %v\n", err)
		os.Exit(1)
	}
	if six, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", *port)); err == nil {
		go serve(six, *root, allowed)
	}
	fmt.Printf("listening on port %d for sockets under %s\n", *port, strings.Join(allowed, ", "))
	serve(listener, *root, allowed)
}

func serve(listener net.Listener, root string, allowed []string) {
	for {
		conn, err := listener.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "socket-relay: accept: %v\n", err)
			os.Exit(1)
		}
		go relay(conn, root, allowed)
	}
}

func relay(conn net.Conn, root string, allowed []string) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(headerTimeout))
	reader := bufio.NewReader(conn)
	line, err := reader.ReadString('\n')
	if err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	path := filepath.Clean(strings.TrimSpace(line))
	if !permitted(path, allowed) {
		fmt.Fprintf(conn, "error: %s is not under %s\n", path, strings.Join(allowed, ", "))
		return
	}
	target, err := dialUnix(filepath.Join(root, path))
	if err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		return
	}
	defer target.Close()
	if _, err := io.WriteString(conn, "ok\n"); err != nil {
		return
	}
	var done sync.WaitGroup
	done.Add(2)
	go func() {
		defer done.Done()
		_, _ = io.Copy(target, reader)
		_ = target.(*net.UnixConn).CloseWrite()
	}()
	go func() {
		defer done.Done()
		_, _ = io.Copy(conn, target)
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	done.Wait()
}

// maxSocketPath is the longest path connect(2) takes for a unix socket (sun_path holds 108 bytes with its NUL).
const maxSocketPath = 107

// dialUnix connects to the socket at `path`. Under the mount of the node's root a path can outgrow sun_path
// (a kubelet root's registration sockets named with a pod UID come close already); it is then reached through
// its directory's descriptor, whose /proc path is short.
func dialUnix(path string) (net.Conn, error) {
	if len(path) <= maxSocketPath {
		return net.Dial("unix", path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}

// permitted reports whether the absolute, cleaned `path` lies under one of the allowed directories.
func permitted(path string, allowed []string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	for _, dir := range allowed {
		if path == dir || strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
