// devplug-e2e-pause: the one program of the e2e's second image. Nothing can be
// pulled from a registry on the test machines, so scripts/e2e links this
// statically and wraps it in a one-layer image that serves twice:
//
//   devplug-e2e-pause                   the pod sandbox ("pause"): waits for
//                                       SIGTERM or SIGINT, reaps children
//   devplug-e2e-pause --open PATH...    a workload: opens each PATH read-write,
//                                       prints "open PATH: ok" or the error,
//                                       prints the environment entries named
//                                       by --env NAME, then waits as above;
//                                       --open-glob PATTERN opens every match
//                                       (a node whose number only Allocate
//                                       knows, /dev/tap*); --cat PATH prints
//                                       "cat PATH:" and the file (a device
//                                       metadata file, mounted read-only)
//
// Opening a node (not only seeing it) proves that the container runtime put
// it into the container's device cgroup, which is what Allocate asked for.
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) {
  (void)sig;
  stop = 1;
}

static void on_child(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

int main(int argc, char** argv) {
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--open") == 0) {
      for (++i; i < argc && strncmp(argv[i], "--", 2) != 0; ++i) {
        int fd = open(argv[i], O_RDWR | O_CLOEXEC);
        if (fd < 0) {
          printf("open %s: %s\n", argv[i], strerror(errno));
          ++failures;
        } else {
          printf("open %s: ok\n", argv[i]);
          close(fd);
        }
      }
      --i;
    } else if (strcmp(argv[i], "--open-glob") == 0 && i + 1 < argc) {
      glob_t g;
      ++i;
      if (glob(argv[i], 0, NULL, &g) != 0) {
        printf("glob %s: no match\n", argv[i]);
        ++failures;
        continue;
      }
      for (size_t k = 0; k < g.gl_pathc; ++k) {
        int fd = open(g.gl_pathv[k], O_RDWR | O_CLOEXEC);
        if (fd < 0) {
          printf("open %s: %s\n", g.gl_pathv[k], strerror(errno));
          ++failures;
        } else {
          printf("open %s: ok\n", g.gl_pathv[k]);
          close(fd);
        }
      }
      globfree(&g);
    } else if (strcmp(argv[i], "--cat") == 0 && i + 1 < argc) {
      FILE* f = fopen(argv[++i], "re");
      if (f == NULL) {
        printf("cat %s: %s\n", argv[i], strerror(errno));
        ++failures;
        continue;
      }
      printf("cat %s:\n", argv[i]);
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
      fclose(f);
      printf("\n");
    } else if (strcmp(argv[i], "--env") == 0 && i + 1 < argc) {
      const char* value = getenv(argv[++i]);
      printf("env %s=%s\n", argv[i], value ? value : "(unset)");
    } else {
      fprintf(stderr,
              "usage: %s [--open PATH...] [--open-glob PATTERN] [--cat PATH] [--env NAME]...\n",
              argv[0]);
      return 2;
    }
  }
  if (argc > 1) printf("checks done: %d failed\n", failures);
  fflush(stdout);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);

  // Blocked outside sigsuspend, so a signal between the test and the wait
  // is not lost.
  sigset_t blocked, none;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, NULL);
  sigemptyset(&none);
  while (!stop) sigsuspend(&none);
  return 0;
}
