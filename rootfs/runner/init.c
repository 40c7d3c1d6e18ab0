/*
 * jaild's pid 1 in a jail: /opt/jaild/init [--seccomp-fd N] PROGRAM [ARG...]
 *                          /opt/jaild/init --adopt PID JOBS PROGRAM [ARG...] (by 'x' only)
 *
 * With --seccomp-fd, before anything else: reads the jail's seccomp filter
 * (a program of struct sock_filter, compiled once by the daemon, in a
 * sealed memfd) from fd N, closes it and loads it; if that fails, ends
 * (exit 2) before PROGRAM starts. The daemon then has libcontainer load no
 * filter of its own (internal/jail/filterfd.go).
 *
 * Starts PROGRAM (the runner, which runs the user's code in its own
 * process), reaps every process that ends up its child, and when PROGRAM
 * ends, ends the same way: with its exit status or, as pid 1 cannot die by
 * a signal, with 128+N after writing {"type": "exit", "signal": N} to fd 4
 * (the runner's records pipe; see runner.py). Its end is the jail's end:
 * the kernel kills whatever is left in the pid namespace.
 *
 * A jail that may become a session (see internal/run/session.go) also gets
 *   fd 5  CONTROL, read: one byte per command from the daemon
 *         's'  session mode from now on: when PROGRAM ends, do not end
 *              the jail; kill every other process, report, and wait
 *         'i'  send SIGINT to PROGRAM (interrupt the user's code)
 *         'k'  send SIGKILL to PROGRAM
 *         'r'  after PROGRAM ended in session mode: start it afresh
 *         'x'  execute this init afresh in place, PROGRAM kept (--adopt):
 *              a session restored from a checkpoint has an init whose
 *              memory CRIU made outside the jail's user namespace, which
 *              CRIU cannot dump again while it is non-dumpable; a fresh
 *              execve makes it the jail's again
 *         EOF  the daemon is gone: in session mode, end the jail
 *   fd 6  STATUS, written: lines for the daemon
 *         "exit CODE SIGNAL"  PROGRAM ended (CODE -1 after a signal)
 *         "started"           PROGRAM was started afresh ('r'), or this
 *                             init executed afresh ('x')
 * Both are kept from PROGRAM (close-on-exec), and this process makes
 * itself non-dumpable, so that user code, which runs as the same user,
 * cannot reach them through /proc/1/fd: only the daemon commands init and
 * only init reports on PROGRAM. User code can still signal pid 1, which
 * ignores every signal it has no handler for (SIGCHLD is its only one).
 *
 * Then (after the filter) every signal's disposition is reset to SIG_DFL and
 * the signal mask emptied: an execve keeps ignored signals ignored and the
 * mask as it was, so without this a jail would inherit whatever the
 * daemon's own parent ignored or blocked (nohup's SIGHUP, a shell's
 * ignored signals), which the Go runtime and libcontainer pass on. For
 * pid 1 SIG_DFL is ignoring: the kernel drops a default-action signal to
 * a pid namespace's init (only SIGKILL and SIGSTOP from an ancestor
 * namespace get through).
 *
 * Why a separate pid 1: the kernel spares a pid namespace's init from
 * signals it has no handler for, even SIGKILL sent from inside, so user
 * code must not run as pid 1 (os.kill(os.getpid(), SIGKILL) would not end
 * it). Why C: a Python pid 1 had to fork the user's process, sharing its
 * interpreter's memory copy-on-write, and every page the run then touched
 * was copied (~2 ms of a warm run).
 *
 * Nothing here is a security boundary: the jail is.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOB_FD 3
#define RECORD_FD 4
#define CONTROL_FD 5
#define STATUS_FD 6

static void on_chld(int sig) { (void)sig; }

static int valid_fd(int fd) { return fcntl(fd, F_GETFD) >= 0; }

static void cloexec(int fd) { (void)fcntl(fd, F_SETFD, FD_CLOEXEC); }

static void set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		(void)fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

static void write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += w;
		n -= (size_t)w;
	}
}

/* Every catchable signal to SIG_DFL (see the top). The raw system call:
 * glibc's sigaction refuses the signals it reserves (32, 33), which an
 * execve keeps ignored as any other. All zero is SIG_DFL (0), no flags and
 * an empty mask in every architecture's struct sigaction. */
static void default_signals(void)
{
	static const unsigned long dfl[8];
	for (int sig = 1; sig < _NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		(void)syscall(SYS_rt_sigaction, sig, dfl, NULL, (size_t)(_NSIG - 1) / 8);
	}
}

static pid_t spawn(char **argv, const sigset_t *mask)
{
	pid_t child = fork();
	if (child < 0) {
		fprintf(stderr, "jaild init: fork: %s\n", strerror(errno));
		return -1;
	}
	if (child == 0) {
		sigprocmask(SIG_SETMASK, mask, NULL);
		execv(argv[0], argv);
		fprintf(stderr, "jaild init: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return child;
}

/* Loads the filter on fd ARG (see the top); 0 on success. */
static int load_filter(const char *arg)
{
	static struct sock_filter insns[4096 + 1]; /* BPF_MAXINSNS, and one to see more */
	char *end;
	errno = 0;
	long fd = strtol(arg, &end, 10);
	if (errno || end == arg || *end || fd < 3 || fd > 1024) {
		errno = EINVAL;
		return -1;
	}
	size_t got = 0;
	for (;;) {
		ssize_t r = read((int)fd, (char *)insns + got, sizeof insns - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
		if (got == sizeof insns) {
			errno = E2BIG;
			return -1;
		}
	}
	close((int)fd);
	if (got == 0 || got % sizeof insns[0]) {
		errno = EINVAL;
		return -1;
	}
	struct sock_fprog prog = {.len = (unsigned short)(got / sizeof insns[0]), .filter = insns};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

/* 'x': executes this init afresh, in session mode, adopting child (or
 * none, -1) and the jobs copy; returns only if the execve failed. The
 * control, status and jobs fds survive it; SIGCHLD stays blocked, so no
 * child's end is lost (a zombie waits for the new init's reap). */
static void reexec(char *self, char **program, pid_t child, int jobs)
{
	char pidarg[24], jobsarg[24];
	snprintf(pidarg, sizeof pidarg, "%d", (int)child);
	snprintf(jobsarg, sizeof jobsarg, "%d", jobs);
	int n = 0;
	while (program[n])
		n++;
	char **args = calloc((size_t)n + 5, sizeof *args);
	if (!args)
		return;
	args[0] = self;
	args[1] = "--adopt";
	args[2] = pidarg;
	args[3] = jobsarg;
	for (int i = 0; i < n; i++)
		args[4 + i] = program[i];
	int fds[] = {CONTROL_FD, STATUS_FD, jobs};
	for (int i = 0; i < 3; i++)
		(void)fcntl(fds[i], F_SETFD, 0);
	execv(self, args);
	for (int i = 0; i < 3; i++)
		cloexec(fds[i]);
	free(args);
}

int main(int argc, char **argv)
{
	char *self = argv[0]; /* this init's path, for 'x' */
	pid_t adopt = 0; /* --adopt: PROGRAM runs already (its pid; -1 none) */
	int adopt_jobs = -1;
	if (argc >= 5 && strcmp(argv[1], "--adopt") == 0) {
		char *end;
		long pid = strtol(argv[2], &end, 10);
		long jfd = *end ? -1 : strtol(argv[3], &end, 10);
		if (*end || pid < -1 || pid == 0 || jfd < 10 || jfd > 1024 || !valid_fd((int)jfd) ||
		    !valid_fd(CONTROL_FD) || !valid_fd(STATUS_FD)) {
			fputs("jaild init: bad --adopt\n", stderr);
			return 2;
		}
		adopt = (pid_t)pid;
		adopt_jobs = (int)jfd;
		argv[3] = argv[0];
		argv += 3;
		argc -= 3;
	}
	if (argc >= 3 && strcmp(argv[1], "--seccomp-fd") == 0) {
		if (load_filter(argv[2]) != 0) {
			fprintf(stderr, "jaild init: cannot load the jail's seccomp filter: %s\n", strerror(errno));
			return 2;
		}
		argv += 2;
		argc -= 2;
	}
	if (argc < 2) {
		fputs("usage: init PROGRAM [ARG...]\n", stderr);
		return 2;
	}
	default_signals();
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	int control = -1, status_fd = -1, jobs = -1;
	if (valid_fd(CONTROL_FD) && valid_fd(STATUS_FD)) {
		control = CONTROL_FD;
		status_fd = STATUS_FD;
		cloexec(control);
		cloexec(status_fd);
		set_nonblock(control, 1); /* init's alone: nobody else has it */
		/* A copy of the jobs pipe for a fresh PROGRAM. */
		jobs = adopt ? adopt_jobs : fcntl(JOB_FD, F_DUPFD_CLOEXEC, 10);
		cloexec(jobs);
		(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	} else if (adopt) {
		fputs("jaild init: --adopt without the control and status fds\n", stderr);
		return 2;
	}
	/* SIGCHLD is blocked but while waiting in ppoll, so that none is lost
	 * between a reap and the wait. */
	sigset_t chld, old, during;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	during = old;
	sigdelset(&during, SIGCHLD);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_chld;
	sigaction(SIGCHLD, &sa, NULL);

	pid_t child;
	int session = 0, ended = 0, estatus = 0;
	if (adopt) {
		/* Executed afresh by 'x': PROGRAM runs, or (-1) ended and was
		 * reported, and the daemon's next command is 'r'. */
		child = adopt;
		session = 1;
		write_all(status_fd, "started\n", 8);
		if (child < 0)
			goto await_restart;
	} else {
		child = spawn(argv + 1, &old);
		if (child < 0)
			return 2;
		close(JOB_FD); /* the runner's to read */
	}
	for (;;) {
		int st;
		pid_t pid;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			if (pid == child) {
				ended = 1;
				estatus = st;
				child = -1;
			}
			/* else an orphan, reaped */
		}
		if (ended) {
			/* Commands sent before PROGRAM ended (session mode). */
			char cmd[64];
			ssize_t n;
			while (control >= 0 && (n = read(control, cmd, sizeof cmd)) != 0) {
				if (n < 0) {
					if (errno == EINTR)
						continue;
					break;
				}
				if (memchr(cmd, 's', (size_t)n))
					session = 1;
			}
			if (!session) {
				if (WIFSIGNALED(estatus)) {
					/* On a line of its own, even after a record the
					 * runner was cut off in the middle of. */
					char rec[64];
					int m = snprintf(rec, sizeof rec, "\n{\"type\": \"exit\", \"signal\": %d}\n", WTERMSIG(estatus));
					write_all(RECORD_FD, rec, (size_t)m);
					return 128 + WTERMSIG(estatus);
				}
				return WEXITSTATUS(estatus);
			}
			/* Session mode: nothing of the old interpreter survives it. */
			kill(-1, SIGKILL);
			while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
				;
			write_all(RECORD_FD, "\n", 1); /* ends a record cut off */
			char line[64];
			int m = snprintf(line, sizeof line, "exit %d %d\n",
			                 WIFEXITED(estatus) ? WEXITSTATUS(estatus) : -1,
			                 WIFSIGNALED(estatus) ? WTERMSIG(estatus) : 0);
			write_all(status_fd, line, (size_t)m);
			ended = 0;
		await_restart:
			if (control < 0)
				return 0; /* the daemon is gone */
			/* Wait for 'r' (start afresh) or EOF (the end); 'x' here
			 * executes init afresh with no PROGRAM to adopt. */
			int restart = 0;
			while (!restart) {
				struct pollfd p = {.fd = control, .events = POLLIN};
				if (poll(&p, 1, -1) < 0 && errno != EINTR)
					return 1;
				n = read(control, cmd, sizeof cmd);
				if (n == 0)
					return 0;
				if (n > 0 && memchr(cmd, 'x', (size_t)n))
					reexec(self, argv + 1, -1, jobs);
				if (n > 0 && memchr(cmd, 'r', (size_t)n))
					restart = 1;
			}
			/* Whatever the old interpreter left unread of a job is not
			 * the new one's. */
			set_nonblock(jobs, 1);
			while (read(jobs, cmd, sizeof cmd) > 0)
				;
			set_nonblock(jobs, 0);
			if (dup2(jobs, JOB_FD) < 0)
				return 1;
			unsetenv("JAILD_PREIMPORT"); /* a fresh interpreter imports nothing ahead */
			child = spawn(argv + 1, &old);
			close(JOB_FD);
			if (child < 0)
				return 1;
			write_all(status_fd, "started\n", 8);
			continue;
		}
		struct pollfd p = {.fd = control, .events = POLLIN};
		int r = ppoll(&p, control >= 0 ? 1 : 0, NULL, &during);
		if (r > 0 && control >= 0) {
			char cmd[64];
			ssize_t n = read(control, cmd, sizeof cmd);
			if (n == 0) {
				/* The daemon is gone: in session mode that is the end;
				 * otherwise PROGRAM's end is. */
				if (session && child > 0)
					kill(child, SIGKILL);
				control = -1;
				continue;
			}
			for (ssize_t i = 0; i < n; i++) {
				switch (cmd[i]) {
				case 's':
					session = 1;
					break;
				case 'i':
					if (child > 0)
						kill(child, SIGINT);
					break;
				case 'k':
					if (child > 0)
						kill(child, SIGKILL);
					break;
				case 'x':
					if (session && child > 0)
						reexec(self, argv + 1, child, jobs);
					break;
				}
			}
		}
	}
}
