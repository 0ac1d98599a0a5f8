/*
 * The pod sandbox process of the real test node (the image containerd's CRI starts
 * first in every pod, under the name registry.k8s.io/pause:3.10). It holds the pod's
 * namespaces open and, as PID 1 of a pod that shares its process namespace, reaps
 * orphaned children. SIGINT and SIGTERM end it with status 0, as the kubelet expects
 * when it stops a sandbox.
 *
 * Built static (gcc -static) so the image needs no libc: FROM scratch plus this file.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signo) {
  (void)signo;
  _exit(0);
}

static void reap(int signo) {
  (void)signo;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

static int on(int signo, void (*handler)(int)) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = handler;
  action.sa_flags = signo == SIGCHLD ? SA_NOCLDSTOP | SA_RESTART : SA_RESTART;
  sigemptyset(&action.sa_mask);
  return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("tandem pause 3.10");
    return 0;
  }
  if (on(SIGINT, stop) || on(SIGTERM, stop) || on(SIGCHLD, reap)) {
    perror("pause: sigaction");
    return 1;
  }
  if (getpid() != 1) {
    fputs("pause: not PID 1: orphans are reaped only when it is\n", stderr);
  }
  for (;;) {
    pause();
  }
}
