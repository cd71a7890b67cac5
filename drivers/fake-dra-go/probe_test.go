package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestRegisteredAnswersOnlyForASocketNamedThroughTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	env := func(name string) string {
		if name == "POD_UID" {
			return "uid-1"
		}
		return ""
	}
	path := filepath.Join(dir, "driver-uid-1-reg.sock")
	flag := "--socket=" + filepath.Join(dir, "driver-${POD_UID}-reg.sock")
	if code := registered([]string{flag}, env); code == 0 {
		t.Fatalf("registered before the socket exists: exit %d", code)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := registered([]string{flag}, env); code == 0 {
		t.Fatalf("a regular file %s counted as registered: exit %d", path, code)
	}
	_ = os.Remove(path)
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	if code := registered([]string{flag}, env); code != 0 {
		t.Fatalf("socket %s listening, yet exit %d", path, code)
	}
	if code := registered(nil, env); code == 0 {
		t.Fatalf("no --socket given, yet exit %d", code)
	}
}
