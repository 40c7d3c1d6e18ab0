// Package jail runs one program in one fresh, single-use, kernel-enforced
// jail built with runc's libcontainer, and destroys the jail afterwards.
//
// It is the only package of jaild that imports libcontainer. A jail has its
// own user (host root unmapped), mount, pid, net (loopback only), ipc, uts
// and cgroup namespaces; no capabilities and no_new_privs; the seccomp
// allowlist from seccomp-profiles/; cgroup memory (no swap) and pids limits;
// rlimits; the read-only rootfs image; and one size-limited tmpfs holding
// the workspace (/workspace), /tmp and the runner's side channel (/jaild).
//
// Everything that comes back from a jail is hostile: output streams, the
// runner's records, figures and files are bounded, and files are read only
// after every process of the run is dead, beneath the workspace, without
// following any link.
//
// A binary that uses this package must call Init first thing in main (and
// in TestMain), because libcontainer re-executes the binary as the jail's
// init process.
package jail
