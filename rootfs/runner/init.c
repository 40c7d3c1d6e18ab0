/*
 * jaild's pid 1 in a jail: /opt/jaild/init PROGRAM [ARG...]
 *
 * Starts PROGRAM (the runner, which runs the user's code in its own
 * process), reaps every process that ends up its child, and when PROGRAM
 * ends, ends the same way: with its exit status or, as pid 1 cannot die by
 * a signal, with 128+N after writing {"type": "exit", "signal": N} to fd 4
 * (the runner's records pipe; see runner.py). Its end is the jail's end:
 * the kernel kills whatever is left in the pid namespace.
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
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOB_FD 3
#define RECORD_FD 4

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs("usage: init PROGRAM [ARG...]\n", stderr);
		return 2;
	}
	pid_t child = fork();
	if (child < 0) {
		fprintf(stderr, "jaild init: fork: %s\n", strerror(errno));
		return 2;
	}
	if (child == 0) {
		execv(argv[1], argv + 1);
		fprintf(stderr, "jaild init: exec %s: %s\n", argv[1], strerror(errno));
		_exit(127);
	}
	close(JOB_FD); /* the runner's to read */
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			return 1; /* no children left: cannot happen before PROGRAM ends */
		}
		if (pid != child)
			continue; /* an orphan, reaped */
		if (WIFSIGNALED(status)) {
			/* On a line of its own, even after a record the runner
			 * was cut off in the middle of. */
			char rec[64];
			int n = snprintf(rec, sizeof rec, "\n{\"type\": \"exit\", \"signal\": %d}\n", WTERMSIG(status));
			if (write(RECORD_FD, rec, (size_t)n) < 0) {
				/* no records pipe: the exit status says it alone */
			}
			return 128 + WTERMSIG(status);
		}
		return WEXITSTATUS(status);
	}
}
