//go:build tools

package main

import (
	_ "github.com/coreos/go-systemd/v22/activation"
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/cyphar/filepath-securejoin"
	_ "github.com/opencontainers/cgroups/devices"
	_ "github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/specconv"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/seccomp/libseccomp-golang"
	_ "github.com/vishvananda/netlink"
	_ "golang.org/x/net/bpf"
	_ "golang.org/x/sys/unix"
)
