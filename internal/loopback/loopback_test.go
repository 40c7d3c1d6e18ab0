package loopback

import (
	"errors"
	"testing"
)

func TestIsHostHeader(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1:8080":       true,
		"127.0.0.1":            true,
		"127.1.2.3:80":         true,
		"localhost:8080":       true,
		"localhost":            true,
		"[::1]:8080":           true,
		"[::1]":                true,
		"":                     false,
		"evil.example.com":     false,
		"evil.example.com:80":  false,
		"localhost.evil.com":   false,
		"10.0.0.1:8080":        false,
		"0.0.0.0:8080":         false,
		"[::]:8080":            false,
		"127.0.0.1.nip.io:80":  false,
		"LOCALHOST.:8080":      false,
		"[::ffff:10.0.0.1]:80": false,
	} {
		if got := IsHostHeader(h); got != want {
			t.Errorf("IsHostHeader(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestIsHost(t *testing.T) {
	for h, want := range map[string]bool{"::1": true, "127.0.0.1": true, "localhost": true, "::": false, "example.com": false, "[::1]": false} {
		if got := IsHost(h); got != want {
			t.Errorf("IsHost(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestListen(t *testing.T) {
	l, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if l, err := Listen(addr, false); !errors.Is(err, ErrNotLoopback) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Listen(%q, false): %v, want ErrNotLoopback", addr, err)
		}
	}
	if _, err := Listen("127.0.0.1", false); err == nil {
		t.Error("Listen without a port: no error")
	}
	l, err = Listen("0.0.0.0:0", true)
	if err != nil {
		t.Fatalf("Listen(0.0.0.0:0, allowRemote): %v", err)
	}
	l.Close()
}
