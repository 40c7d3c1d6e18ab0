// Package jail is jaild's sandbox: it creates fresh, kernel-enforced jails
// with runc's libcontainer and hands out a handle to each (Jail): start its
// first process, signal it, wait for it, read its counters, resize, freeze
// and thaw it, and destroy it within a deadline. It knows nothing of what
// runs inside (package run decides that).
//
// It is the only package of jaild that imports libcontainer. A jail has its
// own user (host root unmapped), mount, pid, net (loopback only, or the
// egress of package egress), ipc, uts and cgroup namespaces; no
// capabilities and no_new_privs; the seccomp allowlist from
// seccomp-profiles/; cgroup memory (no swap) and pids limits; rlimits; the
// read-only rootfs image as an overlay of its own; and one size-limited
// tmpfs holding the workspace (WorkspaceDir), /tmp and MetaDir. Each live
// jail has a host id range of its own, handed out again only once every
// process of the jail is gone.
//
// A binary that uses this package must call Init first thing in main (and
// in TestMain), because libcontainer re-executes the binary as the jail's
// init process.
package jail
